"""A custom AdminSite that registers the held-locks admin (tests/test_admin.py)."""

from django.contrib.admin import AdminSite
from django.urls import path

from django_redislock.admin import HeldLockAdmin
from django_redislock.models import HeldLock


class OpsSite(AdminSite):
    site_header = "Ops console"
    site_title = "Ops"
    index_title = "Operations"


site = OpsSite(name="ops")
site.register(HeldLock, HeldLockAdmin)

urlpatterns = [path("ops/", site.urls)]
