"""``manage.py election_candidate --label candidate-1``: one candidate of the demo's election.

``make demo`` starts three; the Election page shows who leads and lets a visitor kill the
leader (SIGKILL: no resign, the lease runs out) and watch another take over. Each
candidate campaigns, leads until it loses the lease, then campaigns again; it writes its
pid to ``var/election/<label>.pid`` and one line per event to ``var/election/events.log``.
It exits when the process that started it is gone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from django_redislock import Election

ELECTION = "demo:leader"
TTL = 3.0


def election_dir() -> Path:
    path = Path(settings.VAR_DIR) / "election"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_event(label: str, text: str) -> None:
    line = f"{time.time():.3f} {label} {text}\n"
    with open(election_dir() / "events.log", "a") as log:
        log.write(line)


class Command(BaseCommand):
    help = "One candidate of the demo's leader election (started by make demo)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--label", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        label = options["label"]
        parent = os.getppid()
        (election_dir() / f"{label}.pid").write_text(str(os.getpid()))
        election = Election(ELECTION, ttl=TTL, identity=label)
        log_event(label, "joined the election")
        while os.getppid() == parent:
            if not election.campaign(timeout=1.0):
                continue
            log_event(label, f"elected, term {election.fence}")
            while election.is_leader and os.getppid() == parent:
                time.sleep(0.2)  # a leader's work would go here
            if not election.is_leader:
                log_event(label, f"lost term {election.fence}")
            election.resign()
