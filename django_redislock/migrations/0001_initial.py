# The HeldLock model is unmanaged: this migration creates no table. It exists so
# Django records the model's state, content type and permissions
# (view_heldlock, release_heldlock), and `makemigrations --check` stays clean.

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="HeldLock",
            fields=[
                ("name", models.CharField(max_length=256, primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "held lock",
                "verbose_name_plural": "held locks",
                "permissions": [("release_heldlock", "Can force-release a held lock")],
                "managed": False,
                "default_permissions": ("view",),
                "base_manager_name": "objects",
            },
        ),
    ]
