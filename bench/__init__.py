"""Benchmarks of django-redislock against its peers: ``python -m bench --help``."""
