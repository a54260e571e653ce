"""How much of a GPU a request is, for quotas and chargeback: GPU-equivalents in milli.

Teams compare their use in one unit whatever shape their work takes, so the unit has to be fair
across shapes (the complaints this answers: opencost #3828 bills a fractional GPU as a whole one,
KAI counts a 7g MIG device as 7 units):

* a whole GPU is 1000 milli, ``num_gpu`` of them ``num_gpu × 1000``;
* a fraction (``gpu_milli < 1000`` on one GPU) is its milli share, as placement already counts it;
* a MIG instance is its **compute** share of the parent GPU — ``compute / compute_slices`` of the
  model's MIG spec (A100/H100: 7 compute slices, so 3g.20gb = 3/7 = 429 milli; A30: 4, so
  2g.12gb = 500). Compute, not memory, because that is what the instance takes from other
  tenants: a 1g.10gb has twice the memory of a 1g.5gb but the same single compute slice.

Before a MIG request is placed its model is not known; every catalogued model offering the
profile is asked and the largest share wins, so a team is never admitted on a cheaper reading
than the one it may be billed at. Integers throughout (rounded half up), so sums are exact.
"""

from __future__ import annotations

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.state import GPU_MILLI, ResourceRequest


def mig_share_milli(catalog: GpuCatalog, profile: str, model: str | None = None) -> int:
    """Compute share of one ``profile`` instance in milli-GPU; on ``model`` when known, else the
    largest over the models offering it. ``ValueError`` when no model offers the profile."""
    models = [model] if model is not None else list(catalog.models)
    shares = []
    for name in models:
        spec = catalog[name].mig
        prof = None if spec is None else spec.profiles.get(profile)
        if spec is not None and prof is not None:
            shares.append((prof.compute * GPU_MILLI * 2 + spec.compute_slices)
                          // (2 * spec.compute_slices))
    if not shares:
        where = f"GPU model {model}" if model is not None else "no catalogued GPU model"
        raise ValueError(f"{where} offers MIG profile {profile!r}")
    return max(shares)


def gpu_equivalent_milli(req: ResourceRequest, catalog: GpuCatalog,
                         model: str | None = None) -> int:
    """The request's size in milli-GPU-equivalents (module docstring); 0 for CPU-only work."""
    if req.mig_profile is not None:
        return mig_share_milli(catalog, req.mig_profile, model)
    return req.total_gpu_milli
