"""``python manage.py nsjq_worker [--backend ALIAS] [--queue NAME]``: the worker of a Django
queue (``nsj_queue_lib.contrib.django.worker``); runs until SIGTERM or SIGINT."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from nsj_queue_lib.contrib.django.worker import add_arguments, run


class Command(BaseCommand):
    help = "Run nsj_queue_lib's worker of a Django task queue until SIGTERM or SIGINT."

    def add_arguments(self, parser: Any) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run(options["backend"], options["queue"])
