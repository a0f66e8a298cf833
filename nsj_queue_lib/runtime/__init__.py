"""The worker process: one module per thread, supervised by ``WorkerRuntime``."""
