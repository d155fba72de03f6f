"""What the pinned release's own ``bench_serving`` needs around it to measure a live twin (``release_bench.py``):
its package importable without the engine's libraries (``imports``), a tokenizer (``tokenizer``), and the
conversion of its wall-clock record to the twin's simulated time (``clock``)."""
