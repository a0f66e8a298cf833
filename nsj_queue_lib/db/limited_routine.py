"""The limited claim routine's DDL (``db/<dialect>/limited_claim.sql``) and its version.

PostgreSQL's is a function and MySQL/MariaDB's a procedure, both named
``claim_limited_<queue>_v<N>`` (``DdlNames.limited_routine_name``); db_gen
creates them with the queue and ``--upgrade`` adds them. A worker with
limits checks the routine's COMMENT at start (db/limits_store.py), as it
does the claim routine's.
"""

from __future__ import annotations

import hashlib
import importlib

from nsj_queue_lib.db.dialect import CLAIM_ROUTINE_RELEASE, DdlNames
from nsj_queue_lib.db.sql_files import read_sql, render, sql_code
from nsj_queue_lib.flow.limits import CAP_RECHECK_SECONDS, RATE_CATCH_UP, limited_states
from nsj_queue_lib.flow.lock_keys import CLAIM_ATTEMPTS, lock_key_free

# Per dialect: the clock, and the parameter holding the open windows' hashes.
_NOW = {"postgres": "clock_timestamp()", "mysql": "NOW(6)"}
_OPEN_WINDOWS = {"postgres": "open_windows", "mysql": "p_open_windows"}
# ... and the one holding the processos the worker handles (NULL: every one).
_HANDLED_PROCESSOS = {"postgres": "handled_processos", "mysql": "p_handled_processos"}
# The claim routine versions of the previous release (1), as its workers check them
# at start: its routine, made a call of this release's by --upgrade, keeps them.
PREVIOUS_CLAIM_VERSIONS = {
    "postgres": "nsj_queue_lib claim 9ac7ae8eeb854147",
    "mysql": "nsj_queue_lib claim d8ff69fda4465378",
}
# The arguments, as in COMMENT ON FUNCTION (PostgreSQL).
POSTGRES_ARGS = "(text[], text[], double precision, boolean, integer, varchar[])"


def _values(dialect: str, table: str, limits_table: str) -> dict[str, str]:
    now = _NOW[dialect]
    # The dialect's own placeholders (MySQL: the claimed row as JSON), reached by name.
    own = importlib.import_module(f"nsj_queue_lib.db.{dialect}.dialect")
    # flow/lock_keys.py's condition, unless the dialect spells it its own way.
    free = getattr(own, "LOCK_KEY_FREE", lock_key_free)(table, "t", now)
    return {
        **getattr(own, "LIMITED_CLAIM_VALUES", {}),
        "table": table,
        "limits_table": limits_table,
        "limited_states": limited_states(
            dialect,
            table,
            limits_table,
            _OPEN_WINDOWS[dialect],
            free,
            now,
            _HANDLED_PROCESSOS[dialect],
        ),
        "lock_key_free": free,
        "catch_up": repr(RATE_CATCH_UP),
        "cap_recheck": repr(CAP_RECHECK_SECONDS),
        "attempts": str(CLAIM_ATTEMPTS),
    }


def limited_claim_version(dialect: str) -> str:
    """The routine's COMMENT: changes whenever its code does (comments aside)."""
    values = dict(_values(dialect, "t", "l"), limited_claim="r", limited_claim_version="")
    source = sql_code(render(read_sql(dialect, "limited_claim.sql"), values))
    return f"nsj_queue_lib limited claim {hashlib.sha256(source.encode()).hexdigest()[:16]}"


def limited_claim_ddl(dialect: str, template_values: dict[str, str]) -> str:
    """The routine's CREATE for the queue of ``template_values`` (DdlNames.template_values)."""
    values = _values(dialect, template_values["table"], template_values["limits_table"])
    values["limited_claim"] = template_values["limited_claim"]
    values["limited_claim_version"] = limited_claim_version(dialect)
    return render(read_sql(dialect, "limited_claim.sql"), values).strip()


def previous_claim_ddl(dialect: str, names: DdlNames) -> str:
    """``db_gen --upgrade``: the previous release's claim routine made a call of this
    release's (``previous_claim.sql``), so that its workers leave limited processos alone.
    Written for release 1 next to release 2; a later release rethinks it."""
    if CLAIM_ROUTINE_RELEASE != 2:
        return ""
    values = names.template_values()
    values["previous_claim_function"] = names.old_routine_names()[1]
    values["previous_claim_version"] = PREVIOUS_CLAIM_VERSIONS[dialect]
    return render(read_sql(dialect, "previous_claim.sql"), values).strip()
