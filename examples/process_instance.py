"""A process instance (seed 001's start / call / timer / remove): a payment.

``start_process`` creates the payment ``pay-1`` and runs ``payment_init``: its state
holds the amount, its status says it waits for a capture, and a timer
(``payment_timeout``, after the payload's ``capture_within_s``) will void it unless a
call comes first. ``call_process`` sends
it ``payment_capture``, whose handler's result is the call's response (the caller
waits for it: a synchronous call); capturing replaces the timeout timer with a
1-second ``payment_settle`` timer, and settling asks for the process's removal a
minute later. ``pay-2`` is never captured: its 3-second timeout fires. ``pay-1`` is given
a minute, so that its capture wins the race even on a machine that stalls for seconds. Every change of a
process (its state, status, events, timers) commits with its task.

Run a worker, then the client (the usual environment: DB_HOST, DB_BASE, DB_USER,
QUEUE_NAME, QUEUE_TABLE; PostgreSQL or MySQL/MariaDB)::

    python examples/process_instance.py            # the worker
    python examples/process_instance.py enqueue    # another shell
"""

from __future__ import annotations

import json
import os
import sys
import time

from nsj_queue_lib import QueueClient, Settings, Task, WorkerBase, current_task


class PaymentWorker(WorkerBase):
    @Task("payment_init")
    def init(self, payload: str, tarefa: dict, bd_conn) -> dict:
        order = json.loads(payload)
        process = current_task().process
        process.state = {"amount": order["amount"], "captured": False}
        process.status = "waiting_capture"
        process.emit("created", process.state)
        process.set_timer(order["capture_within_s"], "payment_timeout")
        return {"status": process.status}

    @Task("payment_capture")
    def capture(self, payload: str, tarefa: dict, bd_conn) -> dict:
        process = current_task().process
        if process.status != "waiting_capture":
            return {"error": f"cannot capture a payment that is {process.status}"}
        process.state["captured"] = True
        process.status = "captured"
        process.emit("captured")
        process.set_timer(1, "payment_settle")  # replaces the timeout timer
        return {"captured": process.state["amount"]}

    @Task("payment_settle")
    def settle(self, payload: str, tarefa: dict, bd_conn) -> None:
        process = current_task().process
        process.status = "settled"
        process.emit("settled")
        process.remove_after(60)  # the purge service deletes it and its history then

    @Task("payment_timeout")
    def timeout(self, payload: str, tarefa: dict, bd_conn) -> None:
        process = current_task().process
        process.status = "voided"
        process.detail = "not captured in time"
        process.emit("voided")
        process.remove_after(60)


def until_status(client: QueueClient, process_id: str, status: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        process = client.get_process(process_id)
        if process is not None and process["status"] == status:
            return process
        time.sleep(0.2)
    raise TimeoutError(f"{process_id} never became {status}")


def run_payments() -> None:
    from nsj_queue_lib.db.driver import make_driver

    settings = Settings.from_env(os.environ)
    conn = make_driver(settings).connect(autocommit=True)
    try:
        client = QueueClient(conn, settings.queue_table)
        client.start_process("pay-1", "payment_init", {"amount": 100, "capture_within_s": 60})
        client.start_process("pay-2", "payment_init", {"amount": 7, "capture_within_s": 3})
        capture = client.call_process("pay-1", "payment_capture", {})
        client.wait_for_task(capture, timeout_s=30)  # a synchronous call: wait for it
        print(json.dumps(client.call_response(capture)))
        for process_id, status in (("pay-1", "settled"), ("pay-2", "voided")):
            process = until_status(client, process_id, status)
            events = [event["event_type"] for event in process["events"]]
            print(process_id, process["status"], events, process["state"])
    finally:
        conn.close()


if __name__ == "__main__":
    run_payments() if sys.argv[1:] == ["enqueue"] else PaymentWorker().run()
