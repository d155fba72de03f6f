"""Policies: given the state, propose the next tool calls (or finish). See ``base`` for the interface and
``llm`` for the LLM-driven policy."""
