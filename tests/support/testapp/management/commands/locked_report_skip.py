"""``on_busy="skip"``: a cron job that quietly does nothing when another run holds the lock."""

from django.core.management.base import BaseCommand

from django_redislock import lock_command


class Command(BaseCommand):
    @lock_command("locked_report", on_busy="skip", ttl=5)
    def handle(self, *args, **options):
        self.stdout.write("report done")
