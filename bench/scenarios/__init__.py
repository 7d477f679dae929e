"""Benchmark scenarios. Each module exposes ``run(ctx) -> Section``."""
