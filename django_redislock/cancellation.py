"""Moved: the cancellation rules of async calls live in :mod:`django_redislock.drivers`."""

from __future__ import annotations

from .drivers import _background_tasks, cancel_count, finish_shielded, in_background

__all__ = ["_background_tasks", "cancel_count", "finish_shielded", "in_background"]
