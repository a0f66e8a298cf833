"""Two conditions of PostgreSQL's claim function, each read once per claim as a hashed set.

Both ask the same of every candidate row the claim walks: is its lock_key running
(flow/lock_keys.py), is its processo limited (flow/limits.py). Spelled as per-row
probes (``NOT EXISTS``), each walked row paid one index descent per question. A
claim of a keyed backlog walks its whole window (eight rows per task asked for,
claim_function.sql) when most keys are busy, and every ready row when the window
gives nothing: with 100 keys of which ~90 busy, a window claim read ~420 buffers
of which 320 were the limits probe and ~150 the running-key probe, a claim that
found nothing walked 10,000 rows for about 5.5 ms (issue 19). Read once, the
running keys and the limited processos are a hash table each, built at the
statement's first look and probed in memory: the same claim read ~100 buffers,
the empty walk took about 2.5 ms.

The sets are read by the claim's own statement, so in its snapshot: the same
answer the probes gave. ``NOT IN`` (not ``NOT EXISTS``): an uncorrelated
``NOT IN`` is what PostgreSQL runs as a hashed subplan. Neither set holds a NULL
(the running keys are the non-NULL ones of the unique index of running keys, a
limits row's processo is its primary key), and a candidate whose value is NULL
is answered before the ``NOT IN``: the SQL's NULL rules change nothing.

Hashing is the planner's choice: it hashes when it expects the set to fit in
``hash_mem`` and to be looked up more than once. The set is read through
``unnest(ARRAY(...))``, whose size PostgreSQL always estimates at 10 rows, so
the choice does not follow the table's statistics: stale statistics that
expect a million running rows would otherwise plan a scan of the whole set for
every candidate. tests/integration/store/test_store_claim_sets.py checks the
plan with statistics of an empty table and of a full one.
"""

from __future__ import annotations

from nsj_queue_lib.db import pause_conditions

# The candidate {row}'s key (not NULL here: lock_keys.py asks this only of a keyed
# row) is not one of the running keys. In key order, with the claim function's
# enable_sort off: only the unique index of running keys gives that order without a
# sort, so the set is read from it whatever the statistics say (unordered, the planner
# read it from the processo index, whose entries are every ready row too).
KEY_IDLE = (
    "{row}.lock_key NOT IN (SELECT running.lock_key FROM unnest(ARRAY("
    "SELECT held.lock_key FROM {table} AS held"
    " WHERE {held_hot}held.lock_key IS NOT NULL AND held.status = 'processando'"
    " ORDER BY held.lock_key)) AS running(lock_key))"
)


def limits_free(limits_table: str, row: str, now: str = "clock_timestamp()") -> str:
    """SQL: the candidate ``row``'s processo has no limits (flow/limits.py's condition, read
    once per claim) and is not paused, nor is the queue (db/pause_conditions.py: one probe per
    claim statement). The arguments are this library's identifiers, never user input."""
    return (
        f"{pause_conditions.queue_running(limits_table, now)}"
        f" AND ({row}.processo IS NULL OR {row}.processo NOT IN ("
        f"SELECT limited.processo FROM unnest(ARRAY(SELECT lim.processo FROM {limits_table} AS lim"
        f" WHERE {pause_conditions.held('lim', now)}))"
        " AS limited(processo)))"
    )
