"""``python -m nsj_queue_lib.contrib.django [--backend ALIAS] [--queue NAME]``: the worker of a
Django queue, in a process whose DJANGO_SETTINGS_MODULE names the project's settings."""

from __future__ import annotations

import django

if __name__ == "__main__":
    django.setup()
    from nsj_queue_lib.contrib.django.worker import main

    main(prog="python -m nsj_queue_lib.contrib.django")
