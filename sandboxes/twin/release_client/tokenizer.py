"""The tokenizer the release's client uses against the twin: the checkpoint's own, or a stated stand-in.

The release's ``bench_serving`` needs a tokenizer to make its prompts (``random-ids`` decodes runs of token ids,
``generated-shared-prefix`` decodes ids drawn from the vocabulary) and to count what the server wrote. A
checkpoint's directory on a real node holds its tokenizer; a twin workspace holds the checkpoint's config files
and often not the tokenizer's vocabulary (``tokenizer.json`` is tens of megabytes). Then the client gets the
**stand-in**: a word-level tokenizer (the ``tokenizers`` library) with the checkpoint's vocabulary size, whose
every token is four characters and which adds no special tokens, so a prompt of N tokens is 4N characters:
exactly what the twin's server counts for a text prompt (``ceil(len(text) / 4)``). Its tokens are the letters
and digits of base 36, no words: the text it writes is token noise, as the prompts of those datasets are.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..workspace import release

TOKEN_CHARS = 4  # characters per token, as the twin's server counts a text prompt
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
DEFAULT_VOCAB = 32_000  # when the config names no vocabulary size
FORMAT = "1"  # of the stand-in's files (bumped when they change)


def own_tokenizer(model_dir: Path) -> bool:
    """Whether ``model_dir`` holds a tokenizer ``transformers`` can load without the network."""
    from transformers import AutoTokenizer

    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        return False
    try:
        AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False, local_files_only=True)
    except Exception:  # noqa: BLE001 (any failure to load means: not usable as the client's tokenizer)
        return False
    return True


def vocab_size(model_dir: Path) -> int:
    """The checkpoint's vocabulary size from its ``config.json`` (a nested text config's, for a multimodal
    wrapper), else ``DEFAULT_VOCAB``."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return DEFAULT_VOCAB
    for section in (config, config.get("text_config") or {}, config.get("llm_config") or {}):
        if isinstance(section, dict) and isinstance(section.get("vocab_size"), int) and section["vocab_size"] > 0:
            return section["vocab_size"]
    return DEFAULT_VOCAB


def _token(i: int) -> str:
    chars = []
    for _ in range(TOKEN_CHARS):
        i, digit = divmod(i, len(ALPHABET))
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def stand_in(size: int, cache: Path | None = None) -> Path:
    """The stand-in tokenizer's directory for a vocabulary of ``size`` (made once, in the per-user cache)."""
    size = max(1, min(size, len(ALPHABET) ** TOKEN_CHARS))
    try:
        return _made(size, (cache or release.cache_dir()) / "tokenizers")
    except OSError:  # a read-only home (a container's): the temporary folder
        return _made(size, Path(tempfile.gettempdir()) / "dayzero-tokenizers")


def _made(size: int, parent: Path) -> Path:
    folder = parent / f"stand-in-{FORMAT}-{size}"
    if (folder / "tokenizer.json").is_file():
        return folder
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {_token(i): i for i in range(size)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=_token(size - 1)))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(f"(?m).{{1,{TOKEN_CHARS}}}"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30,
        "clean_up_tokenization_spaces": False,
        "dayzero": "the twin's stand-in tokenizer: 4 characters per token, no special tokens"}, indent=1))
    try:
        tmp.rename(folder)
    except OSError:  # another process made it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "tokenizer.json").is_file():
            raise
    return folder


def client_tokenizer(model_dir: Path, cache: Path | None = None) -> tuple[Path, bool]:
    """The tokenizer the client loads for ``model_dir``: (its directory, whether it is the stand-in)."""
    if own_tokenizer(model_dir):
        return model_dir, False
    return stand_in(vocab_size(model_dir), cache), True
