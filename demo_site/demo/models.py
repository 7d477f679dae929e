"""The demo's tables: a fenced ledger row, a report, and the freeze demo's timeline."""

from __future__ import annotations

from django.db import models

from django_redislock.fencing import FencedModel


class Ledger(FencedModel):
    """One balance that two lock holders update; ``fence`` rejects the stale one."""

    name = models.CharField(max_length=50, unique=True)
    balance = models.IntegerField(default=0)
    written_by = models.CharField(max_length=100, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.balance} (fence {self.fence})"


class Report(FencedModel):
    """The report the "regenerate report" view rebuilds under a lock."""

    name = models.CharField(max_length=50, unique=True)
    generated_at = models.DateTimeField(null=True, blank=True)
    generated_by = models.CharField(max_length=100, blank=True)
    seconds = models.FloatField(default=0)
    runs = models.IntegerField(default=0)

    def __str__(self) -> str:
        return self.name


class DemoEvent(models.Model):
    """One line of a demo run's timeline (the freeze demo, the report command)."""

    run = models.CharField(max_length=40, db_index=True)
    at = models.DateTimeField(auto_now_add=True)
    actor = models.CharField(max_length=40)
    kind = models.CharField(max_length=20, default="info")  # info, ok, stale, freeze, done
    text = models.TextField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.run} {self.actor}: {self.text}"
