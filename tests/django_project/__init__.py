"""A minimal Django project for the Django integration's tests (tests/integration/test_django.py).

Its settings read the test databases from the environment the test session sets
(``NSJQ_DJANGO_*``): the queue tables are made per test, the notes table per session.
"""
