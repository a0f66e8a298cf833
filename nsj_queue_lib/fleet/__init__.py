"""Fleet control (docs/fleet-control.md): what operators of a shared queue steer across
every worker of it: a task's own overrides at enqueue, pausing and resuming."""
