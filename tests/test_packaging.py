"""The package as users get it: ``python -m build``, then the wheel in a fresh venv.

The wheel must carry everything that is not Python code (templates, migrations, static
files, ``py.typed``, the Lua scripts) and the ``pytest11`` entry point; the sdist the
README it points at. The fresh venv gets the wheel with ``pip install --no-deps`` and
borrows the dependencies (Django, django-redis, redis) from this project's venv through a
``.pth`` line, which adds that directory without running its own ``.pth`` files: the
editable install of the checkout stays out, so the imports below come from the wheel.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support import dist_check

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _wheel(dist: Path) -> Path:
    wheels = list(dist.glob("django_redislock-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contents(dist: Path) -> None:
    # The list of what the wheel must hold is dist_check's (make dist runs the same).
    assert dist_check.wheel_problems(_wheel(dist)) == []
    names = dist_check.wheel_names(_wheel(dist))
    assert "django_redislock/testing/servers.py" in names
    assert "django_redislock/contrib/celery/task.py" in names

    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(_wheel(dist)).read(f"{dist_info}/METADATA").decode()
    assert "Description-Content-Type: text/markdown" in metadata
    assert "## What a Redis lock can and cannot do" in metadata  # the README
    entry_points = zipfile.ZipFile(_wheel(dist)).read(f"{dist_info}/entry_points.txt").decode()
    assert "[pytest11]" in entry_points
    assert "django_redislock = django_redislock.testing:entry_point" in entry_points


def test_the_content_check_finds_a_missing_file(dist: Path, tmp_path: Path) -> None:
    """dist_check is not a rubber stamp: a wheel without one Lua script fails it."""
    trimmed = tmp_path / _wheel(dist).name
    with zipfile.ZipFile(_wheel(dist)) as source, zipfile.ZipFile(trimmed, "w") as target:
        for item in source.infolist():
            if not item.filename.endswith("/release.lua"):
                target.writestr(item, source.read(item))
    assert dist_check.wheel_problems(trimmed) == [
        "wheel lacks django_redislock/scripts/release.lua"
    ]


def test_sdist_contents(dist: Path) -> None:
    assert dist_check.sdist_problems(dist_check.one(dist, "django_redislock-*.tar.gz")) == []


def test_twine_check_passes(dist: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


CHECK = textwrap.dedent(
    """
    import json, sys
    from importlib.metadata import entry_points
    from pathlib import Path

    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
            "django.contrib.sessions", "django.contrib.messages", "django_redislock",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache",
                            "LOCATION": "redis://127.0.0.1:1/0"}},
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates",
                    "APP_DIRS": True}],
        USE_TZ=True,
    )
    django.setup()

    import django_redislock
    from django.db.migrations.loader import MigrationLoader
    from django.template.loader import get_template
    from django_redislock import Lock, held_locks, lock_view  # the public names
    from django_redislock.scripts import ACQUIRE
    from django_redislock.testing import entry_point

    loader = MigrationLoader(None, ignore_no_migrations=True)
    template = get_template("admin/django_redislock/heldlock_change_list.html")
    plugins = [e.value for e in entry_points(group="pytest11") if e.name == "django_redislock"]
    print(json.dumps({
        "file": django_redislock.__file__,
        "version": django_redislock.__version__,
        "migrations": sorted(n for a, n in loader.disk_migrations if a == "django_redislock"),
        "template": str(template.origin.name),
        "script_sha": ACQUIRE.sha,
        "typed": (Path(django_redislock.__file__).parent / "py.typed").exists(),
        "plugins": plugins,
        "lock": repr(Lock("packaging-check")),
    }))
    """
)


def test_wheel_installs_and_imports_in_a_fresh_venv(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(_wheel(dist))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # Dependencies from this venv, without its .pth files (so no editable checkout).
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "borrowed-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTHON"))}
    done = subprocess.run(
        [str(python), "-c", CHECK],
        cwd=tmp_path,  # not the checkout: "import django_redislock" must find the wheel
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["file"].startswith(str(env_dir)), report["file"]
    assert report["template"].startswith(str(env_dir))
    import django_redislock
    from django_redislock.scripts import ACQUIRE

    assert report["version"] == django_redislock.__version__
    assert report["migrations"] == ["0001_initial"]
    assert report["script_sha"] == ACQUIRE.sha
    assert report["typed"] is True
    assert report["plugins"] == ["django_redislock.testing:entry_point"]
    assert report["lock"] == "<Lock 'packaging-check' not held>"
