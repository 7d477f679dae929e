from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo_site.demo"
    label = "demo"
    verbose_name = "django-redislock demo"
    default_auto_field = "django.db.models.BigAutoField"
