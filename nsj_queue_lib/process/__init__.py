"""Process instances (seed 001): keyed processes with state, events, timers and calls.

A process is a row of ``<queue>_processes`` identified by ``process_id``. Its tasks
(``start_process``, ``call_process``, ``repair_process``, ``insert_task(process_id=)``
and the timers its handlers set) carry the lock key ``process:<id>``, so they run
one at a time in claim order (flow/lock_keys.py), and each is listed in
``<queue>_process_tasks`` with its kind and, once it succeeded, its response.
A handler sees its process in ``current_task().process`` (``instance.py``); what it
changes commits with its task (``running.py``). docs/how-to/processes.md.
"""
