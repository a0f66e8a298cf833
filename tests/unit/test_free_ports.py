"""Each xdist worker picks test ports from its own slice (tests/helpers/endpoints.py): two
workers can never hand out the same port, whose server would fail with EADDRINUSE."""

from __future__ import annotations

from tests.helpers.endpoints import SLICES, TEST_PORTS, worker_ports


def test_xdist_workers_pick_from_slices_that_do_not_overlap():
    slices = [set(worker_ports(f"gw{n}")) for n in range(SLICES)]
    assert all(len(s) == len(TEST_PORTS) // SLICES for s in slices)
    assert len(set().union(*slices)) == sum(len(s) for s in slices)  # disjoint
    assert set().union(*slices) <= set(TEST_PORTS)


def test_outside_xdist_every_test_port_is_a_candidate():
    assert worker_ports(None) == TEST_PORTS
    assert worker_ports("master") == TEST_PORTS
