"""``@lock_command()`` with the defaults: lock named after the command, on_busy="error"."""

from django.core.management.base import BaseCommand

from django_redislock import lock_command


class Command(BaseCommand):
    help = "Write a report while holding the lock 'locked_report'."

    @lock_command(ttl=5)
    def handle(self, *args, **options):
        self.stdout.write("report done")
