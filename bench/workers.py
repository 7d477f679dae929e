"""Spawned worker processes for the contended scenario.

Each worker builds the same kind of lock on the same name and loops
acquire → hold → release until a shared deadline, recording when each acquire completed and
each release was invoked (``time.monotonic_ns()`` is one clock for every process on Linux),
its longest wait and its own CPU time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import resource
import threading
import time
import traceback
from array import array
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench.adapters import SYNC_PEERS, SyncLock, Target, observing, redlock_peers


@dataclass
class WorkerResult:
    """What one worker reports after a run."""

    index: int
    acquired: int  # acquisitions completed before the deadline
    starts: bytes  # array('q'): acquire-complete times, ns
    ends: bytes  # array('q'): release-invoke times, ns
    longest_wait_ns: int
    cpu_s: float
    error: str | None = None


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _loop(lock: SyncLock, index: int, start_ns: int, end_ns: int, hold_s: float) -> WorkerResult:
    starts, ends = array("q"), array("q")
    acquired = 0
    longest = 0
    while time.monotonic_ns() < start_ns:
        time.sleep(min(0.01, max(0.0, (start_ns - time.monotonic_ns()) / 1e9)))
    cpu0 = _cpu()
    while True:
        t0 = time.monotonic_ns()
        if t0 >= end_ns:
            break
        ok = lock.acquire(blocking=True, timeout=(end_ns - t0) / 1e9)
        t1 = time.monotonic_ns()
        longest = max(longest, (t1 if ok else min(t1, end_ns)) - t0)
        if not ok:
            continue
        if t1 < end_ns:
            acquired += 1
        if hold_s:
            time.sleep(hold_s)
        t2 = time.monotonic_ns()
        lock.release()
        starts.append(t1)
        ends.append(t2)
    return WorkerResult(index, acquired, starts.tobytes(), ends.tobytes(), longest, _cpu() - cpu0)


def _threads(
    peer: Any,
    target: Target,
    name: str,
    ttl: float,
    count: int,
    start_ns: int,
    end_ns: int,
    hold_s: float,
) -> list[WorkerResult]:
    """``count`` threads of this process, each with its own lock object on ``name``.

    CPU is the whole process's, split evenly over the threads' results."""
    locks = [peer.build(target, name, ttl) for _ in range(count)]
    for index in range(count):  # warm the scripts and a connection per thread
        warm = peer.build(target, f"{name}:warm{index}", ttl)
        warm.acquire(blocking=False)
        warm.release()
    results: list[WorkerResult | None] = [None] * count

    def body(index: int) -> None:
        results[index] = _loop(locks[index], index, start_ns, end_ns, hold_s)

    cpu0 = _cpu()
    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    with observing(locks[0]):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    share = (_cpu() - cpu0) / count
    done = [r for r in results if r is not None]
    if len(done) != count:
        raise RuntimeError("a bench thread failed")
    return [_with_cpu(r, share) for r in done]


def _with_cpu(result: WorkerResult, cpu_s: float) -> WorkerResult:
    return dataclasses.replace(result, cpu_s=cpu_s)


def worker_main(conn: Connection, index: int, target: Target) -> None:
    """Serve ``prepare`` / ``run`` / ``stop`` messages from the parent."""
    peers = {**SYNC_PEERS, **redlock_peers()}
    lock: SyncLock | None = None
    while True:
        message: tuple[Any, ...] = conn.recv()
        kind = message[0]
        try:
            if kind == "stop":
                return
            if kind == "prepare":
                _, peer_key, name, ttl = message
                peer = peers[peer_key]
                warm = peer.build(target, f"{name}:warm{index}", ttl)
                warm.acquire(blocking=False)
                warm.release()
                lock = peer.build(target, name, ttl)
                conn.send(("ready", None))
            elif kind == "run":
                _, start_ns, end_ns, hold_s = message
                assert lock is not None
                with observing(lock):
                    result = _loop(lock, index, start_ns, end_ns, hold_s)
                conn.send(("done", result))
            elif kind == "threads":
                _, peer_key, name, ttl, count, start_ns, end_ns, hold_s = message
                conn.send(
                    (
                        "done",
                        _threads(
                            peers[peer_key], target, name, ttl, count, start_ns, end_ns, hold_s
                        ),
                    )
                )
        except Exception:
            conn.send(("error", traceback.format_exc()))


class WorkerPool:
    """A fixed set of spawned workers, reused for every peer and round."""

    def __init__(self, size: int, target: Target) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs = []
        for index in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, index, target), daemon=True)
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)

    def _gather(self, count: int, timeout: float) -> list[Any]:
        replies, errors = [], []
        deadline = time.monotonic() + timeout
        for conn in self._conns[:count]:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError("a bench worker did not answer")
            status, payload = conn.recv()
            if status == "error":
                errors.append(payload)
            else:
                replies.append(payload)
        if errors:  # every reply was read, so the pipes stay in step for the next run
            raise RuntimeError(f"bench worker failed:\n{errors[0]}")
        return replies

    def prepare(self, count: int, peer_key: str, name: str, ttl: float) -> None:
        """Have the first ``count`` workers build their lock and warm their connection."""
        for conn in self._conns[:count]:
            conn.send(("prepare", peer_key, name, ttl))
        self._gather(count, timeout=60)

    def run(self, count: int, duration: float, hold_s: float) -> list[WorkerResult]:
        """Start the prepared workers together and return their results."""
        start_ns = time.monotonic_ns() + 50_000_000
        end_ns = start_ns + int(duration * 1e9)
        for conn in self._conns[:count]:
            conn.send(("run", start_ns, end_ns, hold_s))
        return self._gather(count, timeout=duration + 60)

    def run_threads(
        self, peer_key: str, name: str, ttl: float, count: int, duration: float, hold_s: float
    ) -> list[WorkerResult]:
        """``count`` threads of the first worker process on ``name``: one result per thread."""
        start_ns = time.monotonic_ns() + 200_000_000
        end_ns = start_ns + int(duration * 1e9)
        conn = self._conns[0]
        conn.send(("threads", peer_key, name, ttl, count, start_ns, end_ns, hold_s))
        results: list[WorkerResult] = self._gather(1, timeout=duration + 60)[0]
        return results

    def close(self) -> None:
        """Stop every worker."""
        for conn in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("stop",))
        for proc in self._procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
