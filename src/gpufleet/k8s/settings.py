"""The controller's ``--config``: a simulator scenario file, unchanged.

A configuration tuned in ``gpufleet simulate`` deploys as is: the file is validated by the same
pydantic model (:class:`gpufleet.config.Scenario`, unknown keys rejected with file, line
and field). Keys the scheduler acts on today: ``placement`` (policy name; default the packing
policy, or ``spread`` with ``packing: false``), ``sharing`` (false: fractional pods take whole
GPUs, the exclusive baseline), ``starvation_s`` (backfill limit) and, on a spot fleet with a
``deadline_policy``, the deadline guard's ``autoscaling`` and ``provisioning_delay_s`` for pods
with a ``gpufleet.io/deadline``. The provisioning and spot keys are the capacity controller's;
with a ``cloud:`` key (or ``gpufleet controller --cloud``) the capacity loop runs
(``k8s.capacity``, docs/cloud.md). Every policy is built from the file by
``control.policies``, as the simulator builds its own. The ``recovery`` and ``checkpointing``
keys are validated only: the live driver evicts and the pod's controller recreates it.
``headroom: true`` keeps spare GPUs for arrivals (``control.headroom``) and ``spot_swap: true``
moves on-demand nodes' work to spot (``control.spot_swap``), both in the capacity loop.
``value_of_time_usd_per_gpu_hour`` and the queues' ``value_of_time_usd_per_gpu_hour`` /
``latency_sensitive`` price a pod's delay as in the simulator (``control.value_of_time``), below
its own ``gpufleet.io/value-of-time`` / ``gpufleet.io/latency-sensitive`` (:class:`LiveDelays`).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpufleet.config import Scenario, default_scenario, load_scenarios
from gpufleet.control.admission import round_up_unshared
from gpufleet.control.deadline import GuardConfig
from gpufleet.control.policies import deadline_guards_on, guard_config
from gpufleet.control.value_of_time import Delay, DelayDefaults, resolve
from gpufleet.errors import InputError
from gpufleet.k8s.translate.deadlines import pinned_on_demand
from gpufleet.k8s.translate.pods import PodInfo, spot_ok
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.queueing.teams.settings import QueueSettings


def load_config(path: Path | str | None) -> Scenario:
    if path is None:
        return default_scenario()
    found = load_scenarios(path)
    if len(found) != 1:
        raise InputError(f"expected one scenario, found {len(found)}", path=path,
                         field="scenarios")
    return found[0]


def live_guards(sc: Scenario) -> GuardConfig | None:
    """The deadline guards' settings where the scenario switches them on — a spot fleet with a
    ``deadline_policy``, as for the simulator — and a capacity loop runs (``cloud:``): without
    one nothing launches on-demand capacity for a pinned pod. None: off."""
    return guard_config(sc) if deadline_guards_on(sc) and sc.cloud is not None else None


@dataclass(slots=True)
class LiveDelays:
    """Each pod's price of delay (``control.value_of_time.resolve``): its annotations, else its
    namespace's queue's settings (a ``teams:`` queue of the config or a GpuQueue), else the
    scenario's default. One object shared by the scheduler and the capacity loop; the
    scheduler refreshes the queues each cycle (:meth:`observe`)."""

    defaults: DelayDefaults
    teams: Mapping[str, str] = field(default_factory=dict)  # namespace → queue

    @classmethod
    def of(cls, sc: Scenario) -> LiveDelays:
        return cls(DelayDefaults.of(sc))

    def observe(self, sc: Scenario, teams: Mapping[str, str],
                settings: Mapping[str, QueueSettings]) -> None:
        """The cycle's queues: namespace → queue and each queue's settings (the config's and
        the GpuQueue objects', as the queue tracker reads them)."""
        by_team = {n: (q.value_of_time_usd_per_gpu_hour, q.latency_sensitive)
                   for n, q in settings.items()
                   if q.value_of_time_usd_per_gpu_hour is not None
                   or q.latency_sensitive is not None}
        self.defaults = DelayDefaults(sc.value_of_time_usd_per_gpu_hour, by_team or None)
        self.teams = dict(teams)

    def of_pod(self, p: PodInfo) -> Delay:
        return resolve(p.value_of_time, p.latency_sensitive, self.teams.get(p.namespace),
                       self.defaults)

    def movable(self, keys: Collection[str], pods: Mapping[str, PodInfo]) -> set[str]:
        """``keys`` (pods consolidation may move) less the latency-sensitive ones
        (``control.value_of_time``: never moved for the fleet's sake); a key not in ``pods``
        stays as it is."""
        return {k for k in keys
                if k not in pods or not self.of_pod(pods[k]).latency_sensitive}


def apply_levers(snap: Snapshot, sc: Scenario, now: float | None = None,
                 delays: LiveDelays | None = None) -> None:
    """The control layer's admission rules on the pending pods, as the simulator applies them
    to its jobs: without sharing a fractional pod is given a whole GPU
    (``control.admission.round_up_unshared``); a pod the deadline guard pins to on-demand
    (``k8s.translate.deadlines``) stops tolerating spot (``PodInfo.on_demand_only``, which
    ``pods.tolerated_now`` reads: ``control.admission.request_now``'s rule), so placement keeps
    it off spot nodes. Each pod's price of delay (``delays``, :class:`LiveDelays`) is written
    into it resolved: a latency-sensitive pod the spot rule cannot weigh on spot
    (``control.value_of_time.spot_eligible``: no value of time, or no stated work) then
    tolerates spot no more (``pods.tolerated_now``) and scale-up launches no spot for it
    (``capacity.inputs.pending_pods``)."""
    cfg = live_guards(sc)
    t = time.time() if now is None else now
    for i, p in enumerate(snap.pending):
        if p.request is None:
            continue
        req = round_up_unshared(p.request, sc.sharing)
        pin = cfg is not None and pinned_on_demand(p, spot_ok(p), cfg, t)
        d = delays.of_pod(p) if delays is not None else None
        if d is not None and (d.usd_per_gpu_hour != (p.value_of_time or 0.0)
                              or d.latency_sensitive != bool(p.latency_sensitive)):
            p = replace(p, value_of_time=d.usd_per_gpu_hour, latency_sensitive=d.latency_sensitive)
            snap.pending[i] = p
        if req is not p.request or pin:
            snap.pending[i] = replace(p, request=req, on_demand_only=pin)
