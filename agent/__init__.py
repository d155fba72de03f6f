"""The dayzero agent: a LangGraph loop that brings a model up on new accelerators (graph, policies, CLI)."""
