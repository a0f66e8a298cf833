"""Django's task framework on nsj_queue_lib (extra ``django``; docs/integrations/django.md).

``TASKS = {"default": {"BACKEND": "nsj_queue_lib.contrib.django.QueueBackend", ...}}``
enqueues in Django's transaction; ``python manage.py nsjq_worker`` (with
``"nsj_queue_lib.contrib.django"`` in INSTALLED_APPS) or ``python -m
nsj_queue_lib.contrib.django`` runs the tasks. Django 6's ``django.tasks`` or, before
it, the ``django-tasks`` backport.
"""

from __future__ import annotations

from nsj_queue_lib.contrib.django.backend import QueueBackend

__all__ = ["QueueBackend"]
