"""Admission: turn a submitted job's request into the request the scheduler places.

Three rules, the same for every driver:

* a MIG request is narrowed to the GPU models that offer its profile (with GPU sharing off, the
  exclusive baseline, it becomes one whole GPU of such a model);
* with sharing off a fractional request is rounded up to a whole GPU;
* an interruptible job that can checkpoint, on a fleet that uses spot and lets jobs checkpoint,
  tolerates the spot taint, so it may land on spot nodes; a job later pinned to on-demand
  (deadline guards, recovery) drops that toleration for as long as the pin holds
  (``request_now``). A job that cannot checkpoint never does: a reclaim would cost it all its
  work, more than any spot discount saves (``market.spot_cost``), and without the toleration it
  does not even fill a spot node launched for others. Nor does a latency-sensitive job
  without a value of time (``control.value_of_time.spot_eligible``): its delay is not free.

Example: ``1g.10gb`` on a sharing fleet → ``num_gpu=1, gpu_models={A100-80GB, H100-80GB}``;
the same job on the exclusive baseline → one whole A100-80GB or H100-80GB GPU.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.control.value_of_time import latency_sensitive, spot_eligible, value_of_time
from gpufleet.errors import InputError
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec

# The spot taint, Karpenter's: every spot node carries it, so only pods that tolerate it land
# there. One spelling for both drivers: the simulator's nodes and jobs carry the string, the
# live driver's node translation writes Kubernetes taints as the same ``key=value:Effect``
# string, and the kwok cloud puts the taint object (``spot_taint_object``) on its spot Nodes.
SPOT_TAINT_KEY = "karpenter.sh/capacity-type"
SPOT_TAINT_VALUE = "spot"
SPOT_TAINT_EFFECT = "NoSchedule"
SPOT_TAINT = f"{SPOT_TAINT_KEY}={SPOT_TAINT_VALUE}:{SPOT_TAINT_EFFECT}"


def spot_taint_object() -> dict[str, str]:
    """The spot taint as a Node's ``spec.taints`` entry (a fresh dict: callers may keep it)."""
    return {"key": SPOT_TAINT_KEY, "value": SPOT_TAINT_VALUE, "effect": SPOT_TAINT_EFFECT}


def mig_models(req: ResourceRequest) -> frozenset[str]:
    """GPU models (of the request's constraint, if any) that offer its MIG profile."""
    cat = default_gpu_catalog()
    names = req.gpu_models or frozenset(cat.models)
    return frozenset(m for m in names if m in cat and cat.mig_profile(m, req.mig_profile or ""))


def effective_request(
    spec: JobSpec, sharing: bool, spot: bool, checkpointing: bool = True
) -> ResourceRequest:
    """The request the scheduler places for ``spec`` on a fleet with (or without) GPU sharing,
    spot capacity and checkpointing. An unknown MIG profile is bad input (exit 2), not a bug.

    A trace repeats a few request shapes over tens of thousands of jobs, so the rules run once
    per (request, spot-tolerant, sharing) — ``_effective`` — and a request they leave as it
    is comes back as the very object given, as before."""
    r = spec.request
    if r.mig_profile is not None and not mig_models(r):
        raise InputError(
            f"job {spec.job_id}: no catalogued GPU offers MIG profile {r.mig_profile!r}",
            field="mig_profile",
        )
    tolerate = (spot and spec.interruptible and spec.checkpointable and checkpointing
                and spot_eligible(latency_sensitive(spec), value_of_time(spec)))
    out = _effective(r, tolerate, sharing)
    return r if out is None else out


@lru_cache(maxsize=4096)
def _effective(r: ResourceRequest, tolerate_spot: bool, sharing: bool
               ) -> ResourceRequest | None:
    """``effective_request``'s rules on a request whose MIG profile (if any) some catalogued
    model offers; None: the request is unchanged."""
    given = r
    if r.mig_profile is not None:
        models = mig_models(r)
        if sharing:
            r = replace(r, num_gpu=1, gpu_models=models)
        else:  # the exclusive baseline: one whole GPU of a model that offers the profile
            r = replace(r, mig_profile=None, num_gpu=1, gpu_milli=GPU_MILLI, gpu_models=models)
    r = round_up_unshared(r, sharing)
    if tolerate_spot:
        r = replace(r, tolerations=r.tolerations | {SPOT_TAINT})
    return None if r is given else r


def round_up_unshared(req: ResourceRequest, sharing: bool) -> ResourceRequest:
    """With GPU sharing off (the exclusive baseline) a fractional request takes a whole GPU. The
    Kubernetes driver applies this rule to pods too (``k8s.settings.apply_levers``)."""
    if not sharing and req.gpu_milli < GPU_MILLI:
        return replace(req, gpu_milli=GPU_MILLI)
    return req


def tolerates_spot(req: ResourceRequest) -> bool:
    """Whether ``req`` may land on a spot node (it tolerates the spot taint)."""
    return SPOT_TAINT in req.tolerations


def request_on_spot(req: ResourceRequest) -> ResourceRequest:
    """What a job of a team whose budget says ``spot-only`` asks for: it tolerates spot (the
    cycle's eligibility mask then keeps it to spot nodes, scale-up launches spot for it)."""
    if SPOT_TAINT in req.tolerations:
        return req
    return replace(req, tolerations=req.tolerations | {SPOT_TAINT})


def spot_ok_now(req: ResourceRequest, on_demand_only: bool) -> bool:
    """``tolerates_spot(request_now(req, on_demand_only))`` without building the pinned
    request: a job pinned to on-demand never tolerates spot, any other as its request says."""
    return not on_demand_only and tolerates_spot(req)


def request_now(req: ResourceRequest, on_demand_only: bool) -> ResourceRequest:
    """What the job asks for now: pinned to on-demand, it no longer tolerates spot."""
    if on_demand_only and SPOT_TAINT in req.tolerations:
        return replace(req, tolerations=req.tolerations - {SPOT_TAINT})
    return req
