"""Run the code examples of the Markdown docs, so the docs cannot drift from the code.

A fenced ```` ```python ```` block preceded by a line ``<!-- example: NAME -->`` (an HTML
comment, invisible when rendered) is an example named NAME. Tests load one with
:func:`run_example` and then check what it defines::

    ns = run_example("docs/decorators.md", "locked-basic")
    assert ns["send_invoice"](42) == "sent invoice 42"

Errors point at the Markdown file and line (the code is compiled with that file name and
its lines keep their numbers). Every ``python`` block of a page must be named
(:func:`unnamed_blocks` finds the others), so none goes untested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository

_FENCE = re.compile(r"^```(\w*)\s*$")
_NAME = re.compile(r"^<!--\s*example:\s*([\w.-]+)\s*-->\s*$")


@dataclass(frozen=True)
class Example:
    """One fenced code block."""

    path: Path
    name: str | None
    language: str
    #: 1-based line number of the block's first code line.
    line: int
    code: str

    def compile(self) -> Any:
        # Pad with newlines so tracebacks show the Markdown line numbers.
        source = "\n" * (self.line - 1) + self.code
        return compile(source, str(self.path), "exec")


def blocks(path: str | Path) -> list[Example]:
    """Every fenced block of a Markdown file, in order, with its example name (or None)."""
    path = ROOT / path
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    name: str | None = None
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        marker = _NAME.match(lines[i])
        if marker:
            name = marker.group(1)
        elif fence:
            start = i + 1
            end = start
            while end < len(lines) and lines[end].rstrip() != "```":
                end += 1
            found.append(
                Example(path, name, fence.group(1), start + 1, "\n".join(lines[start:end]) + "\n")
            )
            name = None
            i = end
        elif lines[i].strip():
            name = None  # a name applies to the very next block only
        i += 1
    return found


def examples(path: str | Path) -> dict[str, Example]:
    """The named examples of a Markdown file; a name used twice is an error."""
    named: dict[str, Example] = {}
    for block in blocks(path):
        if block.name is None:
            continue
        if block.name in named:
            raise ValueError(f"{path}: example name {block.name!r} is used twice")
        named[block.name] = block
    return named


def unnamed_blocks(path: str | Path, language: str = "python") -> list[Example]:
    """Blocks in ``language`` without an example name (should be none)."""
    return [b for b in blocks(path) if b.language == language and b.name is None]


def run_example(
    path: str | Path, name: str, namespace: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Execute example ``name`` of ``path`` in a fresh module namespace; return it."""
    example = examples(path).get(name)
    if example is None:
        raise LookupError(f"{path} has no example named {name!r}")
    ns: dict[str, Any] = {"__name__": f"docs_example_{name.replace('-', '_')}"}
    ns.update(namespace or {})
    exec(example.compile(), ns)
    return ns
