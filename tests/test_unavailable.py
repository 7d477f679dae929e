"""The lock server down: ``lock_view`` answers 503 (never 500) and recovers by itself once
the server is back; ``lock_command`` / ``LockedCommand`` print one line and exit 69;
``check --deploy`` warns (W010) while plain ``check`` stays offline. A real server is
stopped and started again in each test (the Celery part is in ``test_celery.py``)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory

from django_redislock import LockBackendUnavailable, lock_view
from django_redislock.locked_command import EX_UNAVAILABLE
from tests.support import plugin
from tests.support.testapp.management.commands import import_source, locked_report

URLS = pytest.mark.urls("tests.support.urls_decorators")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def down(real_backend):
    """The lock server stopped for the test body; started again (same port) at the end."""
    real_backend.server.stop()
    yield real_backend
    if not real_backend.server.running:
        real_backend.server.restart()


@URLS
def test_view_answers_503_with_retry_after_then_recovers(down):
    client = Client()
    response = client.get("/page/home/")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("text/plain")
    assert b"lock server is unreachable" in response.content
    assert str(down.server.port).encode() not in response.content  # the error is logged only
    down.server.restart()
    response = client.get("/page/home/")  # no restart of anything on our side
    assert response.status_code == 200 and response.content == b"page home"


@URLS
def test_503_as_json_and_html(down):
    client = Client()
    response = client.get("/page/home/", HTTP_ACCEPT="application/json")
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert body["retry_after"] == 5 and "unreachable" in body["detail"]
    response = client.get("/page/home/", HTTP_ACCEPT="text/html,application/xhtml+xml,*/*")
    assert response.status_code == 503 and response["Content-Type"].startswith("text/html")
    assert b"<h1>Service Unavailable</h1>" in response.content


@URLS
async def test_async_view_answers_503_then_recovers(down):
    client = AsyncClient()
    response = await client.get("/async/3/")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    down.server.restart()
    assert (await client.get("/async/3/")).status_code == 200


def test_on_unavailable_gets_request_and_error(down):
    seen = []

    def on_unavailable(request, error):
        seen.append((request.path, error))
        return HttpResponse("maintenance", status=503)

    @lock_view("report", on_unavailable=on_unavailable)
    def view(request):
        return HttpResponse("ok")

    response = view(RequestFactory().get("/report/"))
    assert (response.status_code, response.content) == (503, b"maintenance")
    [(path, error)] = seen
    assert path == "/report/" and isinstance(error, LockBackendUnavailable)
    assert error.aliases == ("default",)


async def test_async_on_unavailable_may_be_sync_or_async(down):
    async def async_handler(request, error):
        return HttpResponse("async handler", status=503)

    def sync_handler(request, error):
        return HttpResponse("sync handler", status=503)

    for handler, body in ((async_handler, b"async handler"), (sync_handler, b"sync handler")):

        @lock_view("report", on_unavailable=handler)
        async def view(request):
            return HttpResponse("ok")

        assert (await view(RequestFactory().get("/"))).content == body


def unavailable_from_settings(request, error):
    return HttpResponse(f"from settings: {type(error).__name__}", status=503)


def test_settings_choose_the_handler_and_the_retry_after(down, settings):
    @lock_view("report")
    def view(request):
        return HttpResponse("ok")

    settings.REDISLOCK = {"VIEW_UNAVAILABLE_RETRY_AFTER": 9}
    assert view(RequestFactory().get("/"))["Retry-After"] == "9"
    settings.REDISLOCK = {"VIEW_ON_UNAVAILABLE": f"{__name__}.unavailable_from_settings"}
    assert view(RequestFactory().get("/")).content == b"from settings: LockBackendUnavailable"


def test_bad_retry_after_setting_is_a_check_error(settings):
    settings.REDISLOCK = {"VIEW_UNAVAILABLE_RETRY_AFTER": "soon"}
    [message] = [m for m in run_checks() if m.id == "redislock.E009"]
    assert "'soon'" in message.msg


def test_on_unavailable_must_be_callable_or_path():
    with pytest.raises(ValueError, match="on_unavailable must be a callable"):
        lock_view("x", on_unavailable=42)


def test_release_failing_after_the_view_ran_keeps_its_response(real_backend, caplog):
    @lock_view("report", ttl=5)
    def view(request):
        real_backend.server.stop()  # the work is done; the release cannot reach the server
        return HttpResponse("saved")

    with caplog.at_level(logging.WARNING, logger="django_redislock.views"):
        response = view(RequestFactory().post("/"))
    assert (response.status_code, response.content) == (200, b"saved")
    assert "could not be released" in caplog.text
    real_backend.server.restart()


def test_view_raising_unavailable_itself_is_not_hidden(real_backend):
    @lock_view("report", ttl=5)
    def view(request):
        raise LockBackendUnavailable("the view's own lock", aliases=["other"])

    with pytest.raises(LockBackendUnavailable, match="the view's own"):
        view(RequestFactory().get("/"))


# -- commands ------------------------------------------------------------------------------


def test_lock_command_is_a_command_error_with_exit_status_69(down):
    with pytest.raises(CommandError) as caught:
        call_command(locked_report.Command())
    assert caught.value.returncode == EX_UNAVAILABLE == 69
    message = str(caught.value)
    assert message.startswith("Lock 'locked_report' unavailable: cannot reach connection 'default'")
    assert "\n" not in message


def test_locked_command_too(down):
    with pytest.raises(CommandError) as caught:
        call_command(import_source.Command(), "crm")
    assert caught.value.returncode == 69 and "'import:crm' unavailable" in str(caught.value)


def test_manage_py_prints_one_line_and_exits_69(make_server):
    server = make_server()
    server.stop()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.support.testapp.settings",
        plugin.URL_ENV: server.url,
        plugin.DB_ENV: os.environ[plugin.DB_ENV],
    }
    for command in (["locked_report"], ["import_source", "crm"]):
        proc = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 69, proc.stderr
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "unavailable: cannot reach connection 'default'" in lines[0]
        assert str(server.port) in lines[0]  # the error says where it tried


# -- checks --------------------------------------------------------------------------------


def test_check_deploy_warns_per_unreachable_connection(down, settings, make_server):
    other = make_server()
    settings.REDISLOCK = {"CONNECTIONS": {"spare": {"URL": other.url}}}
    plain = [m.id for m in run_checks() if m.id.startswith("redislock.")]
    assert plain == []  # offline: nothing asked of the servers
    warnings = [m for m in run_checks(include_deployment_checks=True) if m.id == "redislock.W010"]
    assert [m.obj for m in warnings] == ["lock connection 'default'"]
    assert "cannot be reached" in warnings[0].msg and "ConnectionError" in warnings[0].msg
    other.stop()
    warnings = [m for m in run_checks(include_deployment_checks=True) if m.id == "redislock.W010"]
    expected = ["lock connection 'default'", "lock connection 'spare'"]
    assert sorted(m.obj for m in warnings) == expected
    down.server.restart()
    warnings = [m for m in run_checks(include_deployment_checks=True) if m.id == "redislock.W010"]
    assert [m.obj for m in warnings] == ["lock connection 'spare'"]
