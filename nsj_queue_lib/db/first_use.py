"""A hook run once, just before the next statement anything sends on a connection.

The driver-neutral part: the hook's state on the connection, and the
once-per-process check that a driver still runs it. A driver's mixin wraps
the place its connection sends every command through and calls
``_nsjq_fire`` there (db/postgres/first_use.py for psycopg,
db/mysql/first_use.py for PyMySQL). Group commit arms the hook with the savepoint a
handler would roll back to, so that a handler that sends nothing costs no
round trip (docs/group-commit.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from nsj_queue_lib.exceptions import DatabaseError
from nsj_queue_lib.log import get_logger

logger = get_logger("group_commit")

# What became of an armed hook (``FirstUseState.disarm_first_use``).
UNUSED, RAN, FAILED = "unused", "ran", "failed"


class FirstUseState:
    """The hook's state, mixed into a driver's connection class with the driver's wrapper."""

    _nsjq_first_use: Callable[[], None] | None = None
    _nsjq_first_use_state = UNUSED
    # What the hook raised (FAILED), until the next arm: the caller can tell one failure
    # from another (MySQL's group tells a lost group from a failed savepoint).
    first_use_error: BaseException | None = None

    def arm_first_use(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` before the next command sent (once). An exception of the hook is
        kept (``disarm_first_use`` says FAILED) and the command goes on."""
        self._nsjq_first_use = hook
        self._nsjq_first_use_state = UNUSED
        self.first_use_error = None

    def run_first_use_now(self, hook: Callable[[], None]) -> None:
        """Arm ``hook`` and run it at once (where the hook would not fire: the check below
        said so); ``disarm_first_use`` then says RAN or FAILED, as if a command had been sent."""
        self.arm_first_use(hook)
        self._nsjq_fire()

    def disarm_first_use(self) -> str:
        """Forget the hook: UNUSED when no command was sent since it was armed (it never
        ran), RAN, or FAILED (it raised)."""
        self._nsjq_first_use = None
        state, self._nsjq_first_use_state = self._nsjq_first_use_state, UNUSED
        return state

    def _nsjq_fire(self) -> None:
        hook = self._nsjq_first_use
        if hook is None:
            return
        self._nsjq_first_use = None  # first: the hook's own statement must not recurse
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - told by disarm_first_use, not to the handler
            self._nsjq_first_use_state = FAILED
            self.first_use_error = exc
        else:
            self._nsjq_first_use_state = RAN


# Connection classes a FiresCheck found running the hook: arm_savepoint, run once per task,
# arms theirs without asking the check again.
_FIRING: set[type] = set()


class FiresCheck:
    """Whether the hook works on a connection's class: ``probe(conn)`` runs once per process
    and class (a real statement with a no-op hook armed); False, with one WARNING naming
    ``driver``, when it does not, and the caller sets its savepoints at once."""

    def __init__(self, driver: str, broken: type[BaseException] | tuple[type[BaseException], ...]):
        self.driver = driver
        self.broken = broken  # the driver's errors: a broken connection tells nothing
        self.checked: dict[type, bool] = {}  # connection class -> whether the hook fires
        self._lock = threading.Lock()

    def __call__(self, conn: Any, probe: Callable[[Any], bool]) -> bool:
        cls = type(conn)
        known = self.checked.get(cls)
        if known is not None:
            return known
        try:
            fires = probe(conn)
        except self.broken:
            return False  # the eager savepoint fails there
        with self._lock:
            if cls not in self.checked:
                self.checked[cls] = fires
                if fires:
                    _FIRING.add(cls)
                if not fires:
                    logger.warning(
                        "%s: the hook that sets a group's savepoint before a handler's first "
                        "statement does not run (driver internals changed); group commit sets "
                        "each savepoint before its handler instead (one round trip more)",
                        self.driver,
                    )
            return self.checked[cls]


def probe_select_1(conn: Any, run: Callable[[Any], None]) -> bool:
    """Whether a no-op hook armed on ``conn`` runs when ``run(conn)`` sends a statement."""
    if not isinstance(conn, FirstUseState):
        return False
    conn.arm_first_use(lambda: None)
    try:
        run(conn)
    finally:
        state = conn.disarm_first_use()
    return state == RAN


# -- what group commit does with it (db/<dialect>/group.py) --------------------------------


def arm_savepoint(
    conn: Any, set_savepoint: Callable[[], None], fires: Callable[[Any], bool]
) -> None:
    """Set the savepoint before the handler's first statement on ``conn``: now when ``conn``
    has no hook (not a worker's connection) or the driver no longer runs it (``fires``)."""
    if type(conn) in _FIRING:
        conn.arm_first_use(set_savepoint)
        return
    arm = getattr(conn, "arm_first_use", None)
    if arm is None:
        set_savepoint()
    elif fires(conn):
        arm(set_savepoint)
    else:  # set now; the connection says RAN (or FAILED) as if a statement had fired it
        conn.run_first_use_now(set_savepoint)


def disarm(conn: Any) -> str:
    """The savepoint armed for the handler that just returned is no longer wanted: whether it
    was set (RAN, or FAILED), or never (UNUSED: the handler sent no statement)."""
    disarm_first_use = getattr(conn, "disarm_first_use", None)
    return str(disarm_first_use()) if disarm_first_use is not None else RAN


def savepoint_to_roll_back(conn: Any) -> bool:
    """Whether the failed handler's savepoint is there to roll back to (False: it sent no
    statement, nothing to undo). Raises DatabaseError when it could not be set: not to an
    earlier handler's savepoint of the same name, the group's transaction is given up and
    its tasks settled from a fresh connection (GroupDrain._failed)."""
    state = disarm(conn)
    if state == FAILED:
        raise DatabaseError("rollback to savepoint failed: the savepoint could not be set")
    return state == RAN
