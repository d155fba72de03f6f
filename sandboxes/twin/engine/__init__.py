"""The SGLang engine the twin simulates: its command line, start-up, weight loading, JIT kernels, memory and HTTP API."""
