"""Reading environment variables by type, collecting every problem instead of stopping.

``EnvReader`` turns the text of one variable (or of its older alias) into a
string, a choice, a boolean, a number, ports or minutes of the hour; a value
it cannot read is recorded in ``problems`` under the name that was set, and
the default is used meanwhile. Which variable is which setting is
``settings_env``'s; what a value may be, ``settings_checks``'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nsj_queue_lib.exceptions import InvalidIdentifierError

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


class EnvReader:
    """Reads variables from a mapping, collecting every problem instead of stopping at the first."""

    def __init__(self, environ: Mapping[str, str]):
        self._environ = environ
        self.problems: dict[str, str] = {}
        self.used: dict[str, str] = {}  # variable -> the alias that was set instead

    def _raw(self, name: str, aliases: tuple[str, ...] = ()) -> tuple[str, str | None]:
        """(the variable that was set, its stripped value); empty values count as unset."""
        for candidate in (name, *aliases):
            value = self._environ.get(candidate)
            if value is not None and value.strip() != "":
                if candidate != name:
                    self.used[name] = candidate
                return candidate, value.strip()
        return name, None

    def _fail(self, name: str, why: str) -> None:
        self.problems.setdefault(name, why)

    def required(self, name: str, aliases: tuple[str, ...] = ()) -> str | None:
        used, value = self._raw(name, aliases)
        if value is None:
            also = f" (or {', '.join(aliases)})" if aliases else ""
            self._fail(name, f"is required{also}")
        return value

    def text(self, name: str, default: str | None, aliases: tuple[str, ...] = ()) -> str | None:
        _, value = self._raw(name, aliases)
        return default if value is None else value

    def checked(
        self, name: str, check: Callable[[str, str], str], required: bool = False
    ) -> str | None:
        _, value = self._raw(name)
        if value is None:
            if required:
                self._fail(name, "is required")
            return None
        try:
            return check(value, name)
        except InvalidIdentifierError as exc:
            self._fail(name, str(exc))
            return None

    def choice(
        self, name: str, options: tuple[str, ...], default: str, aliases: tuple[str, ...] = ()
    ) -> str | None:
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        if value.upper() not in options:
            self._fail(used, f"must be one of {', '.join(options)}, got {value!r}")
            return None
        return value.upper()

    def boolean(self, name: str, default: bool) -> bool:
        used, value = self._raw(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        self._fail(used, f"must be true or false, got {value!r}")
        return default

    def optional_boolean(self, name: str) -> bool | None:
        """None while unset (the caller decides), else as ``boolean``."""
        _, value = self._raw(name)
        return None if value is None else self.boolean(name, False)

    def integer(self, name: str, default: int, aliases: tuple[str, ...] = ()) -> int:
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            self._fail(used, f"must be an integer, got {value!r}")
            return default

    def optional_integer(self, name: str) -> int | None:
        _, value = self._raw(name)
        return None if value is None else self.integer(name, 0)

    def ports(
        self, name: str, default: int, aliases: tuple[str, ...] = ()
    ) -> int | tuple[int, ...]:
        """One port, or a comma-separated list of them (one per host)."""
        used, value = self._raw(name, aliases)
        if value is None:
            return default
        # An empty entry is the default port, as libpq reads "host=a,b port=,5433".
        parts = [part.strip() or str(default) for part in value.split(",")]
        if not all(part.isdigit() for part in parts):
            self._fail(used, f"must be a port or comma-separated ports, got {value!r}")
            return default
        return int(parts[0]) if len(parts) == 1 else tuple(int(part) for part in parts)

    def number(self, name: str, default: float | None) -> float | None:
        used, value = self._raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            self._fail(used, f"must be a number, got {value!r}")
            return default
        return number

    def minutes(self, name: str, default: tuple[int, ...]) -> tuple[int, ...]:
        used, value = self._raw(name)
        if value is None:
            return default
        minutes: set[int] = set()
        for part in value.split(","):
            part = part.strip()
            if not part.isdigit() or not 0 <= int(part) <= 59:
                self._fail(used, f"must be a comma-separated list of minutes 0-59, got {value!r}")
                return default
            minutes.add(int(part))
        return tuple(sorted(minutes))
