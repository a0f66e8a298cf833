"""dedupe_key: at most one unfinished task per key, enforced by a unique index.

Each dialect tries the insert in a way that leaves the caller's transaction
usable when the key is taken (PostgreSQL: ON CONFLICT DO NOTHING; MySQL: the
duplicate-key error, which rolls back that statement only), then reads the
task that holds the key. That task may have finished in between (its key is
free again): then the insert is simply tried again.
"""

from __future__ import annotations

from collections.abc import Callable

# The key changes hands this many times in a row, during one insert, only
# under a pathological load: give up with a clear error then.
INSERT_ATTEMPTS = 10


def insert_deduplicated(
    key: str, try_insert: Callable[[], int | None], holder: Callable[[], int | None]
) -> int:
    """The new task's id, or the ``id_inicial`` of the unfinished task holding ``key``.

    ``try_insert`` returns None when the key is taken (nothing written);
    ``holder`` the ``id_inicial`` of the unfinished task with the key, or None.
    """
    for _ in range(INSERT_ATTEMPTS):
        new_id = try_insert()
        if new_id is not None:
            return new_id
        found = holder()
        if found is not None:
            return found
    raise RuntimeError(f"dedupe_key {key!r} kept changing hands; insert the task again")
