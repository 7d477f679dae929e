"""A ``LockedCommand`` whose lock name is a template over its options."""

from django_redislock import LockedCommand


class Command(LockedCommand):
    help = "Import one source; two imports of the same source never overlap."
    lock_name = "import:{source}"
    lock_ttl = 5

    def add_arguments(self, parser):
        parser.add_argument("source")

    def handle(self, *args, source, **options):
        from django_redislock import lock_info

        info = lock_info(f"import:{source}")
        watchdog = "on" if info and info.watchdog else "off"
        held = "held" if info else "not held"
        self.stdout.write(f"imported {source} (lock {held}, watchdog {watchdog})")
