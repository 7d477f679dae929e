"""The live view of ``manage.py redislock top`` (extra ``top``: rich): the snapshot of
:mod:`django_redislock.top` redrawn every ``interval`` seconds on the terminal's
alternate screen, until ``q`` or Ctrl-C; the terminal is given back as it was."""

from __future__ import annotations

import contextlib
import select
import sys
import termios
import tty
from collections.abc import Callable, Iterator
from typing import Any

from .top import Snapshot, sections


def render(shot: Snapshot) -> Any:
    """The snapshot as rich renderables: a title and one table per part."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [
        Text(
            f"redislock top · {shot.connection} · {shot.at:%H:%M:%S} UTC · q to quit",
            style="bold",
        )
    ]
    for title, headers, rows in sections(shot):
        table = Table(title=title, title_justify="left", expand=True, show_edge=False)
        for header in headers:
            table.add_column(header, overflow="ellipsis", no_wrap=True)
        for row in rows:
            table.add_row(*row)
        if not rows:
            table.add_row("(none)", *[""] * (len(headers) - 1))
        parts.append(table)
    return Group(*parts)


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """A reader of single key presses (cbreak mode while inside), restoring the terminal."""
    stdin = sys.stdin
    if not stdin.isatty():
        yield lambda timeout: (select.select([], [], [], timeout), "")[1]
        return
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)

        def read(timeout: float) -> str:
            ready, _, _ = select.select([stdin], [], [], timeout)
            return stdin.read(1) if ready else ""

        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def live(take: Callable[[], Snapshot], interval: float = 1.0) -> None:
    """Redraw ``take()`` every ``interval`` s until ``q`` (or Ctrl-C)."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    with (
        _keys() as key,
        Live(render(take()), console=console, screen=True, auto_refresh=False) as view,
    ):
        try:
            while key(interval).lower() != "q":
                view.update(render(take()), refresh=True)
        except KeyboardInterrupt:
            pass


__all__ = ["live", "render"]
