"""What the test tasks write through the ORM: a JSON field, an instant and a time of day
(the values Django's adapters and converters load)."""

from __future__ import annotations

import os

from django.db import models


class Note(models.Model):
    key = models.CharField(max_length=100)
    data = models.JSONField(null=True)
    at = models.DateTimeField()
    kept = models.TimeField(null=True)

    class Meta:
        app_label = "django_project"
        # Made per test session (tests/integration/test_django.py), so that sessions running
        # side by side on one database never share it.
        db_table = os.environ.get("NSJQ_DJANGO_NOTE_TABLE", "nsjq_django_note")
