"""Reclaim's claimants, nominated for the room their reclaim frees (kube-scheduler's nominated
pods, for quota reclaim).

A reclaim evicts borrowed work so that a unit within (or straddling) its team's quota can
start (``control.cycle`` step 5). The unit cannot start in that cycle: its victims still hold
the room until they leave. When they have left, the room must go to the unit it was freed for.
Without that, the victims come back to the queue (requeued work, ahead of new work), take the
room again, and the next cycle reclaims again for the same unit — for ever, and in the
simulator at one instant. So each such claimant is *nominated*: it goes first in the cycles
after, until it starts or :data:`NOMINATED_S` passes (then its claim is judged afresh).

Both drivers keep a :class:`Nominations` across cycles and pass :meth:`Nominations.current` to
``plan_cycle`` (``nominated``); the plan names the new claimants (``CyclePlan.nominated``).

Example: at 100 the cycle reclaims x3 for y1 (``nominated`` ["y1"]); at 100 again, once x3 has
left, y1 goes first and starts (``started`` ["y1"]) and is no longer nominated. Had it not
started by 400, it would queue as any other unit from then on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

NOMINATED_S = 300.0


@dataclass(slots=True)
class Nominations:
    """The nominated claimants and until when each stays so."""

    until: dict[str, float] = field(default_factory=dict)

    def current(self, now: float) -> list[str]:
        """The claimants nominated at ``now``, oldest nomination first (expired ones dropped)."""
        for unit in [u for u, t in self.until.items() if t <= now]:
            del self.until[unit]
        return list(self.until)

    def apply(self, started: Iterable[str], nominated: Iterable[str], now: float) -> None:
        """A cycle's outcome: the units that started are no longer nominated; the claimants
        it reclaimed for are, from ``now`` (a claimant nominated again keeps its first
        nomination's time)."""
        for unit in started:
            self.until.pop(unit, None)
        for unit in nominated:
            self.until.setdefault(unit, now + NOMINATED_S)
