"""The simulator's FleetSnapshot: what an exporter would scrape from a real fleet right now.

GPU samples are modelled, not measured: a GPU's SM utilisation is the sum over the jobs on it of
the job's mean utilisation × its share of the GPU; memory used is the allocated share of the
frame buffer; temperature and power rise linearly with utilisation between idle and full-load
figures typical of a datacenter GPU (stated here, not taken from a datasheet per model).

A MIG-mode GPU is reported as NVML reports it: the physical GPU (utilisation over its compute
slices, frame buffer NaN as NVML gives for MIG parents) plus one sample per MIG instance, with
``mig_profile`` and ``mig_id`` (the instance's start slice, unique per GPU).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from gpufleet.metrics.snapshot import FleetSnapshot, GpuSample, NodeSample
from gpufleet.sim.cloud import MICRO
from gpufleet.sim.cluster import ClusterSim
from gpufleet.sim.jobrun import PENDING, RUNNING, JobRun
from gpufleet.state import GPU_MILLI

IDLE_TEMP_C, FULL_TEMP_C = 32.0, 78.0
IDLE_POWER_W, FULL_POWER_W = 45.0, 300.0
SM_CLOCK_MHZ = 1380.0


def gpu_shape(j: JobRun) -> str:
    """"1", "0.5", "8", or "mig-1g.5gb" — the shape label of the metrics contract."""
    r = j.req
    if r.mig_profile is not None:
        return f"mig-{r.mig_profile}"
    if r.is_shared:
        return f"{r.gpu_milli / GPU_MILLI:g}"
    return str(r.num_gpu * j.spec.replicas)


def fleet_snapshot(sim: ClusterSim) -> FleetSnapshot:
    util: dict[tuple[str, int], float] = {}
    share: dict[tuple[str, int], float] = {}
    instances: dict[tuple[str, int], list[tuple[str, int, float, float]]] = {}
    running: Counter[tuple[str, str]] = Counter()  # (tenant, GPU shape)
    pending: Counter[tuple[str, str]] = Counter()
    rate_by_tenant: defaultdict[str, float] = defaultdict(float)
    for _, idx in sim.pending:
        j = sim.jobs[idx]
        pending[(j.spec.tenant, gpu_shape(j))] += 1
    for j in sim.jobs:
        if j.state != RUNNING:
            continue
        running[(j.spec.tenant, gpu_shape(j))] += 1
        for bind, _ in j.binds:
            node = sim.cloud.nodes[bind.node]
            if node.gpus:
                rate_by_tenant[j.spec.tenant] += (
                    node.usd_per_hour * j.replica_milli / (GPU_MILLI * node.gpus)
                )
            for slot in bind.mig:
                frac = j.replica_milli / GPU_MILLI
                instances.setdefault((bind.node, slot.gpu), []).append(
                    (slot.profile, slot.start, frac, j.spec.utilization))
            for g in bind.gpus:
                frac = (j.replica_milli if bind.mig else bind.milli_per_gpu) / GPU_MILLI
                util[(bind.node, g)] = util.get((bind.node, g), 0.0) + frac * j.spec.utilization
                share[(bind.node, g)] = share.get((bind.node, g), 0.0) + frac
    gpus: list[GpuSample] = []
    nodes: list[NodeSample] = []
    free_partial = free_total = 0
    for node in sim.cloud.live.values():
        it = node.itype
        nodes.append(
            NodeSample(
                name=node.name, instance_type=it.name, zone=node.zone,
                capacity_type="spot" if node.spot else "on-demand",
                state=node.state, gpu_model=it.gpu_model, gpus=it.gpus,
                allocated_milli=node.alloc_milli,
            )
        )
        if node.state != "ready":
            continue
        mem = sim.gpu_catalog[it.gpu_model].memory_mib
        for g in range(it.gpus):
            u = min(1.0, util.get((node.name, g), 0.0))
            sh = min(1.0, share.get((node.name, g), 0.0))
            free = round((1.0 - sh) * GPU_MILLI)
            free_total += free
            if 0 < free < GPU_MILLI:
                free_partial += free
            gpus.append(
                GpuSample(
                    hostname=node.name, gpu=g, uuid=f"GPU-{node.name}-{g}",
                    model_name=it.gpu_model, util_pct=100.0 * u,
                    mem_copy_util_pct=40.0 * u,
                    fb_used_mib=math.nan if node.mig else sh * mem,
                    fb_free_mib=math.nan if node.mig else (1.0 - sh) * mem,
                    temp_c=IDLE_TEMP_C + (FULL_TEMP_C - IDLE_TEMP_C) * u,
                    power_w=IDLE_POWER_W + (FULL_POWER_W - IDLE_POWER_W) * u,
                    sm_clock_mhz=SM_CLOCK_MHZ, xid_errors=0,
                )
            )
            for profile, start, frac, job_util in instances.get((node.name, g), ()):
                slice_mem = mem * _slices(sim, it.gpu_model, profile)
                gpus.append(
                    GpuSample(
                        hostname=node.name, gpu=g, uuid=f"MIG-{node.name}-{g}-{start}",
                        model_name=it.gpu_model, util_pct=100.0 * job_util,
                        mem_copy_util_pct=40.0 * job_util, fb_used_mib=slice_mem,
                        fb_free_mib=0.0,
                        temp_c=IDLE_TEMP_C + (FULL_TEMP_C - IDLE_TEMP_C) * u,
                        power_w=(FULL_POWER_W - IDLE_POWER_W) * job_util * frac,
                        sm_clock_mhz=SM_CLOCK_MHZ, xid_errors=0,
                        mig_profile=profile, mig_id=start,
                    )
                )
    cost_total = {t: v / MICRO for t, v in sim.tally.cost_by_tenant_micro.items()}
    for j in sim.jobs:  # cost run up by running jobs in their current segment
        if j.state == RUNNING:
            for bind, _ in j.binds:
                node = sim.cloud.nodes[bind.node]
                if node.gpus:
                    frac = j.replica_milli / (GPU_MILLI * node.gpus)
                    cost_total[j.spec.tenant] = cost_total.get(j.spec.tenant, 0.0) + (
                        node.usd_per_hour * frac * (sim.now - j.seg_start) / 3600.0
                    )
    for t in {j.spec.tenant for j in sim.jobs if j.state in (PENDING, RUNNING)}:
        cost_total.setdefault(t, 0.0)
    return FleetSnapshot(
        time_s=sim.now,
        gpus=tuple(gpus),
        nodes=tuple(nodes),
        jobs_pending=dict(pending),
        jobs_running=dict(running),
        spot_interruptions_total=sim.tally.interruptions - sim.tally.failure_interruptions,
        recovery_seconds=sim.life.take_recoveries(),
        cost_usd_total_by_tenant=cost_total,
        cost_usd_per_hour_by_tenant=dict(rate_by_tenant),
        fragmentation_ratio=free_partial / free_total if free_total else 0.0,
    )


def _slices(sim: ClusterSim, model: str, profile: str) -> float:
    """Share of the GPU's frame buffer a MIG instance owns (its memory slices)."""
    spec = sim.gpu_catalog[model].mig
    if spec is None or profile not in spec.profiles:
        return 0.0
    return spec.profiles[profile].memory_slices / spec.memory_slices
