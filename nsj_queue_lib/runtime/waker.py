"""A self-pipe: lets other threads interrupt a ``select`` in the dispatcher."""

from __future__ import annotations

import os


class Waker:
    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self) -> int:
        return self._read

    def wake(self) -> None:
        try:
            os.write(self._write, b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full or closed: the reader is awake anyway

    def drain(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
