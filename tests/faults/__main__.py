"""``python -m tests.faults --runs N [--only NAME ...] [--server NAME]``: the fault table."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import traceback


def configure_django() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django_redislock"],
            CACHES={
                "default": {
                    "BACKEND": "django_redis.cache.RedisCache",
                    "LOCATION": "redis://127.0.0.1:1/0",  # never used: scenarios add "faults"
                }
            },
            REDISLOCK={"TTL": 5.0},
            USE_TZ=True,
        )
        django.setup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario and mode")
    parser.add_argument("--only", action="append", help="scenario name (substring); repeatable")
    parser.add_argument("--server", help="server name, e.g. redis-6.2 (default: the default)")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every violation")
    args = parser.parse_args(argv)
    configure_django()
    from tests.faults.scenarios import SCENARIOS, Lab

    names = [name for name in SCENARIOS if not args.only or any(part in name for part in args.only)]
    lab = Lab(args.server)
    rows = []
    started = time.monotonic()
    print(f"# {datetime.date.today().isoformat()}  runs={args.runs}  server={lab_server(args)}")
    try:
        for name in names:
            scenario = SCENARIOS[name]
            skip = scenario.available()
            if skip:
                rows.append((name, 0, "-", "-", f"skipped: {skip}"))
                print_row(rows[-1])
                continue
            counts = {True: 0, False: 0}
            errors: list[str] = []
            t0 = time.monotonic()
            for _ in range(args.runs):
                for protected in (False, True):
                    try:
                        result = scenario.run(lab, protected)
                    except Exception as exc:
                        errors.append(f"{'with' if protected else 'without'}: {exc!r}")
                        if args.verbose:
                            traceback.print_exc()
                        continue
                    if result.violations:
                        counts[protected] += 1
                        if protected or args.verbose:  # a protected violation is a finding
                            for line in result.violations:
                                print(f"    {name}: {line}", file=sys.stderr)
            note = f"{time.monotonic() - t0:.1f}s"
            if errors:
                note += f"; {len(errors)} errored: {errors[0][:120]}"
            rows.append((name, args.runs, counts[True], counts[False], note))
            print_row(rows[-1])
    finally:
        lab.close()
    print(f"# total {time.monotonic() - started:.0f}s")
    failed = [
        row for row in rows if row[1] and (row[2] != 0 or row[3] != row[1] or "errored" in row[4])
    ]
    return 1 if failed else 0


HEADER = f"{'scenario':<34} {'runs':>4}  {'violations with':>15}  {'without':>7}  (detected)  note"


def lab_server(args: argparse.Namespace) -> str:
    from django_redislock.testing import default_server_spec

    return args.server or default_server_spec().name


_printed_header = False


def print_row(row: tuple) -> None:
    global _printed_header
    if not _printed_header:
        print(HEADER)
        _printed_header = True
    name, runs, with_, without, note = row
    shown = f"{without}/{runs}" if runs else "-"
    print(f"{name:<34} {runs:>4}  {with_!s:>15}  {shown:>7}  {'':10}  {note}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
