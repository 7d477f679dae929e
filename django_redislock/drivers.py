"""The two drivers of the lock lifecycle: :func:`run` for sync callers, :func:`arun` for
async ones.

A lifecycle call (:mod:`django_redislock.protocol`) is a generator that yields what it
needs done, a :class:`~.steps.Send` (one of the lock's operations, by the lock's hooks)
or a :class:`~.steps.Wait` (sleep until woken or a deadline), and receives the reply;
an error the step raised is thrown into it instead, so its own clean-up runs. The drivers
only do the steps: the lifecycle is written once, and both kinds of caller walk the same
steps.

The cancellation rules of async calls live here, and only here:

* A caller cancelled while a step is in flight: the ``CancelledError`` is thrown into
  the generator, and every step it then yields (its clean-up) runs to its end in a task
  of its own (held in ``_background_tasks`` so it is not garbage-collected) before the
  cancel completes. A second cancel stops the waiting, not the clean-up. A clean-up's
  error is logged, not raised: the key or claim expires by itself.
* A cancel that redis-py swallowed mid-command (the task was asked to cancel, the
  command returned anyway; seen through ``Task.cancelling()``, Python 3.11+) is
  honoured: the generator gets a ``CancelledError`` in place of the reply.
* A ``shielded`` step (a release) runs to its end: a cancelled caller still gets its
  lock released, and the cancel then propagates. A ``repeatable`` one (a
  compare-and-delete by token) runs in the caller's task and is sent again in a task of
  its own if the caller is cancelled mid-way; any other runs in a task of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Generator
from typing import Any, TypeVar

from .steps import Send, Step, Wait, async_name
from .waiting import LoopWake, ThreadWake

release_logger = logging.getLogger("django_redislock.release")

T = TypeVar("T")

#: A lifecycle call: yields steps, receives their replies, returns its result.
Lifecycle = Generator[Step, Any, T]

# Strong references to clean-up tasks started when an async call is cancelled.
_background_tasks: set[asyncio.Task[Any]] = set()


def run(call: Lifecycle[T]) -> T:
    """Drive ``call`` to its end from a thread: each step done in turn, blocking."""
    try:
        step = next(call)
        while True:
            try:
                if isinstance(step, Wait):
                    reply: Any = _wait(step)
                else:
                    reply = getattr(step.target, step.method)(*step.args)
            except BaseException as exc:  # the generator's clean-up decides
                step = call.throw(exc)
            else:
                step = call.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


def _wait(step: Wait) -> bool:
    wakeup = step.wakeup
    if wakeup is None:
        time.sleep(step.seconds)
        return False
    assert isinstance(wakeup, ThreadWake), "a wake-up made without a loop"
    return wakeup.wait(step.seconds)


async def arun(call: Lifecycle[T]) -> T:
    """Drive ``call`` to its end in the running event loop (see the module's rules)."""
    cancelled = False
    try:
        step = next(call)
        while True:
            try:
                if isinstance(step, Wait):
                    reply: Any = await _await_wait(step)
                elif cancelled:  # clean-up after a cancel: no reply to act on
                    await finish_shielded(_acall(step))
                    reply = None
                elif step.shielded and step.repeatable:
                    cancels = cancel_count()
                    try:
                        reply = await _acall(step)
                    except asyncio.CancelledError:
                        in_background(_acall(step))  # it may not have reached Redis: again
                        raise
                    if cancel_count() > cancels:
                        raise asyncio.CancelledError  # swallowed mid-command; the step is done
                elif step.shielded:
                    reply = await asyncio.shield(in_background(_acall(step)))
                else:
                    cancels = cancel_count()
                    reply = await _acall(step)
                    if cancel_count() > cancels:
                        raise asyncio.CancelledError  # swallowed by redis-py mid-command
            except asyncio.CancelledError as exc:
                cancelled = True
                step = call.throw(exc)
            except BaseException as exc:
                step = call.throw(exc)
            else:
                step = call.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


def _acall(step: Send) -> Any:
    """The coroutine of ``step``'s async method."""
    return getattr(step.target, async_name(step.method))(*step.args)


async def _await_wait(step: Wait) -> bool:
    wakeup = step.wakeup
    if wakeup is None:
        await asyncio.sleep(step.seconds)
        return False
    assert isinstance(wakeup, LoopWake), "a wake-up made for this loop"
    return await wakeup.wait(step.seconds)


def cancel_count() -> int:
    """How many cancels the current task has been asked for (0 before Python 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def in_background(coro: Any) -> asyncio.Task[Any]:
    """``coro`` in a task of its own, kept alive until it ends."""
    task = asyncio.ensure_future(coro)
    _background_tasks.add(task)
    task.add_done_callback(_background_done)
    return task


async def finish_shielded(coro: Any) -> None:
    """Run a clean-up to its end even though the caller is being cancelled."""
    task = in_background(coro)
    with contextlib.suppress(Exception):
        await asyncio.shield(task)


def _background_done(task: asyncio.Task[Any]) -> None:
    _background_tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        # Retrieved here so asyncio does not warn; the awaiting caller (if any) re-raises it.
        release_logger.debug("background lock call failed: %r", task.exception())


__all__ = ["Lifecycle", "arun", "cancel_count", "finish_shielded", "in_background", "run"]
