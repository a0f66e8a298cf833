"""Workflows: dependencies between tasks (``after=``), waiting for a task's end, and
the handler's side of them (``current_task().parents()``, ``.spawn(...)``).

- ``dependencies``: a child inserted ``after`` its parents waits in 'aguardando';
  the transaction that settles its last parent releases it (the claim and settle
  routines call the queue's release routine); a parent that fails for good
  cancels it, or releases it with ``on_parent_failure="run"``.
- ``waiting``: ``QueueClient.wait_for_task`` (pushed on PostgreSQL by
  ``db/postgres/task_end.py``, polling elsewhere).
- ``builder``: ``Workflow(name)``, its tasks and their dependencies, enqueued together.
- ``view``: ``QueueClient.get_workflow`` (a status derived from the tasks) and
  ``cancel_workflow``.
"""
