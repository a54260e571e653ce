"""MIG slice availability under NVIDIA's placement rules.

A profile fits a MIG-enabled GPU at ``start`` when its memory slices ``[start, start+size)`` are all
free *and* the GPU still has the compute slices it needs. Counting free slices is not enough: an
A100 whose only instance is a 1g.5gb at slice 0 has seven free memory slices, yet a 3g.20gb may
only start at 0 or 4, so it fits at 4 only; with a second 1g.5gb at slice 4 it fits nowhere.
Modelling the start offsets keeps the scheduler from promising layouts the driver refuses.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog, MigProfile, MigSpec
from gpufleet.decisions import Bind, MigSlot
from gpufleet.placement.view import PodView
from gpufleet.state import FleetState


def _profiles_by_model(view: PodView, profile: str) -> dict[int, MigProfile]:
    out: dict[int, MigProfile] = {}
    for mid, name in enumerate(view.state.model_names):
        if name not in view.catalog:
            continue
        spec = view.catalog[name].mig
        if spec is not None and profile in spec.profiles:
            out[mid] = spec.profiles[profile]
    return out


def mig_ok(view: PodView) -> np.ndarray:
    """(n, G): MIG GPUs where the requested profile has at least one legal free start."""
    profile = view.req.mig_profile
    s = view.state
    out: np.ndarray = np.zeros_like(view.mig_used, dtype=bool)
    if profile is None:
        return out
    model = s.model_id[: view.n]
    enabled = s.mig_enabled[: view.n]
    compute_total = s.mig_compute_total[: view.n].astype(np.int32)
    used_compute = view.mig_compute_used.astype(np.int32)
    for mid, prof in _profiles_by_model(view, profile).items():
        base = (model == mid)[:, None] & enabled & (used_compute + prof.compute <= compute_total)
        if not base.any():
            continue
        for start in prof.starts:
            out |= base & ((view.mig_used & prof.slice_mask(start)) == 0)
    return out


def legal_starts(prof: MigProfile, used: int) -> list[int]:
    """NVIDIA's rule: the profile's allowed start offsets whose slices are all free."""
    return [st for st in prof.starts if not used & prof.slice_mask(st)]


def best_mig_slot(
    spec: MigSpec, prof: MigProfile, gpus: Iterable[tuple[int, int, int]]
) -> tuple[int, int] | None:
    """(gpu, start) to pack ``prof`` into, among ``gpus`` = (index, used slice mask, used compute)
    that have compute room: the fullest GPU, then the start that keeps the most placements of
    any profile open. Shared by placement and the provisioning bin-packer so both agree."""
    best: tuple[int, int, int, int] | None = None  # (-used compute, -open after, gpu, start)
    for g, used, compute in gpus:
        for st in legal_starts(prof, used):
            after = used | prof.slice_mask(st)
            open_after = sum(len(legal_starts(p, after)) for p in spec.profiles.values())
            key = (-compute, -open_after, g, st)
            if best is None or key < best:
                best = key
    return None if best is None else (best[2], best[3])


def choose_mig(view: PodView, row: int) -> MigSlot | None:
    """Pack: the fullest GPU that fits, at the start that keeps the most future placements open."""
    profile = view.req.mig_profile
    if profile is None:
        return None
    s = view.state
    name = s.model_names[s.model_id[row]]
    spec = view.catalog[name].mig
    if spec is None or profile not in spec.profiles:
        return None
    prof = spec.profiles[profile]
    ok = mig_ok(view)[row]
    best = best_mig_slot(
        spec,
        prof,
        (
            (int(g), int(view.mig_used[row, g]), int(view.mig_compute_used[row, g]))
            for g in np.flatnonzero(ok)
        ),
    )
    if best is None:
        return None
    g, st = best
    return MigSlot(g, profile, st)


def bind_masks(
    state: FleetState, bind: Bind, catalog: GpuCatalog
) -> tuple[tuple[int, int, int], ...]:
    """(gpu, memory-slice mask, compute slices) per MIG slot of ``bind``: what the state books
    for it, derived from the ``Bind`` alone (its node's GPU model and the catalog's profile).
    A slot the node's model does not offer is a bug, not bad input."""
    if not bind.mig:
        return ()
    row = state.index[bind.node]
    spec = catalog[state.model_names[state.model_id[row]]].mig
    if spec is None:
        raise ValueError(f"{bind.node} has no MIG GPUs: {bind!r}")
    return tuple((slot.gpu, spec.profiles[slot.profile].slice_mask(slot.start),
                  spec.profiles[slot.profile].compute) for slot in bind.mig)
