"""A worker written for nsj-queue-lib 1.2.2, run unchanged by 1.2.2 and by this library.

Old-style on purpose: ``from nsj_queue_lib.settings import logger``, an
``__init__`` that does not call ``super().__init__()``, an ``execute`` with
1.2.2's ``multi_db_conn`` parameter, and the handler's write made through
``DBAdapter3(bd_conn.conn)`` (nsj-sql-utils-lib), in the task's transaction.

Each execution records its start at once on a connection of its own
($TEST_STARTED_TABLE: task id, first attempt's id, $TEST_SIDE, pid), sleeps
``{"sleep": s}`` seconds on its first attempt, then writes one row to
$TEST_EFFECTS_TABLE through DBAdapter3: that row commits only if the task does.
Run with the interpreter of either library and the worker's environment.
"""

import json
import os
import time

import psycopg2
from nsj_sql_utils_lib.dbadapter3 import DBAdapter3

from nsj_queue_lib.settings import logger
from nsj_queue_lib.worker_base import WorkerBase


def _record_start(tarefa, side):
    conn = psycopg2.connect(
        host=os.environ["DB_HOST"],
        port=os.environ["DB_PORT"],
        dbname=os.environ["DB_BASE"],
        user=os.environ["DB_USER"],
        password=os.environ.get("DB_PASS") or None,
    )
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {os.environ['TEST_STARTED_TABLE']} (task_id, id_inicial, side, pid) "
                "VALUES (%s, %s, %s, %s)",
                (tarefa["id"], tarefa["id_inicial"] or tarefa["id"], side, os.getpid()),
            )
    finally:
        conn.close()


class LegacyStyleWorker(WorkerBase):
    def __init__(self):  # no super().__init__(): 1.2.2's WorkerBase had no __init__
        self.side = os.environ["TEST_SIDE"]

    def execute(self, payload, tarefa, bd_conn, multi_db_conn=None):
        _record_start(tarefa, self.side)
        spec = json.loads(payload or "{}")
        if tarefa["tentativa"] == 1:
            time.sleep(spec.get("sleep", 0))
        db = DBAdapter3(bd_conn.conn)
        db.execute(
            f"INSERT INTO {os.environ['TEST_EFFECTS_TABLE']} (task_id, id_inicial, side, pid) "
            "VALUES (%(id)s, %(first)s, %(side)s, %(pid)s)",
            id=tarefa["id"],
            first=tarefa["id_inicial"] or tarefa["id"],
            side=self.side,
            pid=os.getpid(),
        )
        logger.info("task %s done by the %s worker", tarefa["id"], self.side)
        return f"done by {self.side}"


if __name__ == "__main__":
    LegacyStyleWorker().run()
