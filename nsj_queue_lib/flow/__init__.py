"""Flow control: when a ready task may be enqueued or start (docs/flow-control.md)."""
