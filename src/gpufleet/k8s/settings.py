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
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from gpufleet.config import Scenario, default_scenario, load_scenarios
from gpufleet.control.admission import round_up_unshared
from gpufleet.control.deadline import GuardConfig
from gpufleet.control.policies import deadline_guards_on, guard_config
from gpufleet.errors import InputError
from gpufleet.k8s.translate.deadlines import pinned_on_demand
from gpufleet.k8s.translate.pods import spot_ok
from gpufleet.k8s.translate.snapshot import Snapshot


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


def apply_levers(snap: Snapshot, sc: Scenario, now: float | None = None) -> None:
    """The control layer's admission rules on the pending pods, as the simulator applies them
    to its jobs: without sharing a fractional pod is given a whole GPU
    (``control.admission.round_up_unshared``); a pod the deadline guard pins to on-demand
    (``k8s.translate.deadlines``) stops tolerating spot (``PodInfo.on_demand_only``, which
    ``pods.tolerated_now`` reads: ``control.admission.request_now``'s rule), so placement keeps
    it off spot nodes."""
    cfg = live_guards(sc)
    t = time.time() if now is None else now
    for i, p in enumerate(snap.pending):
        if p.request is None:
            continue
        req = round_up_unshared(p.request, sc.sharing)
        pin = cfg is not None and pinned_on_demand(p, spot_ok(p), cfg, t)
        if req is not p.request or pin:
            snap.pending[i] = replace(p, request=req, on_demand_only=pin)
