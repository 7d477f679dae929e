"""Sync and async callers walk the same steps (engine step 3, DESIGN §8).

The lifecycle (acquire, release, extend, adopt, the ``with`` exit, an election's
campaign and resignation) is written once and run by two drivers. Here a scripted
transport answers a lock's operations from an in-memory model of its keys and records
every operation sent. Each public call is run through both drivers, cleanly and then
with a fault injected at every step: a lost reply (the server ran the operation, the
client got a connection error), and for async callers a cancel at that step, a cancel
that redis-py swallowed, and a cancel just after it. The walks (the operations sent, the
result or the error) must be equal, and no call may end with a key or a claim of its
token that the lock object does not know it holds.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from django_redislock import Election, Lock
from django_redislock.kinds import Operation

OTHER = "someone-else"


@dataclass
class Fault:
    """What happens at operation number ``at`` (0-based) of the call under test."""

    at: int
    #: "lost": ran, then a connection error; "cancel": ran, then the caller is cancelled;
    #: "swallowed": ran, the cancel was swallowed mid-command; "after": cancelled after it.
    how: str


@dataclass
class Model:
    """The keys of one mutex: who holds it, who claims the next turn."""

    holder: str | None = None
    claim: str | None = None
    fence: int = 0


@dataclass
class Scripted:
    """A transport answering from :class:`Model`; ``plan`` says which acquires are granted."""

    model: Model
    plan: list[str] = field(default_factory=list)
    fault: Fault | None = None
    sent: list[Operation] = field(default_factory=list)
    #: The caller's task (a shielded step runs in a task of its own): the one cancelled.
    caller: asyncio.Task[Any] | None = None

    renew_group = None

    def _answer(self, op: Operation) -> tuple[Any, bool]:
        """(the parsed reply, whether the fault strikes here), the model updated."""
        index = len(self.sent)
        self.sent.append(op)
        name, token, model = op.script.name, op.args[0] if op.args else None, self.model
        if name == "acquire":
            grant = (self.plan.pop(0) if self.plan else "grant") == "grant"
            if grant and model.holder in (None, token):
                model.holder, model.fence = token, model.fence + 1
                model.claim = None if model.claim == token else model.claim
                reply: Any = [1, model.fence]
            else:
                if op.args[4]:  # a waiter with a place in line claims the next turn
                    model.claim = token
                reply = [0, 1, 1000, OTHER, 7, b""]
        elif name in ("release", "extend"):
            reply = int(model.holder == token)
            if reply and name == "release":
                model.holder = None
        elif name == "unclaim":
            reply = int(token in (model.claim, model.holder))
            model.claim = None if model.claim == token else model.claim
            model.holder = None if model.holder == token else model.holder
        elif name == "read_holder":
            reply = [] if model.holder is None else [model.holder, 900, model.fence, b""]
        else:  # pragma: no cover - a new operation: teach the model
            raise AssertionError(f"unscripted operation {name}")
        return op.parse(reply), self.fault is not None and self.fault.at == index

    def call(self, op: Operation) -> Any:
        reply, strikes = self._answer(op)
        if strikes:
            raise RedisConnectionError("injected: reply lost")
        return reply

    async def acall(self, op: Operation) -> Any:
        reply, strikes = self._answer(op)
        if not strikes or self.fault is None:
            return reply
        task = self.caller
        assert task is not None
        if self.fault.how == "lost":
            raise RedisConnectionError("injected: reply lost")
        if self.fault.how == "after":
            asyncio.get_running_loop().call_soon(task.cancel)
            return reply
        task.cancel()
        if self.fault.how == "swallowed":
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                return reply  # as redis-py can: the cancel is eaten mid-command
        await asyncio.sleep(0)
        return reply  # pragma: no cover - the cancel raised above

    def call_many(self, ops: list[Operation]) -> list[Any]:  # pragma: no cover - no watchdog
        return [self.call(op) for op in ops]

    async def acall_many(self, ops: list[Operation]) -> list[Any]:  # pragma: no cover
        return [await self.acall(op) for op in ops]


class ScriptedLock(Lock):
    """A Lock whose operations go to a scripted transport; backoff only (no pub/sub)."""

    def _wake_alias(self) -> str | None:
        return None


@dataclass
class Walk:
    steps: list[tuple[Any, ...]]
    outcome: str
    holder_known: bool


def _normalise(sent: list[Operation], tokens: dict[str, str]) -> list[tuple[Any, ...]]:
    steps = []
    for op in sent:
        token = op.args[0] if op.args else None
        if isinstance(token, str):
            token = tokens.setdefault(token, f"t{len(tokens)}")
        extra = (bool(op.args[4]),) if op.script.name == "acquire" else ()
        steps.append((op.script.name, token, *extra))
    return steps


#: Each call under test: (set-up, the sync call, the async call).
Setup = Callable[[ScriptedLock, Model], None]


def _held(lock: ScriptedLock, model: Model) -> None:
    model.holder, model.fence = "held-token", 3
    lock._took("held-token", 3, lock_clock())


def lock_clock() -> float:
    from django_redislock.clock import now

    return now()


def _free(lock: ScriptedLock, model: Model) -> None:
    return None


def _adopt_from(lock: ScriptedLock, model: Model) -> None:
    model.holder, model.fence = "handed-token", 5


async def _aexit_with(lock: Any) -> None:
    async with lock:
        pass


def _exit_with(lock: Any) -> None:
    with lock:
        pass


def _election(lock: ScriptedLock) -> Election:
    """An election whose terms are ``lock`` (already held if the set-up took it)."""
    election = Election(lock.name)
    election._new_lock = lambda timeout: lock  # type: ignore[method-assign]
    if lock.token is not None:
        election._lock = lock
    return election


CALLS: dict[str, tuple[Setup, list[str], Callable[[Any], Any], Callable[[Any], Any]]] = {
    "acquire": (_free, [], lambda lk: lk.acquire(), lambda lk: lk.aacquire()),
    "acquire-busy-once": (
        _free,
        ["busy"],
        lambda lk: lk.acquire(blocking=False),
        lambda lk: lk.aacquire(blocking=False),
    ),
    "acquire-after-waiting": (
        _free,
        ["busy", "busy", "grant"],
        lambda lk: lk.acquire(timeout=30),
        lambda lk: lk.aacquire(timeout=30),
    ),
    "release": (_held, [], lambda lk: lk.release(), lambda lk: lk.arelease()),
    "extend": (_held, [], lambda lk: lk.extend(), lambda lk: lk.aextend()),
    "adopt": (
        _adopt_from,
        [],
        lambda lk: lk.adopt("handed-token"),
        lambda lk: lk.aadopt("handed-token"),
    ),
    "with": (_free, ["busy", "grant"], _exit_with, _aexit_with),
    "campaign": (
        _free,
        ["busy", "grant"],
        lambda lk: _election(lk).campaign(),
        lambda lk: _election(lk).acampaign(),
    ),
    "resign": (
        _held,
        [],
        lambda lk: _election(lk).resign(),
        lambda lk: _election(lk).aresign(),
    ),
}


def _walk(name: str, fault: Fault | None, *, use_async: bool) -> Walk:
    setup, plan, sync_call, async_call = CALLS[name]
    model = Model()
    transport = Scripted(model, list(plan))
    lock = ScriptedLock(f"walk-{name}", ttl=30, watchdog=False)
    lock.transport = transport  # type: ignore[assignment]
    setup(lock, model)
    transport.fault = fault
    try:
        if use_async:

            async def as_caller() -> Any:
                transport.caller = asyncio.current_task()
                return await async_call(lock)

            result = asyncio.run(as_caller())
        else:
            result = sync_call(lock)
        outcome = f"returned {result!r}"
    except BaseException as exc:  # the outcome is what is compared
        outcome = f"raised {type(exc).__name__}"
    tokens: dict[str, str] = {}
    steps = _normalise(transport.sent, tokens)
    ours = [t for t in (model.holder, model.claim) if t is not None and t != OTHER]
    known = all(t == lock.token or t in ("held-token", "handed-token") for t in ours)
    # A claim of a call that ended is a key nobody knows about.
    known = known and (model.claim is None or model.claim == OTHER)
    if model.holder is not None and model.holder == lock.token:
        known = known and lock.token is not None
    return Walk(steps, outcome, known)


def _faults(name: str) -> Iterator[int]:
    yield from range(len(_walk(name, None, use_async=False).steps))


@pytest.mark.parametrize("name", list(CALLS))
def test_both_drivers_walk_the_same_steps(name: str) -> None:
    sync_walk = _walk(name, None, use_async=False)
    assert sync_walk.outcome not in ("", None)
    assert _walk(name, None, use_async=True) == sync_walk
    assert sync_walk.holder_known


@pytest.mark.parametrize("name", list(CALLS))
def test_a_lost_reply_at_every_step_walks_the_same_and_leaves_nothing_unknown(name: str) -> None:
    for at in _faults(name):
        fault = Fault(at, "lost")
        sync_walk = _walk(name, fault, use_async=False)
        assert sync_walk.outcome.startswith("raised"), (at, sync_walk)
        assert _walk(name, fault, use_async=True) == sync_walk, at
        assert sync_walk.holder_known, (at, sync_walk)


CANCELS = ["cancel", "after"] + (["swallowed"] if sys.version_info >= (3, 11) else [])


@pytest.mark.parametrize("how", CANCELS)
@pytest.mark.parametrize("name", list(CALLS))
def test_a_cancel_at_every_step_leaves_nothing_unknown(name: str, how: str) -> None:
    for at in _faults(name):
        walk = _walk(name, Fault(at, how), use_async=True)
        assert walk.holder_known, (at, how, walk)
        if how != "after":
            assert walk.outcome == "raised CancelledError", (at, how, walk)
