"""Views decorated with ``lock_view``, served by ``tests/support/urls_decorators.py``."""

from __future__ import annotations

import threading

from django.http import HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View

from django_redislock import Lock, lock_view


class Gate:
    """Lets a test keep a request inside its view until the test says so."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.leave = threading.Event()


gate = Gate()


def reset_gate() -> Gate:
    global gate
    gate = Gate()
    return gate


@lock_view("page:{slug}", ttl=5)
def page(request, slug):
    return HttpResponse(f"page {slug}")


@lock_view("gate", ttl=5)
def gate_view(request):
    current = gate
    current.entered.set()
    if not current.leave.wait(timeout=30):
        return HttpResponse("gate never opened", status=500)
    return HttpResponse("passed the gate")


@lock_view("search:{request.GET[q]}", ttl=5)
def search(request):
    return HttpResponse(f"results for {request.GET['q']}")


@lock_view("profile:{request.user.pk}", ttl=5)
def profile(request):
    return HttpResponse(f"profile of {request.user.pk}")


@lock_view("page:{missing}", ttl=5)
def broken_template(request, **kwargs):
    """``**kwargs`` hides the missing field until the call."""
    return HttpResponse("never")


@lock_view(lambda request, slug: f"page:{slug.lower()}", ttl=5)
def callable_name(request, slug):
    return HttpResponse(f"callable {slug}")


def custom_busy(request, info):
    return JsonResponse(
        {
            "path": request.path,
            "purpose": info.purpose if info else None,
            "pid": info.owner.pid if info else None,
        },
        status=409,
    )


@lock_view("page:{slug}", ttl=5, on_busy=custom_busy)
def page_custom_busy(request, slug):
    return HttpResponse(f"page {slug}")


@lock_view("page:{slug}", ttl=5, on_busy="tests.support.decorator_views.custom_busy")
def page_dotted_busy(request, slug):
    return HttpResponse(f"page {slug}")


@lock_view("page:{slug}", ttl=5)
def page_inner_lock(request, slug):
    """Takes a second lock itself: its LockNotAcquired must not become a 423."""
    with Lock("inner", timeout=0):
        return HttpResponse("inner")


@lock_view("async:{item_id}", ttl=5)
async def async_item(request, item_id):
    return HttpResponse(f"async item {item_id}")


async def async_busy(request, info):
    return HttpResponse(f"async busy {info.purpose if info else None}", status=409)


@lock_view("async:{item_id}", ttl=5, on_busy=async_busy)
async def async_item_custom_busy(request, item_id):
    return HttpResponse(f"async item {item_id}")


@method_decorator(lock_view("item:{pk}", ttl=5), name="dispatch")
class ItemView(View):
    def get(self, request, pk):
        return HttpResponse(f"item {pk}")


@method_decorator(lock_view("item:{pk}", ttl=5), name="dispatch")
class AsyncItemView(View):
    async def get(self, request, pk):
        return HttpResponse(f"async class item {pk}")
