"""The claim routine's release number (CONTRACT.md section 7, "Upgrades without downtime").

Workers call ``claim_next_<queue>_v<N>``; ``db_gen --upgrade`` adds that routine and keeps
the previous release's, which its workers still call during a rolling upgrade. That only
holds if N changes whenever a release changes the claim SQL: this test pins the SQL's
digests to N.
"""

from __future__ import annotations

import pytest

from nsj_queue_lib.db.dialect import (
    CLAIM_ROUTINE_RELEASE,
    DdlNames,
    claim_routine_name,
)
from nsj_queue_lib.db.mysql.dialect import claim_procedure_version
from nsj_queue_lib.db.postgres.dialect import OLD_CLAIM_FUNCTION_ARGS, claim_function_version
from nsj_queue_lib.db_gen import render
from nsj_queue_lib.identifiers import check_identifier

# The claim SQL of CLAIM_ROUTINE_RELEASE, by dialect (the routines' COMMENT).
PINNED = {
    2: {
        "postgres": "nsj_queue_lib claim cf7991c0ea19fe7e",
        "mysql": "nsj_queue_lib claim 1ef25d36c532cf5e",
    },
}

BUMP = (
    "the claim SQL changed (its digest is {found}, release {release} pins {pinned}). If "
    "release {release} of the claim routine has been released, bump CLAIM_ROUTINE_RELEASE in "
    "nsj_queue_lib/db/dialect.py (and its old signature in "
    "nsj_queue_lib/db/postgres/dialect.py OLD_CLAIM_FUNCTION_ARGS when the arguments "
    "changed), so that db_gen --upgrade keeps the previous routine for the running workers; "
    "then pin the new digests here. If it has not been released yet, only pin the new digest."
)


@pytest.mark.parametrize(
    "dialect, version", [("postgres", claim_function_version), ("mysql", claim_procedure_version)]
)
def test_the_claim_sql_is_the_one_pinned_to_its_release(dialect, version):
    pinned = PINNED[CLAIM_ROUTINE_RELEASE][dialect]
    found = version()
    assert found == pinned, BUMP.format(found=found, release=CLAIM_ROUTINE_RELEASE, pinned=pinned)


def test_every_earlier_release_can_be_dropped_by_name_and_arguments():
    assert set(OLD_CLAIM_FUNCTION_ARGS) == set(range(1, CLAIM_ROUTINE_RELEASE))


def test_routine_names_carry_the_release_and_fit_every_accepted_queue_name():
    assert claim_routine_name("public.fila") == f"public.claim_next_fila_v{CLAIM_ROUTINE_RELEASE}"
    assert claim_routine_name("fila", 1) == "claim_next_fila"
    # The longest queue name db_gen accepts (its longest index name decides).
    longest = max(
        (n for n in range(1, 64) if _accepted("q" * n)),
        default=0,
    )
    assert longest >= 30
    for release in (CLAIM_ROUTINE_RELEASE, 99_999):
        check_identifier(DdlNames.routine_name("q" * longest, release), "claim routine")
    # A table too long for the versioned name gets None (bind then says why).
    assert claim_routine_name("s." + "q" * 60) is None


def test_create_names_only_this_release_and_upgrade_keeps_the_previous_routine():
    create = render("public", "fila_teste")
    assert f"FUNCTION public.claim_next_fila_teste_v{CLAIM_ROUTINE_RELEASE}(" in create
    assert "claim_next_fila_teste(" not in create
    upgrade = render("public", "fila_teste", "mysql", upgrade=True)
    assert f"DROP PROCEDURE IF EXISTS public.claim_next_fila_teste_v{CLAIM_ROUTINE_RELEASE}" in (
        upgrade
    )
    # The previous release's routine stays callable under its name, made a call of this
    # release's (it leaves limited processos alone; docs/flow-control.md).
    previous = upgrade.split("CREATE PROCEDURE public.claim_next_fila_teste(")[1].split("END//")[0]
    assert f"CALL public.claim_next_fila_teste_v{CLAIM_ROUTINE_RELEASE}(" in previous
    drop = render("public", "fila_teste", "postgres", drop_old_routines=True)
    assert drop == (
        "DROP FUNCTION IF EXISTS public.claim_next_fila_teste(bigint, text, integer, integer, "
        "integer);\n"
    )


def _accepted(queue: str) -> bool:
    try:
        DdlNames("public", queue)
    except ValueError:
        return False
    return True
