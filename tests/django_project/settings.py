"""Settings of the test project: PostgreSQL as ``default``, MariaDB as ``mysql`` (when
``TEST_MYSQL_DSN`` is set), one nsj_queue_lib task backend on each."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

from nsj_queue_lib.db.mysql.as_mysqldb import install_as_mysqldb
from tests.helpers.databases import mysql_connect_kwargs

# Django's MySQL backend imports MySQLdb: PyMySQL stands in (docs/integrations/django.md).
install_as_mysqldb()

SECRET_KEY = "nsj-queue-lib-tests"
USE_TZ = True
TIME_ZONE = "America/Sao_Paulo"  # not UTC: the worker must read and write instants right
DEBUG = False

try:
    import django.tasks  # noqa: F401 - Django 6 has the framework built in
except ImportError:
    _FRAMEWORK = ["django_tasks"]
else:
    _FRAMEWORK = []

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    *_FRAMEWORK,
    "nsj_queue_lib.contrib.django",
    "tests.django_project",
]

_pg = conninfo_to_dict(os.environ.get("NSJQ_DJANGO_PG_DSN") or os.environ["TEST_PG_DSN"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.get("dbname") or "test",
        "USER": _pg.get("user") or "postgres",
        "PASSWORD": _pg.get("password") or "",
        "HOST": _pg.get("host") or "127.0.0.1",
        "PORT": _pg.get("port") or "5432",
    }
}
TASKS = {
    "default": {
        "BACKEND": "nsj_queue_lib.contrib.django.QueueBackend",
        "QUEUES": ["default", "other"],
        "OPTIONS": {"TABLE": os.environ.get("NSJQ_DJANGO_PG_TABLE", "public.django_tasks")},
    }
}

if os.environ.get("TEST_MYSQL_DSN"):
    _mysql = mysql_connect_kwargs(os.environ["TEST_MYSQL_DSN"])
    DATABASES["mysql"] = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": _mysql["database"],
        "USER": _mysql["user"],
        "PASSWORD": _mysql["password"],
        "HOST": _mysql["host"],
        "PORT": str(_mysql["port"]),
        "OPTIONS": {"charset": "utf8mb4"},
    }
    TASKS["mysql"] = {
        "BACKEND": "nsj_queue_lib.contrib.django.QueueBackend",
        "OPTIONS": {
            "DATABASE": "mysql",
            "TABLE": os.environ.get(
                "NSJQ_DJANGO_MYSQL_TABLE", f"{_mysql['database']}.django_tasks"
            ),
        },
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
