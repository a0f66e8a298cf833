"""Infrastructure failures: the worker's own connection died under a running handler.

A server shutdown, a failover or a network loss is nobody's fault in the
task: such an attempt is settled like a shutdown release ('falha_processando',
its next attempt due at once), not as the handler's failure with its back-off.
Which exceptions mean "the connection is gone" is each driver's to say
(``Driver.is_connection_lost``); a handler's own error stays a normal failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nsj_queue_lib import model
from nsj_queue_lib.retry_policy import Decision, Outcome

# (the task's connection, the error) -> whether the connection itself was lost.
ConnectionLost = Callable[[Any, BaseException], bool]


@dataclasses.dataclass(frozen=True)
class Settlement:
    """How a failed attempt is recorded: its status, what is said, the next attempt's delay."""

    status: str
    error: BaseException | str
    decision: Decision


def settlement(
    conn: Any, error: BaseException, decision: Decision, connection_lost: ConnectionLost | None
) -> Settlement:
    """A handler's failure as itself, or a lost connection as a release for a new attempt."""
    if connection_lost is None or not connection_lost(conn, error):
        return Settlement(model.FALHA, error, decision)
    why = f"the worker's database connection was lost while the task ran ({error})".strip()
    released = (
        dataclasses.replace(decision, delay_seconds=0.0)
        if decision.outcome is Outcome.RETRY
        else decision
    )
    return Settlement(model.FALHA_PROCESSANDO, f"{why}; released for a new attempt", released)
