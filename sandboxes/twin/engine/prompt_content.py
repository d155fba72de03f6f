"""What a live request's prompt is, which decides what the model writes and so the draft's acceptance.

The twin's benchmark knows its prompts by their dataset (``perf.workload.prompt_content``): real conversations
are natural text, decoded random token ids are token noise. A live server sees only the request. As the engine
would, it answers from the prompt itself:

* a chat request (messages under the chat template): the model answers a user turn in natural language;
* a prompt given as token ids, or a text whose words are not language: token noise. Decoded random ids (what
  ``random-ids`` and ``generated-shared-prefix`` send as text) are fragments of a vocabulary, among which the
  commonest function words of a language are as rare as any other token; in running text they are a third to a
  half of the words (``FUNCTION_WORDS``, English's);
* any other text, and a text too short to tell (``MIN_CHARS``): natural text.

A prompt in a language written without spaces, or with other function words, reads as token noise: the draft's
lower acceptance, a pessimistic error.
"""

from __future__ import annotations

import re

from ..perf.cost_model import NATURAL_TEXT, TOKEN_NOISE

# the commonest English words (articles, prepositions, pronouns, auxiliaries, conjunctions)
FUNCTION_WORDS = frozenset(
    ["a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as", "into", "about", "and", "or", "but", "not", "no", "so", "if", "then", "than", "that", "this", "these", "those", "it", "its", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "have", "has", "had", "will", "would", "can", "could", "shall", "should", "may", "might", "must", "i", "you", "he", "she", "we", "they", "me", "him", "her", "us", "them", "my", "your", "his", "our", "their", "what", "which", "who", "whom", "how", "when", "where", "why", "there", "here", "all", "any", "some", "each"])  # fmt: skip
NATURAL_SHARE = 0.1  # a text whose words are at least this share function words is language
MIN_CHARS = 200  # a shorter text is taken as natural text (too short to tell)
SAMPLE_CHARS = 20_000  # the start of a long prompt is enough to tell
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def text_content(text: str) -> str:
    """``NATURAL_TEXT`` or ``TOKEN_NOISE`` for a text prompt (see the module's description)."""
    if len(text) < MIN_CHARS:
        return NATURAL_TEXT
    words = text[:SAMPLE_CHARS].split()  # a long text of few or no words (no spaces) has no function words
    function = sum(1 for w in words if (m := _WORD.search(w)) and m.group(0).lower() in FUNCTION_WORDS)
    return NATURAL_TEXT if words and function >= NATURAL_SHARE * len(words) else TOKEN_NOISE


def prompt_content(text: str | None, chat: bool = False) -> str:
    """What the model writes for a prompt: ``text`` None means it came as token ids; ``chat``: under the chat
    template."""
    if chat:
        return NATURAL_TEXT
    if text is None:
        return TOKEN_NOISE
    return text_content(text)
