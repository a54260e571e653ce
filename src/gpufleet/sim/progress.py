"""The simulator's promise to finish: a run that stops making progress stops with a report.

Simulated time advances only when the work at the current instant runs out. A rule that keeps
undoing its own decision — two teams handing the same GPU back and forth, a pass that schedules
itself again — would hold the clock still and spin for ever. Two bounds that no healthy run
reaches turn that into a :class:`~gpufleet.errors.NoProgress` error naming the event kind, the
time and the jobs involved:

* **per job**: a job started more than :data:`STARTS_PER_INSTANT` times at one instant (each
  start after the first means it was stopped again at that instant: it made no progress);
* **per instant**: more than :func:`events_bound` events at one instant. Each job arrives,
  finishes, writes a checkpoint and is checked against its deadline at most a few times at one
  instant, each node becomes ready, gets a notice and goes at most once, and a scheduling pass
  or a scan follows a change; the bound allows :data:`EVENTS_PER_JOB` events per job and per
  node launched, plus :data:`EVENTS_BASE`.

A third rule keeps a run from going on for ever in simulated time: a job that its team's budget
drained (``hold-and-drain``) :data:`FRUITLESS_STOPS` times in a row without it keeping any work
— a job without checkpoints that costs more than a period's budget, say — would be started and
drained again every period, for ever. The simulator gives up on it: it is not queued again, and
the summary lists it under ``given_up`` with the reason it was last stopped for. Other stops
are not counted: a job reclaimed or preempted again and again is waiting its turn (the work
that takes its room ends), and one stopped by the world (a spot reclaim, a failed node) may
finish on the world's next draw; nor is a drain at the instant the job started (the per-instant
bounds judge those).

The checks cost one comparison per event and one dictionary update per job start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.errors import NoProgress

STARTS_PER_INSTANT = 8
FRUITLESS_STOPS = 8
EVENTS_PER_JOB = 16
EVENTS_BASE = 10_000
SHOWN = 5  # jobs named in a report


def events_bound(jobs: int, nodes: int) -> int:
    """Events allowed at one simulated instant for a run of ``jobs`` with ``nodes`` launched."""
    return EVENTS_BASE + EVENTS_PER_JOB * (jobs + nodes)


class ProgressGuard:
    """Counts each job's starts at the current instant; :meth:`started` raises once a job
    exceeds :data:`STARTS_PER_INSTANT`, :meth:`stalled` writes the per-instant report.
    ``describe(idx)`` names a job for a report ("syn-000042 (team vision)")."""

    __slots__ = ("_describe", "_fruitless", "_starts", "_t", "given_up")

    def __init__(self, describe: Callable[[int], str]) -> None:
        self._describe = describe
        self._t = -1.0
        self._starts: dict[int, int] = {}
        self._fruitless: dict[int, tuple[int, str]] = {}  # job → (drains in a row, last why)
        self.given_up: dict[str, str] = {}  # job id → why the simulator gave up on it

    def drained(self, idx: int, kept_work: bool, why: str) -> None:
        """Its team's budget drained job ``idx`` for ``why``; ``kept_work``: it keeps more work
        than it started this run with."""
        if kept_work:
            self._fruitless.pop(idx, None)
        else:
            self._fruitless[idx] = (self._fruitless.get(idx, (0, ""))[0] + 1, why)

    def give_up(self, idx: int, job_id: str) -> bool:
        """Whether to give up on job ``idx`` rather than queue it again (module docstring);
        True records why under ``job_id``."""
        n, why = self._fruitless.get(idx, (0, ""))
        if n < FRUITLESS_STOPS:
            return False
        self.given_up[job_id] = (f"drained {n} times in a row without keeping any work; "
                                 f"the last: {why}")
        return True

    def forget(self, idx: int) -> None:
        """Job ``idx`` has ended (a streamed run keeps nothing about it)."""
        self._fruitless.pop(idx, None)

    def started(self, idx: int, now: float) -> None:
        if now != self._t:
            self._t = now
            self._starts.clear()
        n = self._starts[idx] = self._starts.get(idx, 0) + 1
        if n > STARTS_PER_INSTANT:
            raise NoProgress(
                f"job {self._describe(idx)} started {n} times at t={now:,.2f} s (at most "
                f"{STARTS_PER_INSTANT} may start at one instant: each start after the first "
                f"means it was stopped again without running); {self._most(now)}")

    def stalled(self, now: float, events: int, bound: int, pending: Sequence[int]) -> NoProgress:
        """The per-instant bound's report: ``events`` at ``now`` past ``bound``; ``pending``:
        the jobs queued, named when none was started at this instant."""
        if self._t == now and self._starts:
            who = self._most(now)
        else:
            names = ", ".join(self._describe(i) for i in pending[:SHOWN])
            who = f"none started at this instant; {len(pending):,} pending" + (
                f", first {names}" if names else "")
        return NoProgress(f"{events:,} events at t={now:,.2f} s, past the bound of {bound:,} "
                          f"for one instant; {who}")

    def _most(self, now: float) -> str:
        top = sorted(self._starts.items(), key=lambda kv: (-kv[1], kv[0]))[:SHOWN]
        return "jobs started most at this instant: " + ", ".join(
            f"{self._describe(i)} ×{n}" for i, n in top)


def report(err: NoProgress, kind: str) -> NoProgress:
    """``err`` with the event being handled when it was raised, and what to do about it."""
    return NoProgress(f"the simulation stopped making progress while handling a {kind} event: "
                      f"{err}. This is a defect in gpufleet's rules, not in the input: please "
                      "report it with the scenario file and the workload.")
