"""``lock_command`` and ``LockedCommand``: ``call_command`` for each ``on_busy`` mode, the
lock options, and a real ``python manage.py`` child process against a held lock."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from django_redislock import Lock, LockedCommand, lock_command, lock_info
from tests.support import plugin

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def testapp(settings):
    """Install ``tests.support.testapp`` (its management commands) for one test."""
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.support.testapp"]


def run(*args, **options):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def hold(name, ttl=5.0, purpose="nightly report"):
    lock = Lock(name, ttl=ttl, purpose=purpose)
    assert lock.acquire(blocking=False)
    return lock


# -- lock_command ---------------------------------------------------------------------------


def test_free_lock_runs_and_releases(lock_backend, testapp):
    out, err = run("locked_report")
    assert out == "report done\n" and err == ""
    assert lock_info("locked_report") is None


def test_lock_is_held_while_handle_runs(lock_backend):
    seen = []

    class Command(BaseCommand):
        @lock_command(ttl=5)
        def handle(self, *args, **options):
            seen.append(lock_info("test_commands"))

    run(Command())
    info = seen[0]
    assert info.purpose == "manage.py test_commands"  # this module's name
    assert info.owner.pid == os.getpid() and 0 < info.ttl <= 5


def test_on_busy_error(lock_backend, testapp):
    holder = hold("locked_report")
    with pytest.raises(CommandError) as exc:
        run("locked_report")
    message = str(exc.value)
    assert "'locked_report' is held by" in message
    assert f"host {socket.gethostname()}" in message
    assert f"pid {os.getpid()}" in message
    assert "'nightly report'" in message
    assert "more seconds" in message
    holder.release()
    assert run("locked_report")[0] == "report done\n"


def test_on_busy_skip_exits_zero_with_a_notice(lock_backend, testapp):
    hold("locked_report")
    out, err = run("locked_report_skip")
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("Skipped: Lock 'locked_report' is held by")
    assert f"pid {os.getpid()}" in err


def test_on_busy_wait_gets_the_lock_when_the_holder_expires(lock_backend, testapp):
    holder = hold("locked_report", ttl=0.3)  # a crashed holder: never released
    out, err = run("locked_report_wait")  # waits (up to 30 s) until the TTL runs out
    assert out == "report done\n" and err == ""
    assert not holder.owned()


def test_on_busy_wait_gives_up_after_timeout(lock_backend):
    class Command(BaseCommand):
        @lock_command("waited", on_busy="wait", timeout=0.05)
        def handle(self, *args, **options):
            raise AssertionError("not reached")

    hold("waited")
    with pytest.raises(CommandError, match="'waited' is held by"):
        run(Command())


def test_template_name_from_options(lock_backend):
    class Command(BaseCommand):
        def add_arguments(self, parser):
            parser.add_argument("--source", default="crm")

        @lock_command("sync:{source}", ttl=5)
        def handle(self, *args, source, **options):
            self.stdout.write(lock_info(f"sync:{source}").name)

    assert run(Command())[0] == "sync:crm\n"
    assert run(Command(), source="erp")[0] == "sync:erp\n"
    hold("sync:erp")
    with pytest.raises(CommandError, match="sync:erp"):
        run(Command(), source="erp")


def test_lock_command_validates_its_arguments():
    with pytest.raises(ValueError, match="on_busy must be one of 'error', 'skip', 'wait'"):
        lock_command(on_busy="retry")
    with pytest.raises(TypeError, match="parentheses"):

        class Command(BaseCommand):
            @lock_command
            def handle(self, *args, **options):
                pass

    with pytest.raises(TypeError, match="Unknown lock option"):
        lock_command(tll=5)


def test_error_when_holder_released_meanwhile(lock_backend):
    from django_redislock.locked_command import describe_holder

    assert "released since" in describe_holder("x", None)


# -- LockedCommand ----------------------------------------------------------------------------


def test_locked_command_template_and_watchdog(lock_backend, testapp):
    out, _ = run("import_source", "crm")
    assert out == "imported crm (lock held, watchdog on)\n"
    hold("import:crm", purpose="manage.py import_source")
    with pytest.raises(CommandError, match=r"'import:crm' is held by .*'manage.py import_source'"):
        run("import_source", "crm")
    assert run("import_source", "erp")[0].startswith("imported erp (lock held")


def test_locked_command_no_lock(lock_backend, testapp):
    hold("import:crm")
    out, _ = run("import_source", "crm", "--no-lock")
    assert out == "imported crm (lock held, watchdog off)\n"  # sees the other holder's lock
    out, _ = run("import_source", "crm", no_lock=True)
    assert out.startswith("imported crm")


def test_locked_command_lock_timeout(lock_backend, testapp):
    holder = hold("import:crm", ttl=0.3)
    out, _ = run("import_source", "crm", "--lock-timeout", "30")  # waits for the expiry
    assert out == "imported crm (lock held, watchdog on)\n"
    assert not holder.owned()
    hold("import:crm")
    with pytest.raises(CommandError, match="is held by"):
        run("import_source", "crm", lock_timeout=0.05)


def test_locked_command_lock_timeout_is_validated(lock_backend, testapp):
    with pytest.raises(CommandError, match="--lock-timeout must be >= 0"):
        run("import_source", "crm", "--lock-timeout", "-1")


def test_locked_command_attributes(lock_backend):
    seen = []

    class Command(LockedCommand):
        lock_ttl = 2.5
        lock_watchdog = False
        lock_on_busy = "skip"

        def handle(self, *args, **options):
            seen.append(lock_info("test_commands"))

    run(Command())
    assert 0 < seen[0].ttl <= 2.5 and seen[0].watchdog is False
    assert seen[0].purpose == "manage.py test_commands"
    hold("test_commands")
    out, err = run(Command())
    assert out == "" and err.startswith("Skipped: Lock 'test_commands' is held by")


def test_locked_command_super_handle_is_not_locked_twice(lock_backend):
    class Base(LockedCommand):
        lock_name = "base"

        def handle(self, *args, **options):
            self.stdout.write("base")

    class Child(Base):
        def handle(self, *args, **options):
            super().handle(*args, **options)
            self.stdout.write("child")

    assert run(Child())[0] == "base\nchild\n"


def test_locked_command_class_checks():
    with pytest.raises(ValueError, match="on_busy must be one of"):

        class Bad(LockedCommand):
            lock_on_busy = "later"

    with pytest.raises(ValueError, match="malformed"):

        class Malformed(LockedCommand):
            lock_name = "import:{source"


def test_locked_command_missing_option_is_named(lock_backend):
    from django_redislock import InvalidLockName

    class Command(LockedCommand):
        lock_name = "import:{sourse}"

        def handle(self, *args, **options):
            pass

    with pytest.raises(InvalidLockName, match=r"\{sourse\}.*no key 'sourse'"):
        run(Command())


# -- a real manage.py process ------------------------------------------------------------------


def test_manage_py_exits_non_zero_naming_the_holder():
    """``python manage.py locked_report`` while this process holds the lock."""
    holder = hold("locked_report", ttl=30, purpose="held by the test")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.support.testapp.settings",
        plugin.URL_ENV: os.environ[plugin.URL_ENV],
        plugin.DB_ENV: os.environ[plugin.DB_ENV],
    }
    try:
        proc = subprocess.run(
            [sys.executable, "manage.py", "locked_report"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.release()
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "CommandError: Lock 'locked_report' is held by" in proc.stderr
    assert f"pid {os.getpid()}" in proc.stderr
    assert "'held by the test'" in proc.stderr
    # Free again: the same command succeeds.
    proc = subprocess.run(
        [sys.executable, "manage.py", "locked_report"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "report done\n"


def test_the_old_module_name_still_imports_with_a_deprecation_warning(monkeypatch):
    import importlib
    import sys

    from django_redislock import LockedCommand, locked_command

    monkeypatch.delitem(sys.modules, "django_redislock.commands", raising=False)
    with pytest.warns(DeprecationWarning, match="django_redislock.locked_command"):
        old = importlib.import_module("django_redislock.commands")
    assert old is locked_command and old.LockedCommand is LockedCommand
