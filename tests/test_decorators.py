"""``locked`` and ``lock_view`` against the real servers (and fakeredis), through Django's
test clients; signals and logging of decorated code."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import threading
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from django.test import AsyncClient, Client, RequestFactory

from django_redislock import (
    InvalidLockName,
    Lock,
    LockNotAcquired,
    lock_info,
    lock_view,
    locked,
    signals,
)
from django_redislock.decorators import lock_class, make_lock
from tests.support import decorator_views

URLS = pytest.mark.urls("tests.support.urls_decorators")


def hold(name: str, ttl: float = 5, purpose: str = "test holder") -> Lock:
    lock = Lock(name, ttl=ttl, purpose=purpose)
    assert lock.acquire(blocking=False)
    return lock


# -- locked ---------------------------------------------------------------------------


@dataclass
class Order:
    pk: int | None


def test_locked_fills_template_from_bound_arguments(lock_backend):
    seen = []

    @locked("order:{order.pk}:{step}", ttl=5)
    def process(order, step="pay"):
        info = lock_info(f"order:{order.pk}:{step}")
        seen.append((info.name, info.purpose, info.owner.pid))
        return "done"

    assert process(Order(7)) == "done"
    assert process(order=Order(8), step="ship") == "done"
    purpose = f"{__name__}.test_locked_fills_template_from_bound_arguments.<locals>.process"
    assert seen == [
        ("order:7:pay", purpose, os.getpid()),
        ("order:8:ship", purpose, os.getpid()),
    ]
    assert lock_info("order:7:pay") is None  # released on return


def test_locked_busy_raises_and_releases_on_error(lock_backend):
    @locked("invoice:{invoice_id}", ttl=5, timeout=0)
    def send(invoice_id):
        raise RuntimeError("boom")

    holder = hold("invoice:1")
    with pytest.raises(LockNotAcquired) as exc:
        send(1)
    assert exc.value.lock_name == "invoice:1"
    holder.release()
    with pytest.raises(RuntimeError):
        send(1)
    assert lock_info("invoice:1") is None  # an exception still releases


def test_locked_keeps_the_signature_and_metadata(lock_backend):
    @locked("x:{a}")
    def func(a: int, b: str = "b") -> str:
        """Doc."""
        return f"{a}{b}"

    import inspect

    assert func.__name__ == "func" and func.__doc__ == "Doc."
    assert str(inspect.signature(func)) == "(a: 'int', b: 'str' = 'b') -> 'str'"
    assert func(1) == "1b"


def test_locked_callable_name_and_methods(lock_backend):
    class Account:
        def __init__(self, pk):
            self.pk = pk

        @locked("account:{self.pk}", ttl=5)
        def close(self):
            return lock_info(f"account:{self.pk}").name

        @locked(lambda self, amount: f"account:{self.pk}:{amount}", ttl=5)
        def pay(self, amount):
            return lock_info(f"account:{self.pk}:{amount}").name

    assert Account(3).close() == "account:3"
    assert Account(3).pay(10) == "account:3:10"


def test_locked_new_lock_per_call_across_threads(lock_backend):
    """One decorated function called from several threads: each call has its own lock."""
    fences = []
    mutex = threading.Lock()

    @locked("shared", ttl=5, timeout=30)
    def work():
        info = lock_info("shared")
        with mutex:
            fences.append(info.fence)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(fences) == [1, 2, 3, 4]


async def test_locked_async_function(lock_backend):
    @locked("job:{job_id}", ttl=5, timeout=0)
    async def run(job_id):
        await asyncio.sleep(0)
        return (await asyncio.to_thread(lock_info, f"job:{job_id}")).purpose

    assert asyncio.iscoroutinefunction(run)
    assert (await run(5)).endswith("test_locked_async_function.<locals>.run")
    holder = Lock("job:5", ttl=5)
    assert await holder.aacquire(blocking=False)
    with pytest.raises(LockNotAcquired):
        await run(5)
    await holder.arelease()


def test_template_errors_at_decoration_time():
    with pytest.raises(InvalidLockName, match=r"\{order\}.*not a parameter; parameters: order_id"):

        @locked("order:{order}")
        def f(order_id):
            pass

    with pytest.raises(InvalidLockName, match="positional field"):
        locked("x:{}")(lambda a: None)
    with pytest.raises(InvalidLockName, match="malformed"):
        locked("x:{a")(lambda a: None)
    with pytest.raises(InvalidLockName, match="hash-tag"):
        locked("x:{{a}}")(lambda a: None)
    with pytest.raises(InvalidLockName, match="256"):
        locked("x" * 257)(lambda: None)
    with pytest.raises(InvalidLockName, match="longer than 256"):
        locked("x" * 257 + "{a}")(lambda a: None)
    with pytest.raises(TypeError, match=r"Unknown lock option.*ttll"):
        locked("x", ttll=5)
    with pytest.raises(ValueError, match="backend must be one of"):
        locked("x", backend="zookeeper")


def test_template_errors_at_call_time(lock_backend):
    @locked("order:{order.pk}")
    def f(order):
        pass

    with pytest.raises(InvalidLockName, match=r"field \{order.pk\} cannot be filled.*'pk'"):
        f(object())

    @locked("order:{order_id}")
    def g(**kwargs):
        pass

    with pytest.raises(InvalidLockName, match=r"\{order_id\}.*no key 'order_id'.*Available: x"):
        g(x=1)
    with pytest.raises(InvalidLockName, match=r"300 characters long.*lock name built by"):
        g(order_id="x" * 294)
    with pytest.raises(InvalidLockName, match="hash-tag"):
        g(order_id={"a": 1})

    @locked(lambda order_id: 42)
    def h(order_id):
        pass

    with pytest.raises(InvalidLockName, match="must be a str"):
        h(1)


def test_lock_class_choice(lock_backend):
    assert lock_class() is Lock
    assert lock_class("redis") is Lock
    with pytest.raises(ValueError, match='needs backend="redlock"'):
        lock_class("redis", ["a", "b", "c"])
    lock = make_lock("chosen", ttl=3, purpose="p")
    assert isinstance(lock, Lock) and lock.ttl == 3 and lock.purpose == "p"


# -- signals and logging ------------------------------------------------------------------


def test_signals_of_decorated_function(lock_backend):
    events = []

    def on_acquired(sender, lock, **kwargs):
        events.append(("acquired", sender, lock.name, lock.token is not None, lock.fence))

    def on_released(sender, lock, **kwargs):
        events.append(("released", sender, lock.name, lock.token is None, lock.fence))

    signals.lock_acquired.connect(on_acquired)
    signals.lock_released.connect(on_released)
    try:

        @locked("signalled", ttl=5)
        def work():
            events.append(("work",))

        work()
    finally:
        signals.lock_acquired.disconnect(on_acquired)
        signals.lock_released.disconnect(on_released)
    assert events == [
        ("acquired", Lock, "signalled", True, 1),
        ("work",),
        ("released", Lock, "signalled", True, 1),
    ]


def test_force_released_signal(lock_backend):
    from django_redislock import force_release

    received = []

    def receiver(sender, info, name, connection, user, **kwargs):
        received.append((sender, info.purpose, name, connection, user))

    holder = hold("forced", purpose="stuck job")
    signals.lock_force_released.connect(receiver)
    try:
        assert force_release("forced", user="admin")
    finally:
        signals.lock_force_released.disconnect(receiver)
    assert received == [(Lock, "stuck job", "forced", "default", "admin")]
    assert not holder.owned()


@URLS
def test_busy_view_is_logged_at_debug(lock_backend, caplog):
    hold("page:logged")
    with caplog.at_level(logging.DEBUG, logger="django_redislock"):
        assert Client().get("/page/logged/").status_code == 423
    records = [r for r in caplog.records if r.name == "django_redislock.views"]
    assert [r.levelno for r in records] == [logging.DEBUG]
    assert "page:logged" in records[0].getMessage()


# -- lock_view ------------------------------------------------------------------------------


@URLS
def test_view_free_then_busy(lock_backend):
    client = Client()
    response = client.get("/page/home/")
    assert response.status_code == 200 and response.content == b"page home"
    assert lock_info("page:home") is None
    holder = hold("page:home", ttl=4.2)
    response = client.get("/page/home/")
    assert response.status_code == 423
    assert 1 <= int(response["Retry-After"]) <= 5
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert text.startswith("Locked: This resource is busy.") and text.count("\n") == 1
    assert f"pid {os.getpid()}" in text and "for test holder since " in text
    assert client.get("/page/other/").status_code == 200  # another name, another lock
    holder.release()
    assert client.get("/page/home/").status_code == 200


@URLS
def test_busy_page_as_html_and_json(lock_backend):
    holder = hold("page:home", ttl=4.2, purpose="<nightly> export")
    client = Client()
    response = client.get("/page/home/", HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    assert response.status_code == 423 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "<h1>Locked</h1>" in html and f"pid {os.getpid()}" in html
    assert "for &lt;nightly&gt; export since " in html  # escaped, and says since when
    assert 1 <= int(response["Retry-After"]) <= 5
    response = client.get("/page/home/", HTTP_ACCEPT="application/json")
    assert response.status_code == 423 and response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert body["lock"] == "page:home" and body["retry_after"] == int(response["Retry-After"])
    assert body["holder"]["pid"] == os.getpid() and body["holder"]["purpose"] == "<nightly> export"
    since = dt.datetime.fromisoformat(body["holder"]["since"])
    assert since == lock_info("page:home").acquired_at.replace(microsecond=0)
    holder.release()


@pytest.mark.parametrize(("left", "header"), [(0.001, 1), (0.25, 1), (1.0, 1), (4.2, 5), (None, 1)])
def test_retry_after_rounds_up(left, header):
    from types import SimpleNamespace

    from django_redislock.decorators import default_busy_response, retry_after

    lock = SimpleNamespace(last_holder_ttl=left, name="report")
    assert retry_after(lock) == header
    assert default_busy_response(lock)["Retry-After"] == str(header)


@URLS
def test_view_purpose_is_the_dotted_path(lock_backend):
    gate = decorator_views.reset_gate()
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("r", Client().get("/gate/")))
    thread.start()
    try:
        assert gate.entered.wait(30)
        info = lock_info("gate")
        assert info.purpose == "tests.support.decorator_views.gate_view"
        assert info.owner.pid == os.getpid()
    finally:
        gate.leave.set()
        thread.join()
    assert result["r"].status_code == 200


@URLS
def test_two_concurrent_requests_one_200_one_423(lock_backend):
    gate = decorator_views.reset_gate()
    statuses = {}

    def first():
        statuses["first"] = Client().get("/gate/").status_code

    def second():
        assert gate.entered.wait(30)  # the first request is inside the view
        try:
            response = Client().get("/gate/")
            statuses["second"] = response.status_code
            statuses["retry_after"] = response["Retry-After"]
        finally:
            gate.leave.set()  # only now may the first request finish

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses["first"] == 200
    assert statuses["second"] == 423
    assert 1 <= int(statuses["retry_after"]) <= 5
    assert lock_info("gate") is None


@URLS
def test_template_from_request(lock_backend):
    client = Client()
    assert client.get("/search/", {"q": "shoes"}).content == b"results for shoes"
    hold("search:shoes")
    assert client.get("/search/", {"q": "shoes"}).status_code == 423
    assert client.get("/search/", {"q": "hats"}).status_code == 200
    request = RequestFactory().get("/profile/")
    request.user = SimpleNamespace(pk=7)
    assert decorator_views.profile(request).content == b"profile of 7"
    hold("profile:7")
    assert decorator_views.profile(request).status_code == 423


def test_a_field_that_is_none_is_an_error_naming_it(lock_backend):
    """An anonymous user's pk must not become one lock ``profile:None`` shared by all."""
    request = RequestFactory().get("/profile/")
    request.user = SimpleNamespace(pk=None)
    with pytest.raises(InvalidLockName, match=r"field \{request.user.pk\} is None") as caught:
        decorator_views.profile(request)
    assert "'profile:None'" in str(caught.value)
    assert lock_info("profile:None") is None

    @locked("order:{order.pk}")
    def pay(order):
        return "paid"

    with pytest.raises(InvalidLockName, match=r"field \{order.pk\} is None"):
        pay(Order(None))
    assert pay(Order(0)) == "paid"  # falsy is fine; only None is refused


@URLS
def test_callable_name_and_call_time_template_error(lock_backend):
    client = Client()
    hold("page:abc")
    assert client.get("/callable/ABC/").status_code == 423
    assert client.get("/callable/XYZ/").status_code == 200
    with pytest.raises(InvalidLockName, match=r"\{missing\}.*Available: request, slug"):
        client.get("/broken/abc/")


def test_view_template_error_at_decoration_time():
    with pytest.raises(InvalidLockName, match=r"\{order_id\}.*parameters: pk, request"):

        @lock_view("order:{order_id}")
        def view(request, pk):
            pass


@URLS
def test_on_busy_override_gets_request_and_info(lock_backend):
    hold("page:custom", purpose="nightly rebuild")
    for url in ("/custom/custom/", "/dotted/custom/"):
        response = Client().get(url)
        assert response.status_code == 409
        assert response.json() == {"path": url, "purpose": "nightly rebuild", "pid": os.getpid()}


@URLS
def test_on_busy_from_settings(lock_backend, settings):
    settings.REDISLOCK = {
        **settings.REDISLOCK,
        "VIEW_ON_BUSY": "tests.support.decorator_views.custom_busy",
    }
    hold("page:settings")
    response = Client().get("/page/settings/")
    assert response.status_code == 409 and response.json()["purpose"] == "test holder"


def test_on_busy_info_is_the_refusing_holder_even_if_it_left_since(lock_backend):
    """The holder comes with the refusal: released right after, info still names it."""
    seen = []
    holder = hold("page:gone", purpose="the refusing holder")
    token = holder.token

    def on_busy(request, info):
        seen.append(info)
        from django.http import HttpResponse

        return HttpResponse("busy", status=503)

    class ReleasingLock(Lock):
        def acquire(self, blocking=None, timeout=None):
            ok = super().acquire(blocking, timeout)
            holder.release()  # released right after our attempt failed
            return ok

    @lock_view("page:{slug}", on_busy=on_busy)
    def view(request, slug):
        raise AssertionError("not reached")

    from unittest import mock

    with mock.patch("django_redislock.lock.Lock", ReleasingLock):
        response = view(RequestFactory().get("/"), slug="gone")
    assert response.status_code == 503
    [info] = seen
    assert info.token == token and info.purpose == "the refusing holder"
    assert info.owner.pid == os.getpid() and 0 < info.ttl <= 5


def test_on_busy_info_is_none_when_nobody_holds_it(lock_backend):
    """Refused by a longer waiter's claim, nobody holding it: the look-up finds nobody."""
    seen = []
    lock = Lock("page:claimed", ttl=5)
    client = lock_backend.client()
    client.set(lock.keys.claim, "other-waiter:60000:5000:1:someone", px=5000)

    @lock_view("page:{slug}", on_busy=lambda request, info: seen.append(info) or 503)
    def view(request, slug):
        raise AssertionError("not reached")

    assert view(RequestFactory().get("/"), slug="claimed") == 503
    assert seen == [None]


@URLS
def test_view_raising_lock_not_acquired_itself_is_not_a_423(lock_backend):
    hold("inner")
    with pytest.raises(LockNotAcquired) as exc:
        Client().get("/inner/x/")
    assert exc.value.lock_name == "inner"
    assert lock_info("page:x") is None  # the view's own lock was released


@URLS
def test_class_based_view(lock_backend):
    client = Client()
    assert client.get("/item/5/").content == b"item 5"
    holder = hold("item:5")
    assert client.get("/item/5/").status_code == 423
    holder.release()

    seen = []
    original = Lock.__init__

    def spy(self, name, **kwargs):
        seen.append((name, kwargs.get("purpose")))
        original(self, name, **kwargs)

    from unittest import mock

    with mock.patch.object(Lock, "__init__", spy):
        assert client.get("/item/6/").status_code == 200
    assert seen == [("item:6", "tests.support.decorator_views.ItemView")]


@URLS
async def test_async_view_under_asgi(lock_backend):
    client = AsyncClient()
    response = await client.get("/async/1/")
    assert response.status_code == 200 and response.content == b"async item 1"
    assert response.asgi_request.__class__.__name__ == "ASGIRequest"
    holder = Lock("async:1", ttl=5, purpose="async holder")
    assert await holder.aacquire(blocking=False)
    response = await client.get("/async/1/")
    assert response.status_code == 423 and 1 <= int(response["Retry-After"]) <= 5
    response = await client.get("/async-custom/1/")
    assert response.status_code == 409 and response.content == b"async busy async holder"
    await holder.arelease()
    assert (await client.get("/async/1/")).status_code == 200


@URLS
async def test_async_class_based_view(lock_backend):
    client = AsyncClient()
    response = await client.get("/async-item/2/")
    assert response.status_code == 200 and response.content == b"async class item 2"
    holder = Lock("item:2", ttl=5)
    assert await holder.aacquire(blocking=False)
    assert (await client.get("/async-item/2/")).status_code == 423
    await holder.arelease()


def test_async_view_holds_the_lock_while_it_runs(lock_backend):
    seen = []

    @lock_view("held:{n}", ttl=5)
    async def view(request, n):
        seen.append(lock_info(f"held:{n}") is not None)
        from django.http import HttpResponse

        return HttpResponse("ok")

    from asgiref.sync import async_to_sync

    assert async_to_sync(view)(RequestFactory().get("/"), n=1).status_code == 200
    assert seen == [True] and lock_info("held:1") is None


# -- the examples of docs/decorators.md and docs/signals.md -----------------------------------

DOCS = "docs/decorators.md"


@pytest.mark.parametrize("page", [DOCS, "docs/signals.md"])
def test_every_python_block_of_the_docs_is_a_named_example(page):
    from tests.support.docs_examples import unnamed_blocks

    assert unnamed_blocks(page) == []


def test_docs_locked_examples(lock_backend):
    import datetime

    from tests.support.docs_examples import run_example

    send_invoice = run_example(DOCS, "locked-basic")["send_invoice"]
    assert send_invoice(42) == "sent invoice 42"
    holder = hold("invoice:42")
    with pytest.raises(LockNotAcquired):  # timeout=5, holder's TTL 5 s: shorten the wait
        locked("invoice:{invoice_id}", timeout=0)(send_invoice.__wrapped__)(42)
    holder.release()

    billing = run_example(DOCS, "locked-methods")["Billing"]()
    assert billing.refund(Order(9)) == "refunded 9"
    hold("order:9")
    with pytest.raises(LockNotAcquired):
        billing.refund(Order(9))
    assert billing.statement(5, datetime.date(2024, 3, 1)) == "statement 5 2024-03"

    ns = run_example(DOCS, "locked-async")
    assert asyncio.run(ns["sync_account"](3)) == "synced 3"
    assert ns["build_daily_report"]("2024-03-01") == "report for 2024-03-01"


def test_docs_view_examples(lock_backend):
    from tests.support.docs_examples import run_example

    factory = RequestFactory()
    ns = run_example(DOCS, "view-function")
    assert ns["rebuild_site"](factory.post("/"), site_id=1).content == b"rebuilt 1"
    hold("rebuild:1")
    response = ns["rebuild_site"](factory.post("/"), site_id=1)
    assert response.status_code == 423 and response["Retry-After"] in {"1", "2", "3", "4", "5"}

    from django.contrib.auth.models import AnonymousUser

    request = factory.post("/")
    request.user = SimpleNamespace(pk=3, is_authenticated=True)
    assert ns["save_profile"](request).content == b"saved"
    request.user = AnonymousUser()
    assert ns["save_profile"](request).status_code == 302  # login first; no lock

    ns = run_example(DOCS, "view-on-busy")
    request = factory.post("/")
    request.session = type("Session", (), {"session_key": "abc"})()
    assert ns["checkout"](request).status_code == 200
    hold("checkout:abc", purpose="another tab")
    response = ns["checkout"](request)
    assert response.status_code == 409
    body = __import__("json").loads(response.content)
    assert body["busy"] is True and body["by"] == "another tab" and 0 < body["retry_in"] <= 5
    assert ns["REDISLOCK"] == {"VIEW_ON_BUSY": "myproject.views.busy_json"}

    ns = run_example(DOCS, "view-class")
    view = ns["ExportView"].as_view()
    assert view(factory.post("/"), pk=3).content == b"exported 3"
    hold("export:3")
    assert view(factory.post("/"), pk=3).status_code == 423
    from asgiref.sync import async_to_sync

    assert async_to_sync(ns["async_export"])(factory.get("/"), pk=4).content == b"exported 4"


def test_docs_command_examples(lock_backend):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from tests.support.docs_examples import run_example

    command = run_example(DOCS, "command-decorator")["Command"]
    out, err = StringIO(), StringIO()
    call_command(command(), stdout=out, stderr=err)
    assert out.getvalue() == "newsletter sent\n"
    hold("newsletter")
    out, err = StringIO(), StringIO()
    call_command(command(), stdout=out, stderr=err)
    assert out.getvalue() == "" and err.getvalue().startswith("Skipped: Lock 'newsletter'")

    command = run_example(DOCS, "locked-command")["Command"]
    out = StringIO()
    call_command(command(), "crm", stdout=out)
    assert out.getvalue() == "imported crm\n"
    hold("import:crm")
    with pytest.raises(CommandError, match="'import:crm' is held by"):
        call_command(command(), "crm", stdout=StringIO())
    call_command(command(), "crm", "--no-lock", stdout=out)


def test_docs_redlock_example(lock_backend):
    pytest.importorskip("django_redislock.redlock")
    from tests.support.docs_examples import examples

    example = examples(DOCS)["redlock"]
    # Only decorated here: calling needs REDLOCK_CONNECTIONS and three nodes.
    exec(example.compile(), {"__name__": "docs_example_redlock"})


def test_docs_signal_examples(lock_backend, caplog):
    from tests.support.docs_examples import run_example

    ns = run_example("docs/signals.md", "signals")
    try:
        with caplog.at_level(logging.INFO, logger="myproject.locks"):
            with Lock("audited", ttl=5):
                pass
            from django_redislock import force_release

            hold("audited")
            force_release("audited", user="ops")
    finally:
        signals.lock_acquired.disconnect(ns["on_acquired"])
        signals.lock_released.disconnect(ns["on_released"])
        signals.lock_force_released.disconnect(ns["on_force_released"])
    messages = [r.getMessage() for r in caplog.records if r.name == "myproject.locks"]
    assert messages[:2] == ["acquired audited (fence 1)", "released audited"]
    assert messages[-1].startswith("ops force-released audited (held by ")
    logging_settings = run_example("docs/signals.md", "logging-settings")["LOGGING"]
    assert logging_settings["loggers"]["django_redislock"]["level"] == "DEBUG"
