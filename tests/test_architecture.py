"""The project's own checked contracts (``make lint`` runs both; so does CI): the import
layering of ``pyproject.toml``'s ``[tool.importlinter]`` and the strict MkDocs build. Each is
shown to pass on the tree and to fail on a copy with one violation planted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache", "pyproject.toml"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": str(BIN)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "django_redislock", tmp_path / "django_redislock")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_layers_and_no_cycles_hold():
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


def test_a_kind_importing_the_admin_breaks_the_layers(tree_copy: Path):
    mutex = tree_copy / "django_redislock" / "kinds" / "mutex.py"
    mutex.write_text(mutex.read_text() + "\n\ndef _planted():\n    from .. import admin\n")
    proc = _lint_imports(tree_copy)
    assert proc.returncode != 0
    assert "Layers: from the kinds up to the admin BROKEN" in proc.stdout
    assert "django_redislock.kinds.mutex -> django_redislock.admin" in proc.stdout


def test_an_import_cycle_is_caught(tree_copy: Path):
    keys = tree_copy / "django_redislock" / "keys.py"  # naming imports keys
    keys.write_text(keys.read_text() + "\n\ndef _planted():\n    from . import naming\n")
    proc = _lint_imports(tree_copy)
    assert proc.returncode != 0
    assert "No import cycles among the package's modules BROKEN" in proc.stdout


def _mkdocs(cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    return tmp_path


def test_the_docs_build_as_a_site(tmp_path: Path):
    proc = _mkdocs(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").is_file()


def test_a_broken_link_fails_the_site(docs_copy: Path):
    page = docs_copy / "docs" / "locks.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    proc = _mkdocs(docs_copy, docs_copy / "site")
    assert proc.returncode != 0 and "no-such-page.md" in proc.stderr


def test_a_page_missing_from_the_navigation_fails_the_site(docs_copy: Path):
    (docs_copy / "docs" / "orphan.md").write_text("# Orphan\n")
    proc = _mkdocs(docs_copy, docs_copy / "site")
    assert proc.returncode != 0 and "orphan.md" in proc.stderr


def test_the_long_description_check_catches_a_relative_link():
    from tests.support.dist_check import description_problems

    readme = (ROOT / "README.md").read_text()
    assert "](docs/" in readme  # readable in the repository...
    problems = description_problems(readme)
    assert "the long description links to 'docs/locks.md', relative to nothing" in problems
    absolute = readme.replace("](docs/", "](https://example.org/docs/").replace(
        "](LICENSE", "](https://example.org/LICENSE"
    )
    assert description_problems(absolute) == []  # ...and what make dist checks is built
