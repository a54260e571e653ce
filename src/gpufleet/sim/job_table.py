"""The jobs of one simulation: the live ones as ``JobRun``s, and per job what the summary reads.

A workload given as a list is held whole, as it always was: every job is a ``JobRun`` from the
start and stays one after it ends (tests and reports read any job's record). A streamed workload
(``traces.synthetic.SyntheticStream``: any iterable of ``JobSpec`` in arrival order that knows
its length) is held in memory proportional to the jobs in flight: a job becomes a ``JobRun`` at
its arrival and is dropped when it finishes or is given up on. In both cases
:class:`JobRecords` keeps, per job index, the few numbers the summary needs (submit, run time,
deadline, team, first start and finish) in flat arrays — about 50 bytes a job against the
kilobyte or more a live job costs — so the summary is computed one way from one place.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import overload

import numpy as np

from gpufleet.sim.jobrun import JobRun

NAN = float("nan")


class JobRecords:
    """Per job index: its submit time, run time, deadline (NaN: none), team, and once it
    ends its first start and finish (NaN: not finished)."""

    def __init__(self) -> None:
        self.job_ids: list[str] = []
        self.submit_s = array("d")
        self.duration_s = array("d")
        self.deadline_s = array("d")
        self.team = array("H")  # index into ``teams``
        self.teams: list[str] = []
        self._team_code: dict[str, int] = {}
        self.first_start_s = array("d")
        self.finish_s = array("d")

    def add(self, j: JobRun) -> None:
        """Record ``j`` (jobs are added in index order)."""
        s = j.spec
        assert j.idx == len(self.job_ids), (j.idx, len(self.job_ids))
        self.job_ids.append(s.job_id)
        self.submit_s.append(s.submit_s)
        self.duration_s.append(s.duration_s)
        self.deadline_s.append(NAN if s.deadline_s is None else s.deadline_s)
        code = self._team_code.get(s.tenant)
        if code is None:
            code = self._team_code[s.tenant] = len(self.teams)
            self.teams.append(s.tenant)
        self.team.append(code)
        self.first_start_s.append(NAN)
        self.finish_s.append(NAN)

    def finished(self, j: JobRun) -> None:
        """``j`` finished (its ``finish_s`` and ``first_start_s`` are set)."""
        assert j.finish_s is not None and j.first_start_s is not None
        self.finish_s[j.idx] = j.finish_s
        self.first_start_s[j.idx] = j.first_start_s

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as NumPy arrays (views where the type allows)."""
        return {"submit_s": np.frombuffer(self.submit_s, dtype=np.float64),
                "duration_s": np.frombuffer(self.duration_s, dtype=np.float64),
                "deadline_s": np.frombuffer(self.deadline_s, dtype=np.float64),
                "team": np.frombuffer(self.team, dtype=np.uint16),
                "first_start_s": np.frombuffer(self.first_start_s, dtype=np.float64),
                "finish_s": np.frombuffer(self.finish_s, dtype=np.float64)}

    def finishes(self) -> dict[str, float | None]:
        """Finish time per job id (None: never finished)."""
        return {k: None if f != f else f
                for k, f in zip(self.job_ids, self.finish_s, strict=True)}


class JobTable:
    """The simulation's ``JobRun``s by index (module docstring). ``len`` is the workload's
    job count; iteration yields the jobs held (all of them for a list, the live ones for a
    stream), in index order."""

    def __init__(self, total: int, keep: bool) -> None:
        self.total = total
        self.keep = keep
        self._jobs: dict[int, JobRun] = {}
        self.records = JobRecords()
        self.peak_live = 0  # the most jobs held at once (streamed: the jobs in flight)

    def add(self, j: JobRun) -> None:
        self._jobs[j.idx] = j
        self.records.add(j)
        if len(self._jobs) > self.peak_live:
            self.peak_live = len(self._jobs)

    def ended(self, j: JobRun) -> None:
        """``j`` finished or was given up on: record it; a stream forgets it."""
        if j.finish_s is not None:
            self.records.finished(j)
        if not self.keep:
            del self._jobs[j.idx]

    @overload
    def __getitem__(self, idx: int) -> JobRun: ...

    @overload
    def __getitem__(self, idx: slice) -> list[JobRun]: ...

    def __getitem__(self, idx: int | slice) -> JobRun | list[JobRun]:
        """A held job by index (negative: from the end of the workload); a slice of the held
        jobs, as of a list."""
        if isinstance(idx, slice):
            return list(self._jobs.values())[idx]
        return self._jobs[idx + self.total if idx < 0 else idx]

    def get(self, idx: int) -> JobRun | None:
        return self._jobs.get(idx)

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self._jobs.values())

    @property
    def held(self) -> int:
        """How many ``JobRun``s are held now."""
        return len(self._jobs)
