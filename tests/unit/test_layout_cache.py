"""db/layout_cache.py: what a client remembers of a queue table's layout, and for how long."""

from __future__ import annotations

import pytest

from nsj_queue_lib.db import layout_cache


class Server:
    """A connection's stand-in: answers the layout query with ``partitioned``, counts asks."""

    def __init__(self, partitioned: bool, host: str | None = "db1") -> None:
        self.partitioned, self.asked = partitioned, 0
        self.host, self.port, self.unix_socket, self.db = host, 3306, None, b"app"

    def cursor(self) -> Server:
        return self

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: dict[str, object]) -> None:
        assert "information_schema.PARTITIONS" in sql and params["table"] == "fila"
        self.asked += 1

    def fetchone(self) -> tuple[int]:
        return (int(self.partitioned),)


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.setattr(layout_cache, "_known", {})


def test_a_partitioned_table_is_asked_about_once(monkeypatch):
    server = Server(partitioned=True)
    clock = iter([0.0, 1.0, 10_000.0])
    monkeypatch.setattr(layout_cache, "monotonic", lambda: next(clock))
    assert [layout_cache.partitioned(server, "mysql", "fila") for _ in range(3)] == [True] * 3
    assert server.asked == 1


def test_a_plain_table_is_asked_about_again_after_a_minute(monkeypatch):
    server = Server(partitioned=False)
    now = [0.0]
    monkeypatch.setattr(layout_cache, "monotonic", lambda: now[0])
    assert not layout_cache.partitioned(server, "mysql", "fila")
    now[0] = layout_cache.PLAIN_RECHECK_SECONDS - 1
    assert not layout_cache.partitioned(server, "mysql", "fila") and server.asked == 1
    server.partitioned = True  # db_gen --upgrade --layout partitioned, meanwhile
    now[0] = layout_cache.PLAIN_RECHECK_SECONDS + 1
    assert layout_cache.partitioned(server, "mysql", "fila") and server.asked == 2


def test_servers_and_anonymous_connections_are_told_apart():
    one, other = Server(partitioned=True), Server(partitioned=False, host="db2")
    assert layout_cache.partitioned(one, "mysql", "fila")
    assert not layout_cache.partitioned(other, "mysql", "fila")
    first, second = Server(True, host=None), Server(False, host=None)
    assert layout_cache.partitioned(first, "mysql", "fila")
    assert not layout_cache.partitioned(second, "mysql", "fila")
    assert (first.asked, second.asked) == (1, 1)
