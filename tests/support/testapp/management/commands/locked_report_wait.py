"""``on_busy="wait"``: block up to ``timeout`` seconds for the lock."""

from django.core.management.base import BaseCommand

from django_redislock import lock_command


class Command(BaseCommand):
    @lock_command("locked_report", on_busy="wait", timeout=30, ttl=5)
    def handle(self, *args, **options):
        self.stdout.write("report done")
