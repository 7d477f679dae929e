"""A process that holds a lock inside a span of its own: ``python -m tests.support.traced_holder
NAME``. Tracing is on (REDISLOCK["TRACING"]) with the SDK's in-memory exporter. It prints
``held <trace_id> <span_id>`` (hex) once it holds NAME, releases when a line arrives on
stdin, then prints ``released``."""

from __future__ import annotations

import os
import sys


def main(name: str) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
    from django.conf import settings
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    settings.REDISLOCK = {**settings.REDISLOCK, "TRACING": True}
    import django

    django.setup()
    from django_redislock import Lock

    with trace.get_tracer("holder").start_as_current_span("holder-job") as span:
        lock = Lock(name, ttl=30)
        assert lock.acquire(timeout=30)
        context = span.get_span_context()
        print(f"held {context.trace_id:032x} {context.span_id:016x}", flush=True)
        sys.stdin.readline()
        lock.release()
    print("released", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
