from django.contrib import admin
from django.urls import path

from demo_site.demo import views

urlpatterns = [
    path("", views.home, name="home"),
    path("report/", views.report, name="report"),
    path("report/<slug:report>/regenerate/", views.regenerate_report, name="regenerate"),
    path("fencing/", views.fencing, name="fencing"),
    path("fencing/run/", views.fencing_run, name="fencing-run"),
    path("command/", views.command, name="command"),
    path("contention/", views.contention, name="contention"),
    path("election/", views.election, name="election"),
    path("election/status.json", views.election_status, name="election-status"),
    path("election/kill/", views.election_kill, name="election-kill"),
    path("election/join/", views.election_join, name="election-join"),
    path("celery/", views.celery_page, name="celery"),
    path("celery/enqueue/", views.celery_enqueue, name="celery-enqueue"),
    path("admin/", admin.site.urls),
]
