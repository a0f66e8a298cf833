"""A task's state in words (nsj_queue_lib/web/states.py): what an operator expects to read
for each kind of row the queue table holds."""

from __future__ import annotations

import datetime

import pytest

from nsj_queue_lib.web.states import BY_NAME, STATES, state_of

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)


def row(status, *, tentativa=1, due=-60, **flags):
    return dict(
        status=status,
        tentativa=tentativa,
        data_hora=(NOW + datetime.timedelta(seconds=due)).isoformat(),
        **flags,
    )


@pytest.mark.parametrize(
    ("attempt", "state"),
    [
        (row("pendente"), "waiting"),
        (row("pendente", due=3600), "scheduled"),
        (row("agendada", tentativa=2, due=30), "retrying"),
        (row("pendente", tentativa=3), "retrying"),  # a manual retry, due now
        (row("processando"), "running"),
        (row("processando", cancel_requested=True), "cancelling"),
        (row("sucesso"), "completed"),
        (row("cancelada"), "cancelled"),
        (row("falha", reenfileirado=True), "retried"),
        (row("falha", estouro_tentativas=True), "exhausted"),
        (row("falha_processando", estouro_tentativas=True), "exhausted"),
        # An exhausted attempt retried by hand is followed by a new one.
        (row("falha", estouro_tentativas=True, reenfileirado=True), "retried"),
        (row("falha"), "failed"),
        # A dead letter is one whatever it did: execute_dead's default ends it 'sucesso'.
        (row("sucesso", dead=True, live_id=7), "dead_letter"),
        (row("pendente", dead=True, live_id=7), "dead_letter"),
        (row("falha", dead=True, estouro_tentativas=True, live_id=7), "dead_letter"),
    ],
)
def test_each_kind_of_row_reads_as_its_state(attempt, state):
    assert state_of(attempt, NOW).name == state


def test_failures_are_red_and_every_state_has_words_and_a_meaning():
    bad = {s.name for s in STATES if s.tone == "bad"}
    assert bad == {"failed", "exhausted", "dead_letter"}
    assert BY_NAME["dead_letter"].words == "dead letter"
    assert all(s.meaning and s.tone in ("ok", "bad", "retry", "wait", "run", "off") for s in STATES)
