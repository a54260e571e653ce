"""Named choices selected from config: one registry type for every kind of policy.

Placement policies, recovery strategies, spot strategies and deadline policies are each chosen by
a name in a scenario file or on the command line. They share this one shape (SkyPilot's
decorator registry, kube-scheduler's name → factory map):

* an entry is registered once under a canonical name (a second registration of the name, or of
  an alias, is a bug and raises ``ValueError`` at import time, not at lookup);
* aliases point at canonical names (``ours`` → ``smdp``);
* a registry may have a default, returned for ``get(None)``;
* an unknown name is the user's mistake: an :class:`~gpufleet.errors.InputError` naming the kind,
  the name and every valid one, on the field the caller names (the CLI prints it as one line).

Example: ``POLICIES = Registry[Factory]("placement policy", field="policy",
default="fgd-strand")``; ``POLICIES.get("nope")`` raises
``field 'policy': unknown placement policy 'nope'; valid: random, dotprod, …``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from gpufleet.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one kind by name; ``sort`` lists names alphabetically, else as registered."""

    def __init__(
        self, kind: str, *, field: str, default: str | None = None, sort: bool = True
    ) -> None:
        self.kind = kind
        self.field = field
        self._default = default
        self._sort = sort
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    # -- filling (at import time) ---------------------------------------------------------------
    def add(self, name: str, entry: T, *, aliases: tuple[str, ...] = ()) -> T:
        """Register ``entry`` under ``name`` (and ``aliases``); returns it unchanged."""
        if name in self._entries or name in self._aliases:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = entry
        for alias in aliases:
            self.alias(alias, name)
        return entry

    def register(self, name: str, *, aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
        """Decorator form of :meth:`add`: the decorated object is the entry."""

        def deco(entry: T) -> T:
            return self.add(name, entry, aliases=aliases)

        return deco

    def alias(self, alias: str, target: str) -> None:
        if alias in self._entries or alias in self._aliases:
            raise ValueError(f"{self.kind} alias {alias!r} registered twice")
        if target not in self._entries:
            raise ValueError(f"{self.kind} alias {alias!r} points to unknown {target!r}")
        self._aliases[alias] = target

    # -- lookup ---------------------------------------------------------------------------------
    @property
    def default(self) -> str | None:
        return self._default

    def resolve(self, name: str | None = None) -> str:
        """The canonical name of ``name`` (None: the default); unknown → InputError."""
        if name is None:
            if self._default is None:
                raise InputError(f"no {self.kind} given; valid: {', '.join(self.valid())}",
                                 field=self.field)
            name = self._default
        key = self._aliases.get(name, name)
        if key not in self._entries:
            raise InputError(
                f"unknown {self.kind} {name!r}; valid: {', '.join(self.valid())}",
                field=self.field,
            )
        return key

    def get(self, name: str | None = None) -> T:
        return self._entries[self.resolve(name)]

    def names(self) -> list[str]:
        """Canonical names (no aliases)."""
        return sorted(self._entries) if self._sort else list(self._entries)

    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def valid(self) -> list[str]:
        """Every name ``get`` accepts: canonical names, then aliases."""
        extra = sorted(self._aliases) if self._sort else list(self._aliases)
        return [*self.names(), *extra]

    def items(self) -> Iterator[tuple[str, T]]:
        for name in self.names():
            yield name, self._entries[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._aliases)

    def __len__(self) -> int:
        return len(self._entries)
