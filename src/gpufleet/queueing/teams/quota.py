"""Team quotas with cohort borrowing: who may start now, and whose borrowed work gives way.

The model is Kueue's ClusterQueue/Cohort, in GPU-equivalents (:mod:`.shares`):

* a team has a **nominal** quota; work that keeps the team's usage within it is *within quota*;
* teams in the same **cohort** lend each other what they do not use: a team may go above its
  nominal quota by at most its **borrowing limit** (None: no limit), and only while the cohort's
  total usage stays within the cohort's total nominal quota — borrowing never creates capacity,
  it only hands idle entitlement to whoever has work;
* a team without a cohort cannot borrow; a team that has no queue at all is not managed by quotas
  (its work is admitted as before), so adding quotas for some teams never blocks the others.

Reclaim (Kueue's ``reclaimWithinCohort: Any``, KAI's reclaim): when a team has work that would fit
within its nominal quota but the cohort's room is held by other teams' borrowed work, those
borrowing teams give back, newest-started workload first, only from teams still above their own
nominal — **work within quota is never evicted by another team**. A unit that *straddles* its
team's quota (the team is below its nominal, the unit takes it above) may reclaim too, but only
from teams whose use stays, as a share of their own nominal, above the claimant's before the
unit (:meth:`QuotaBook.gives_back`): without it, a team whose jobs are larger than what is left
of its quota could wait forever for an entitlement it never gets.
Where we differ from Kueue: no per-flavor quotas beyond an optional per-GPU-model nominal, and no
lending limit (everything unused is lendable), which is what a renting team wants from capacity
it pays for only when used.

**Per GPU model** (Kueue's per-flavor nominal quota, on the GPU model): a team may also have a
nominal per model (``TeamQuota.models``). Its use of a listed model then stays within that
model's nominal, or borrows that model's idle quota in the cohort (the cohort's nominal of the
model minus its members' use of it, within the team's borrowing limit) — on top of the total
quota, which still applies. A model the team does not list is governed by the total alone
(Kueue instead forbids unlisted flavors; gpufleet's teams mostly ask "at most 8 of our GPUs may
be H100s", not "only these models"). The model is known only once a node is chosen, so the
cycle asks :meth:`QuotaBook.model_verdict` per model and hides the rows of the models refused.
Reclaim counts the total quota only.

Pure: usage comes from the caller's snapshot; decisions are returned as data.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """One team's queue. Amounts in milli-GPU-equivalents (1000 = one whole GPU)."""

    name: str
    nominal_milli: int
    cohort: str | None = None
    borrowing_limit_milli: int | None = None
    weight: float = 1.0
    models: tuple[tuple[str, int], ...] = ()  # per-GPU-model nominal, milli (module docstring)

    def model_nominal(self, model: str) -> int | None:
        """The team's nominal for ``model``; None when it lists none for it."""
        for m, milli in self.models:
            if m == model:
                return milli
        return None

    def __post_init__(self) -> None:
        if self.nominal_milli < 0:
            raise ValueError(f"team {self.name}: nominal quota must be ≥ 0")
        if self.borrowing_limit_milli is not None and self.borrowing_limit_milli < 0:
            raise ValueError(f"team {self.name}: borrowing limit must be ≥ 0")
        if not self.weight > 0:
            raise ValueError(f"team {self.name}: fair-share weight must be > 0")
        if any(milli < 0 for _, milli in self.models):
            raise ValueError(f"team {self.name}: a per-model quota must be ≥ 0")


class Admission(enum.Enum):
    UNMANAGED = "unmanaged"  # the team has no queue: quotas do not apply
    WITHIN = "within-quota"
    BORROWING = "borrowing"
    BLOCKED = "over-quota"


@dataclass(frozen=True, slots=True)
class Verdict:
    admission: Admission
    borrowed_milli: int = 0  # how much of the team's usage would be borrowed after admitting
    reason: str = ""

    @property
    def admitted(self) -> bool:
        return self.admission is not Admission.BLOCKED


@dataclass(frozen=True, slots=True)
class Running:
    """A running workload as quota sees it (a whole gang is one workload)."""

    key: str
    team: str
    milli: int
    started_s: float


class QuotaBook:
    """Nominal quotas and current usage per team; ``verdict`` answers "may this start now"."""

    def __init__(self, teams: Iterable[TeamQuota], usage: Mapping[str, int] | None = None,
                 model_usage: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.teams = {t.name: t for t in teams}
        self.usage: dict[str, int] = {n: 0 for n in self.teams}
        for team, milli in (usage or {}).items():
            if team in self.teams:
                self.usage[team] = milli
        # team → GPU model → milli in use, for the teams with per-model quotas
        self.model_usage: dict[str, dict[str, int]] = {
            n: dict((model_usage or {}).get(n, {})) for n, t in self.teams.items() if t.models}
        # per cohort: its members and its nominal total minus its usage, kept up to date by
        # admit / release (a pass asks the room once per pending unit: it must be O(1))
        self._members: dict[str, list[TeamQuota]] = {}
        for t in self.teams.values():
            if t.cohort is not None:
                self._members.setdefault(t.cohort, []).append(t)
        self._room = {c: sum(m.nominal_milli - self.usage[m.name] for m in ms)
                      for c, ms in self._members.items()}

    def members(self, cohort: str) -> list[TeamQuota]:
        return list(self._members.get(cohort, ()))

    def borrowed(self, team: str) -> int:
        t = self.teams.get(team)
        return 0 if t is None else max(0, self.usage[team] - t.nominal_milli)

    def cohort_room(self, cohort: str) -> int:
        """Cohort nominal total minus cohort usage (what is still unused, by anyone)."""
        return self._room.get(cohort, 0)

    def reclaim_over(self, team: str, milli: int) -> int | None:
        """What ``team``'s ``milli`` would borrow if reclaim made room for it: 0 when it fits
        within the team's nominal quota, > 0 when it *straddles* it (the team is below its
        nominal now, above it after). None when reclaim may not make room for it: the team is
        unmanaged or has no cohort, is at or above its nominal already, or would pass its
        borrowing limit."""
        t = self.teams.get(team)
        if t is None or t.cohort is None:
            return None
        used = self.usage[team]
        over = used + milli - t.nominal_milli
        if over <= 0:
            return 0
        if used >= t.nominal_milli or (t.borrowing_limit_milli is not None
                                       and over > t.borrowing_limit_milli):
            return None
        return over

    def gives_back(self, team: str, left: int, milli: int, claimant: str, over: int) -> bool:
        """May ``team``, still borrowing ``left``, give a workload of ``milli`` back to
        ``claimant``'s unit, which would borrow ``over`` (:meth:`reclaim_over`)? For work within
        quota (``over`` 0): while the team borrows at all. For a straddling unit: only if the
        team's use, as a share of its nominal quota, stays above the claimant's before the
        unit ((nominal + left − milli) / nominal > claimant's usage / its nominal; a team with
        no nominal always may). A borrowing team's demand exceeds its nominal, so these shares
        are the two teams' entitled shares delivered: a reclaim leaves the lender better off
        than the claimant was, the lower of the two shares strictly rises, and two teams cannot
        take turns evicting each other. A tie does not give: two teams at the same share would
        hand the same room back and forth at one instant for ever. It is stricter than never
        taking a lender below its nominal when the claimant has most of its quota, and looser
        when it has little (Kueue's
        ``LessThanOrEqualToFinalShare`` compares borrowing instead, and a team with jobs much
        larger than what is left of its quota then seldom qualifies)."""
        if left <= 0 or team not in self.teams:
            return False
        if over <= 0:
            return True
        t, c = self.teams[team], self.teams[claimant]
        return (t.nominal_milli + left - milli) * c.nominal_milli > (
            self.usage[claimant] * t.nominal_milli)

    def verdict(self, team: str, milli: int) -> Verdict:
        t = self.teams.get(team)
        if t is None:
            return Verdict(Admission.UNMANAGED)
        after = self.usage[team] + milli
        if after <= t.nominal_milli:
            return Verdict(Admission.WITHIN)
        over = after - t.nominal_milli
        if t.cohort is None:
            return Verdict(Admission.BLOCKED, over,
                           f"team {team}: {fmt(after)} GPU would exceed its quota of "
                           f"{fmt(t.nominal_milli)} and it has no cohort to borrow from")
        if t.borrowing_limit_milli is not None and over > t.borrowing_limit_milli:
            return Verdict(Admission.BLOCKED, over,
                           f"team {team}: would borrow {fmt(over)} GPU, over its borrowing limit "
                           f"of {fmt(t.borrowing_limit_milli)}")
        room = self.cohort_room(t.cohort)
        if milli > room:
            return Verdict(Admission.BLOCKED, over,
                           f"team {team}: cohort {t.cohort} has {fmt(max(room, 0))} GPU of idle "
                           f"quota, {fmt(milli)} needed")
        return Verdict(Admission.BORROWING, over)

    def model_verdict(self, team: str, model: str, milli: int) -> Verdict:
        """May ``team`` put ``milli`` more on GPU model ``model`` (module docstring, per GPU
        model)? WITHIN also for a model the team does not list; the total quota is
        :meth:`verdict`'s."""
        t = self.teams.get(team)
        nominal = None if t is None else t.model_nominal(model)
        if t is None or nominal is None:
            return Verdict(Admission.WITHIN if t is not None else Admission.UNMANAGED)
        after = self.model_usage[team].get(model, 0) + milli
        if after <= nominal:
            return Verdict(Admission.WITHIN)
        over = after - nominal
        what = f"team {team}: {fmt(after)} {model} GPU would exceed its {model} quota of " \
            f"{fmt(nominal)}"
        if t.cohort is None:
            return Verdict(Admission.BLOCKED, over, f"{what} and it has no cohort")
        if t.borrowing_limit_milli is not None and over > t.borrowing_limit_milli:
            return Verdict(Admission.BLOCKED, over,
                           f"{what}, over its borrowing limit of {fmt(t.borrowing_limit_milli)}")
        room = 0
        for m in self.members(t.cohort):
            mn = m.model_nominal(model)
            if mn is not None:
                room += mn - self.model_usage[m.name].get(model, 0)
        if milli > room:
            return Verdict(Admission.BLOCKED, over,
                           f"{what} and cohort {t.cohort} has {fmt(max(room, 0))} {model} GPU "
                           "of idle quota")
        return Verdict(Admission.BORROWING, over)

    def admit(self, team: str, milli: int, model: str | None = None) -> None:
        """``team`` starts ``milli`` more (on GPU ``model`` when known: per-model use)."""
        if team in self.teams:
            self._use(team, milli)
            if model is not None and team in self.model_usage:
                mu = self.model_usage[team]
                mu[model] = mu.get(model, 0) + milli

    def release(self, team: str, milli: int) -> None:
        if team in self.teams:
            self._use(team, -min(milli, self.usage[team]))

    def _use(self, team: str, delta: int) -> None:
        self.usage[team] += delta
        cohort = self.teams[team].cohort
        if cohort is not None:
            self._room[cohort] -= delta


def reclaim_victims(book: QuotaBook, team: str, milli: int,
                    running: Sequence[Running]) -> list[Running] | None:
    """Borrowed workloads of other teams to evict so that ``team``'s ``milli`` fits in the
    cohort's quota; ``[]`` when it fits already, ``None`` when reclaim cannot make room (the
    team may not reclaim for it — :meth:`QuotaBook.reclaim_over` — or the borrowers' excess is
    too small).

    Newest-started first; a team stops giving back once it is no longer above its nominal quota,
    so what it keeps is within quota, and for a straddling unit sooner
    (:meth:`QuotaBook.gives_back`). ``book`` is not changed.
    """
    over = book.reclaim_over(team, milli)
    if over is None:
        return None
    cohort = book.teams[team].cohort
    assert cohort is not None  # reclaim_over: a team without a cohort may not reclaim
    short = milli - book.cohort_room(cohort)
    if short <= 0:
        return []
    excess = {m.name: book.borrowed(m.name) for m in book.members(cohort) if m.name != team}
    victims: list[Running] = []
    for r in sorted(running, key=lambda r: (-r.started_s, r.key)):
        if short <= 0:
            break
        if not book.gives_back(r.team, excess.get(r.team, 0), r.milli, team, over):
            continue
        victims.append(r)
        excess[r.team] -= r.milli
        short -= r.milli
    return victims if short <= 0 else None


def fmt(milli: int) -> str:
    """Milli-GPU as GPUs for messages: 2500 → '2.5'."""
    return f"{milli / 1000:g}"
