"""What the built distributions must hold: ``python -m tests.support.dist_check dist/``.

Prints the wheel's and the sdist's file lists, then every problem found (exit status 1 if
any): the wheel must carry each non-Python file of the app (Lua scripts, templates,
static files), its migrations and ``py.typed``, and nothing else of the repository; the
sdist must carry the tests, the docs, the licence and the README; the metadata must name
the licence and the version in ``django_redislock.__version__``. ``make dist`` and
``tests/test_packaging.py`` both run it, so CI and the suite check one list.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_redislock"

# Files of the app that are not Python modules: each must reach the wheel.
DATA_PATTERNS = ("scripts/*.lua", "templates/**/*.html", "static/**/*.*", "py.typed")
SDIST_REQUIRED = ("LICENSE", "README.md", "SECURITY.md", "pyproject.toml", "Makefile")
SDIST_TREES = ("tests", "docs", "django_redislock")


def one(dist: Path, pattern: str) -> Path:
    """The single file in ``dist`` matching ``pattern`` (a clear error otherwise)."""
    found = sorted(dist.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected one {pattern} in {dist}, found {[p.name for p in found]}")
    return found[0]


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(archive.namelist())


def sdist_names(sdist: Path) -> list[str]:
    """The sdist's files, without its top directory (``django_redislock-X.Y.Z/``)."""
    with tarfile.open(sdist) as archive:
        return sorted(m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile())


def expected_package_files() -> set[str]:
    """Every file of the app that must be in the wheel: modules, data, migrations."""
    files = {p for pattern in DATA_PATTERNS for p in PACKAGE.glob(pattern) if p.is_file()}
    files |= {p for p in PACKAGE.rglob("*.py")}
    return {"django_redislock/" + str(p.relative_to(PACKAGE)) for p in files}


def wheel_problems(wheel: Path) -> list[str]:
    from django_redislock import __version__

    names = wheel_names(wheel)
    problems = [f"wheel lacks {name}" for name in sorted(expected_package_files() - set(names))]
    if "django_redislock/migrations/0001_initial.py" not in names:
        problems.append("wheel lacks the migrations")
    strays = [n for n in names if not n.startswith(("django_redislock/", "django_redislock-"))]
    problems += [f"wheel holds {name}, which is not the app" for name in strays]
    info = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
    if info is None:
        return [*problems, "wheel has no METADATA"]
    with zipfile.ZipFile(wheel) as archive:
        metadata = HeaderParser().parsestr(archive.read(info).decode())
        licence_files = [n for n in names if "/licenses/" in n]
    if metadata["Version"] != __version__:
        problems.append(f"wheel version {metadata['Version']} != __version__ {__version__}")
    if metadata["License-Expression"] != "BSD-3-Clause":
        problems.append(f"License-Expression is {metadata['License-Expression']!r}")
    if not any(n.endswith("/licenses/LICENSE") for n in licence_files):
        problems.append("wheel lacks the LICENSE file")
    classifiers = set(metadata.get_all("Classifier") or [])
    for needed in (
        "Framework :: Django :: 4.2",
        "Framework :: Django :: 5.2",
        "Framework :: Django :: 6.0",
        "Framework :: Django :: 6.1",
        "Typing :: Typed",
    ):
        if needed not in classifiers:
            problems.append(f"classifier {needed!r} missing")
    try:
        from trove_classifiers import classifiers as known
    except ImportError:  # pragma: no cover - the dev extra installs it
        known = classifiers
    problems += [f"unknown classifier {c!r}" for c in sorted(classifiers - set(known))]
    if not metadata.get_all("Project-URL"):
        problems.append("no project URLs")
    problems += description_problems(metadata.get_payload() or "")
    return problems


#: A Markdown link or image target: ``[text](target)`` / ``![alt](target)``.
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")


def description_problems(description: str) -> list[str]:
    """The long description is shown on a package index page, where a link relative to the
    repository (``docs/locks.md``) leads nowhere: every target must be absolute (or an
    anchor of the page itself)."""
    if "## What a Redis lock can and cannot do" not in description:
        return ["the long description is not the README"]
    relative = sorted({t for t in LINK_TARGET.findall(description) if not t.startswith(ABSOLUTE)})
    return [f"the long description links to {t!r}, relative to nothing" for t in relative]


ABSOLUTE = ("https://", "http://", "#", "mailto:")


def sdist_problems(sdist: Path) -> list[str]:
    names = sdist_names(sdist)
    problems = [f"sdist lacks {name}" for name in SDIST_REQUIRED if name not in names]
    for tree in SDIST_TREES:
        on_disk = {
            str(p.relative_to(ROOT))
            for p in (ROOT / tree).rglob("*")
            if p.is_file()
            and p.suffix in {".py", ".md", ".lua", ".html", ".js", ".png", ".svg"}
            and "__pycache__" not in p.parts
        }
        problems += [f"sdist lacks {name}" for name in sorted(on_disk - set(names))]
    return problems


def main(argv: list[str]) -> int:
    dist = Path(argv[0]) if argv else ROOT / "dist"
    wheel, sdist = one(dist, "django_redislock-*.whl"), one(dist, "django_redislock-*.tar.gz")
    for path, names in ((wheel, wheel_names(wheel)), (sdist, sdist_names(sdist))):
        print(f"\n{path.name} ({len(names)} files)")
        for name in names:
            print(f"  {name}")
    problems = wheel_problems(wheel) + sdist_problems(sdist)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    print(f"\n{len(problems)} problem(s) in {wheel.name} and {sdist.name}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
