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
    path("rwlock/", views.rwlock_page, name="rwlock"),
    path("rwlock/status.json", views.rwlock_status, name="rwlock-status"),
    path("rwlock/start/", views.rwlock_start, name="rwlock-start"),
    path("semaphore/", views.semaphore_page, name="semaphore"),
    path("semaphore/status.json", views.semaphore_status, name="semaphore-status"),
    path("semaphore/start/", views.semaphore_start, name="semaphore-start"),
    path("semaphore/kill/", views.semaphore_kill, name="semaphore-kill"),
    path("celery/", views.celery_page, name="celery"),
    path("celery/enqueue/", views.celery_enqueue, name="celery-enqueue"),
    path("admin/", admin.site.urls),
]
