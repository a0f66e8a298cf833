"""The Django app of the integration: in INSTALLED_APPS, it brings ``manage.py nsjq_worker``."""

from __future__ import annotations

from django.apps import AppConfig


class NsjQueueLibConfig(AppConfig):
    name = "nsj_queue_lib.contrib.django"
    label = "nsj_queue_lib"  # the default, the name's last part, would be "django"
    verbose_name = "nsj_queue_lib task queue"
