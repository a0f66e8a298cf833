"""The only package that knows SQL dialects.

Everything outside ``db/`` talks to a ``Dialect`` (DDL) or a ``QueueStore``
(the queue's operations) and never formats SQL itself.
"""
