"""Named locks owned by connections.

Try-lock semantics: taking a lock never waits. A lock belongs to the
connection that took it until that connection unlocks it or goes away
(``release_all``). Taking a lock one already holds succeeds and changes
nothing: locks are not counted, one ``unlock`` releases it.

Used from the server's event loop thread only, so there is no locking here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class LockTable:
    def __init__(self) -> None:
        self._owner: dict[str, Hashable] = {}
        self._by_owner: dict[Hashable, set[str]] = {}

    def try_lock(self, owner: Hashable, name: str) -> bool:
        current = self._owner.get(name)
        if current is not None:
            return current == owner
        self._owner[name] = owner
        self._by_owner.setdefault(owner, set()).add(name)
        return True

    def unlock(self, owner: Hashable, name: str) -> bool:
        """Release ``name`` if ``owner`` holds it; False when it did not."""
        if name not in self._owner or self._owner[name] != owner:
            return False
        del self._owner[name]
        names = self._by_owner.get(owner)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_owner[owner]
        return True

    def release_all(self, owner: Hashable) -> list[str]:
        """Release every lock of ``owner``; returns their names."""
        names = self._by_owner.pop(owner, set())
        for name in names:
            self._owner.pop(name, None)
        return sorted(names)

    def held(self, names: Iterable[str]) -> list[str]:
        """Which of ``names`` are held by anyone."""
        return sorted({name for name in names if name in self._owner})

    def owner_of(self, name: str) -> Hashable | None:
        return self._owner.get(name)

    def count(self, owner: Hashable) -> int:
        return len(self._by_owner.get(owner, ()))

    def __len__(self) -> int:
        return len(self._owner)
