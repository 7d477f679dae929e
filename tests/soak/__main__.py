"""The mixed-fault soak: ``python -m tests.soak [--seconds N] [--broken] [--faults ...]``.

``make soak`` runs it for ``SOAK_SECONDS`` (default 600); ``make test`` runs a 30 s form
(``tests/test_soak.py``). It starts its own servers: one for ``Lock`` names (append-only,
``fsync always``), three Redlock nodes (the same, each behind a :class:`FaultProxy`) and
one for the protected resources, which no fault touches. Worker processes
(:mod:`tests.soak.worker`) of threads and asyncio tasks lock four ``Lock`` names, two
``Redlock`` names, two ``Semaphore`` names (limits 2 and 3), two ``ReadWriteLock`` names
(70 % readers), ``MultiLock``s over 2-3 of the ``Lock`` names, and campaign in an
``Election``; every critical section of a Lock or a Redlock does a fenced
read-modify-write. ``--<kind>-workers 0`` leaves a kind out. Meanwhile the controller
injects one fault at a time, at random (``FAULTS``), and logs it. At the end the workers
stop by themselves, the controller waits for the last keys to expire, and
:mod:`tests.soak.checks` reads the histories: violations must be 0.

``--broken`` runs a deliberately broken variant of every kind (see
:mod:`tests.soak.subjects`), which the checkers must catch. Exit status: 0 when the run
had no violation (with ``--broken``: when it had some), 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django_redislock.testing import FaultProxy, RedisServer
from tests.faults.harness import now_ns, read_history
from tests.soak.checks import ELECTION_NAMES, FAULTS, RWLOCK_NAMES, SEMAPHORE_LIMITS, check_all
from tests.soak.resource import NamedResource
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
LOCK_NAMES = ["soak-a", "soak-b", "soak-c", "soak-d"]
REDLOCK_NAMES = ["soak-r1", "soak-r2"]
SEMAPHORE_NAMES = list(SEMAPHORE_LIMITS)
#: Each kind's names (a MultiLock's parts are the plain Lock names) and default workers.
NAMES = {
    "lock": LOCK_NAMES,
    "redlock": REDLOCK_NAMES,
    "semaphore": SEMAPHORE_NAMES,
    "rwlock": RWLOCK_NAMES,
    "multilock": LOCK_NAMES,
    "election": ELECTION_NAMES,
}
WORKERS = {"lock": 4, "redlock": 2, "semaphore": 2, "rwlock": 2, "multilock": 2, "election": 2}
#: Threads and asyncio tasks per worker process, by kind (the rest: 2 and 2).
ACTORS = {"redlock": (1, 1), "multilock": (1, 1), "election": (1, 1)}
TTL = 1.0
REDLOCK_TTL = 2.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    parser.add_argument(
        "--broken",
        action="store_true",
        help="a broken variant of every kind (a Lock released without its token check, ...)",
    )
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=FAULTS)
    for kind, workers in WORKERS.items():
        parser.add_argument(f"--{kind}-workers", type=int, default=workers, metavar="N")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--report", type=Path, default=None, help="write the report here too")
    parser.add_argument("--json", type=Path, default=None, help="the figures as JSON")
    parser.add_argument(
        "--keep", type=Path, default=None, help="copy the histories and the fault log here"
    )
    return parser.parse_args(argv)


class Soak:
    """Servers, workers and faults of one run."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = workdir
        self.history_dir = workdir / "history"
        self.history_dir.mkdir()
        self.lock_server = RedisServer(appendonly=True, appendfsync="always").start()
        self.nodes = [RedisServer(appendonly=True, appendfsync="always").start() for _ in range(3)]
        self.proxies = [FaultProxy(node) for node in self.nodes]
        self.resource_server = RedisServer().start()
        self.resources = {
            name: NamedResource(self.resource_server.url, name)
            for name in LOCK_NAMES + REDLOCK_NAMES + RWLOCK_NAMES + ELECTION_NAMES
        }
        for resource in self.resources.values():
            resource.create()
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.kinds: dict[str, str] = {}
        self.faults: list[dict[str, Any]] = []
        self.spawned = 0
        self.deadline = time.monotonic() + args.seconds

    # -- workers -----------------------------------------------------------------------
    def spawn(self, kind: str) -> None:
        self.spawned += 1
        worker = f"w{self.spawned}"
        threads, tasks = ACTORS.get(kind, (2, 2))
        config = {
            "worker": worker,
            "kind": kind,
            "names": NAMES[kind],
            "ttl": REDLOCK_TTL if kind == "redlock" else TTL,
            "lock_url": self.lock_server.url,
            "node_urls": [proxy.url for proxy in self.proxies],
            "resource_url": self.resource_server.url,
            "history_dir": str(self.history_dir),
            "threads": threads,
            "tasks": tasks,
            "deadline": self.deadline,
            "broken": self.args.broken,
        }
        self.workers[worker] = subprocess.Popen(
            [sys.executable, "-m", "tests.soak.worker", json.dumps(config)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stderr=open(self.workdir / f"{worker}.err", "wb"),  # noqa: SIM115
        )
        self.kinds[worker] = kind

    def live_workers(self) -> list[str]:
        return [w for w, proc in self.workers.items() if proc.poll() is None]

    # -- faults ------------------------------------------------------------------------
    def servers(self) -> list[tuple[str, RedisServer]]:
        return [("lock", self.lock_server)] + [
            (f"node{i}", node) for i, node in enumerate(self.nodes)
        ]

    def fault(self, kind: str) -> dict[str, Any] | None:
        record: dict[str, Any] = {"type": kind, "start_ns": now_ns()}
        action: Callable[[dict[str, Any]], bool] = getattr(self, "_" + kind.replace("-", "_"))
        if not action(record):
            return None
        record["end_ns"] = now_ns()
        self.faults.append(record)
        return record

    def _pick_worker(self, record: dict[str, Any]) -> subprocess.Popen[bytes] | None:
        live = self.live_workers()
        if not live:
            return None
        worker = self.rng.choice(live)
        record["worker"] = worker
        return self.workers[worker]

    def _stop(self, record: dict[str, Any]) -> bool:
        proc = self._pick_worker(record)
        if proc is None:
            return False
        seconds = self.rng.uniform(0.1, 2.5 * TTL)  # often past the TTL
        record["seconds"] = round(seconds, 3)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(seconds)  # the pause is the fault, not a synchronisation
        proc.send_signal(signal.SIGCONT)
        return True

    def _kill(self, record: dict[str, Any]) -> bool:
        proc = self._pick_worker(record)
        if proc is None:
            return False
        proc.kill()
        proc.wait()
        if time.monotonic() < self.deadline - 1:
            self.spawn(self.kinds[record["worker"]])
        return True

    def _client_kill(self, record: dict[str, Any], kind: str) -> bool:
        server_name, server = self.rng.choice(self.servers())
        record["server"] = server_name
        with server.client() as client:
            client.execute_command("CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes")
        return True

    def _client_kill_normal(self, record: dict[str, Any]) -> bool:
        return self._client_kill(record, "normal")

    def _client_kill_pubsub(self, record: dict[str, Any]) -> bool:
        return self._client_kill(record, "pubsub")

    def _restart_kill(self, record: dict[str, Any]) -> bool:
        server_name, server = self.rng.choice(self.servers())
        record["server"] = server_name
        server.kill()  # a crash; AOF with fsync always keeps every lock and counter
        server.restart()
        return True

    def _restart_term(self, record: dict[str, Any]) -> bool:
        server_name, server = self.rng.choice(self.servers())
        record["server"] = server_name
        server.restart()
        return True

    def _pick_proxy(self, record: dict[str, Any]) -> FaultProxy:
        index = self.rng.randrange(len(self.proxies))
        record["server"] = f"node{index}"
        return self.proxies[index]

    def _node_hold(self, record: dict[str, Any]) -> bool:
        proxy = self._pick_proxy(record)
        proxy.hold()
        time.sleep(self.rng.uniform(0.1, 1.0))  # the partition's length
        proxy.release_hold()
        return True

    def _node_delay(self, record: dict[str, Any]) -> bool:
        proxy = self._pick_proxy(record)
        proxy.delay(self.rng.uniform(0.005, 0.05))
        time.sleep(self.rng.uniform(0.2, 1.5))  # how long the slow link lasts
        proxy.delay(0)
        return True

    def _node_reset(self, record: dict[str, Any]) -> bool:
        self._pick_proxy(record).reset()
        return True

    def _force_release(self, record: dict[str, Any]) -> bool:
        from django_redislock import force_release

        if self.rng.random() < 0.5:
            name, aliases = self.rng.choice(LOCK_NAMES), ["lock"]
            clients = [self.lock_server.client()]
        else:
            name, aliases = self.rng.choice(REDLOCK_NAMES), ["node0", "node1", "node2"]
            clients = [node.client() for node in self.nodes]
        key = f"redislock:{{{name}}}"
        token = fence = None
        for client in clients:  # the holder's token and its fence, read together
            pipe = client.pipeline(transaction=True)
            pipe.get(key)
            pipe.hget(f"{key}:meta", "fence")
            value, meta_fence = pipe.execute()
            if value is not None and token is None:  # token RS fence RS holder, or the token
                token, _, rest = value.partition(b"\x1e")
                fence = rest.partition(b"\x1e")[0] or meta_fence
            client.close()
        if token is None:
            return False
        record["start_ns"] = now_ns()  # the holder's window ends here at the latest
        record.update(name=name, token=token.decode(), fence=None if fence is None else int(fence))
        for alias in aliases:
            force_release(name, token=token.decode(), connection=alias)
        return True

    # -- the run -----------------------------------------------------------------------
    def run(self) -> None:
        for kind in WORKERS:
            for _ in range(getattr(self.args, f"{kind}_workers")):
                self.spawn(kind)
        while True:
            pause = self.rng.uniform(0.3, 1.5)  # the fault schedule, not a synchronisation
            if time.monotonic() + pause >= self.deadline - 1:
                break
            time.sleep(pause)
            self.fault(self.rng.choice(self.args.faults))

    def finish(self) -> list[str]:
        """Wait for the workers and the last keys; the violations found on the way."""
        problems = []
        for worker, proc in self.workers.items():
            try:
                proc.wait(timeout=max(1.0, self.deadline - time.monotonic()) + 30)
            except subprocess.TimeoutExpired:
                problems.append(f"worker {worker} hung past the end of the run")
                proc.kill()
                proc.wait()
            errors = (self.workdir / f"{worker}.err").read_text(errors="replace").strip()
            if proc.returncode not in (0, -signal.SIGKILL) and errors:
                problems.append(f"worker {worker} exited {proc.returncode}: {errors[-500:]}")
        # Killed holders' keys expire by their TTL (+ a claim's life): then nothing is left.
        if not wait_until(lambda: not self.leftover_keys(), timeout=REDLOCK_TTL + 5):
            problems.append(f"keys left after the run: {self.leftover_keys()}")
        return problems

    def leftover_keys(self) -> list[str]:
        left = []
        for server_name, server in self.servers():
            with server.client() as client:
                for raw in client.scan_iter(match="redislock:*", count=1000):
                    key = raw.decode()
                    if not key.endswith(":fence"):  # counters never expire, by design
                        left.append(f"{server_name}:{key}")
        return left

    def history(self) -> list[dict[str, Any]]:
        lines = []
        for path in sorted(self.history_dir.glob("*.jsonl")):
            lines += read_history(path)
        return lines

    def close(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
        for proxy in self.proxies:
            proxy.close()
        for server in [self.lock_server, *self.nodes, self.resource_server]:
            server.close()


def configure_django(soak: Soak) -> None:
    import django
    from django.conf import settings

    caches = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": soak.lock_server.url}
    }
    caches["lock"] = caches["default"]
    for i, node in enumerate(soak.nodes):  # direct, around the proxies: an operator's view
        caches[f"node{i}"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": node.url}
    settings.configure(
        INSTALLED_APPS=["django_redislock"], CACHES=caches, REDISLOCK={}, USE_TZ=True
    )
    django.setup()


def figures(soak: Soak, history: list[dict[str, Any]], violations: list[str]) -> dict[str, Any]:
    ops: collections.Counter[str] = collections.Counter()
    for line in history:
        op = line["op"]
        if op == "acquire":
            ops["acquired" if line["ok"] else "acquire timed out"] += 1
        elif op == "release":
            ops[f"release: {line['outcome']}"] += 1
        elif op == "write":
            ops["write accepted" if line["ok"] else "write rejected (stale fence)"] += 1
        elif op == "error":
            ops[f"error: {line['error']}"] += 1
    return {
        "kinds": per_kind(soak, history),
        "seconds": soak.args.seconds,
        "broken": soak.args.broken,
        "workers": soak.spawned,
        "operations": dict(sorted(ops.items())),
        "faults": dict(sorted(collections.Counter(f["type"] for f in soak.faults).items())),
        "violations": len(violations),
        "examples": violations[:20],
    }


def per_kind(soak: Soak, history: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per kind (a read-write lock's readers and writers apart): worker processes, rounds
    that acquired (a MultiLock once, not once per name), rounds that timed out, errors."""
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for kind in soak.kinds.values():
        for row in [f"{kind} (read)", f"{kind} (write)"] if kind == "rwlock" else [kind]:
            out[row]["workers"] += 1  # the same processes read and write
    rounds = set()
    for line in history:
        kind = soak.kinds[line["worker"].rsplit("-", 1)[0]]
        if line.get("mode"):
            kind = f"{kind} ({line['mode']})"
        if line["op"] == "error":
            out[kind]["errors"] += 1
        elif line["op"] == "acquire" and (line["worker"], line["invoke_ns"]) not in rounds:
            rounds.add((line["worker"], line["invoke_ns"]))
            out[kind]["acquired" if line["ok"] else "timed out"] += 1
    return {kind: dict(counts) for kind, counts in sorted(out.items())}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Soak: {result['seconds']:g} s{' (broken variants)' if result['broken'] else ''}, "
        f"{result['workers']} worker processes",
        "",
        "| kind | workers | acquired | timed out | errors |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {kind} | "
            + " | ".join(
                f"{n.get(column, 0):,}" for column in ("workers", "acquired", "timed out", "errors")
            )
            + " |"
            for kind, n in result["kinds"].items()
        ),
        "",
        "| operations | count |",
        "|---|---:|",
        *(f"| {op} | {n:,} |" for op, n in result["operations"].items()),
        "",
        "| faults | count |",
        "|---|---:|",
        *(f"| {fault} | {n} |" for fault, n in result["faults"].items()),
        f"| total | {sum(result['faults'].values())} |",
        "",
        f"Violations: {result['violations']}",
        *(f"- {v}" for v in result["examples"]),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="redislock-soak-") as tmp:
        soak = Soak(args, Path(tmp))
        try:
            configure_django(soak)
            soak.run()
            violations = soak.finish()
            history = soak.history()
            violations += check_all(history, soak.faults, soak.resources)
            result = figures(soak, history, violations)
            if args.keep is not None:
                shutil.copytree(soak.history_dir, args.keep, dirs_exist_ok=True)
                (args.keep / "faults.json").write_text(json.dumps(soak.faults))
                (args.keep / "violations.txt").write_text("\n".join(violations))
        finally:
            soak.close()
    report = render(result)
    print(report, end="")
    if args.report is not None:
        args.report.write_text(report, encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    found = result["violations"] > 0
    return 0 if found == args.broken else 1


if __name__ == "__main__":
    sys.exit(main())
