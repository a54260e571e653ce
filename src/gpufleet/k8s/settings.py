"""The controller's ``--config``: a simulator scenario file, unchanged.

A configuration tuned in ``gpufleet simulate`` deploys as is: the file is validated by the same
pydantic model (:class:`gpufleet.config.Scenario`, unknown keys rejected with file, line
and field). Keys the scheduler acts on today: ``placement`` (policy name; default the packing
policy, or ``spread`` with ``packing: false``), ``sharing`` (false: fractional pods take whole
GPUs, the exclusive baseline) and ``starvation_s`` (backfill limit). The provisioning, spot and
recovery keys are validated and carried for the capacity controller; with a ``cloud:`` key
(or ``gpufleet controller --cloud``) the capacity loop runs (``k8s.capacity``, docs/cloud.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpufleet.config import Scenario, default_scenario, load_scenarios
from gpufleet.control.admission import round_up_unshared
from gpufleet.errors import InputError
from gpufleet.k8s.translate.snapshot import Snapshot


def load_config(path: Path | str | None) -> Scenario:
    if path is None:
        return default_scenario()
    found = load_scenarios(path)
    if len(found) != 1:
        raise InputError(f"expected one scenario, found {len(found)}", path=path,
                         field="scenarios")
    return found[0]


def apply_levers(snap: Snapshot, sc: Scenario) -> None:
    """Without sharing a fractional pod is given a whole GPU: the control layer's admission
    rule (``control.admission.round_up_unshared``), as in the simulator's baseline."""
    if sc.sharing:
        return
    for i, p in enumerate(snap.pending):
        if p.request is not None:
            snap.pending[i] = replace(p, request=round_up_unshared(p.request, sc.sharing))
