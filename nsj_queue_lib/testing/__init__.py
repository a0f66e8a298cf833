"""Test doubles for applications: ``InMemoryQueue`` runs handlers without a database."""

from nsj_queue_lib.testing.queue import InMemoryQueue
from nsj_queue_lib.testing.store import MemoryConnection

__all__ = ["InMemoryQueue", "MemoryConnection"]
