"""Parity: one workload planned through ``control.cycle`` by both drivers' translations.

The simulator side is the simulator itself: a ``ClusterSim`` whose nodes are launched and made
ready by its own node code, whose running jobs were placed by its own scheduling pass, and whose
pending jobs (one requeued after an interruption) are planned by ``JobLifecycle.plan_pass``. The
live side is what the Kubernetes driver would read for the same world: Node objects as the lab
creates them (``k8s.translate.node_objects``), the running jobs as bound pods carrying the GPU
assignment the simulator chose (gpufleet's binding annotations), the pending jobs as pods (a pod
group for the gang, KAI's ``gpu-fraction`` for the halves, a MIG resource, priorities, the
requeued job's replacement pod beside its evicted predecessor), planned by
``k8s.schedule.cycle.plan_cycle``. Both must bind the same pods to the same GPUs and evict the
same victim.

The workload (hand-checked outcome in ``EXPECTED``): nodes A (4 T4), B1–B3 (1 T4 each), C (4
V100), M (8 A100-40GB in MIG mode); running r1 (4 T4, on A) and r2 (2 V100, on C), priority 0.
Pending: ``hi`` (priority 10, 4 T4) fits nowhere → it evicts r1; the gang ``g`` (priority 5, 2 ×
1 T4) and the halves ``f1``/``f2`` (priority 3, T4) share B1–B3; ``m1`` takes a 1g.5gb slice;
``rq`` (requeued) and ``nw`` (new, older) both want C's last two V100s: ``rq`` goes first.
"""

from __future__ import annotations

import numpy as np

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.config import default_scenario
from gpufleet.control.policies import backfill_pass, placement_policy
from gpufleet.decisions import Bind
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.pods import assignment_annotations
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.provisioning import MIG_CONFIG
from gpufleet.sim.cluster import ClusterSim
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

CAT = default_instance_catalog()
SC = default_scenario().model_copy(update={"spot": False, "gpu_mtbf_hours": None})
ZONE = "us-east-1a"
T4 = frozenset({"T4"})
V100 = frozenset({"V100-16GB"})
NODES = [("g4dn.12xlarge", False), ("g4dn.xlarge", False), ("g4dn.xlarge", False),
         ("g4dn.xlarge", False), ("p3.8xlarge", False), ("p4d.24xlarge", True)]


def req(gpus: int = 1, models: frozenset[str] | None = None, milli: int = 1000,
        mig: str | None = None) -> ResourceRequest:
    return ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=gpus, gpu_milli=milli,
                           gpu_models=models, mig_profile=mig)


RUNNING = [JobSpec("r1", 0.0, 3600.0, req(4, T4)), JobSpec("r2", 1.0, 3600.0, req(2, V100))]
PENDING = [
    JobSpec("nw", 10.0, 600.0, req(2, V100)),
    JobSpec("m1", 11.0, 600.0, req(mig="1g.5gb")),
    JobSpec("g", 12.0, 600.0, req(1, T4), replicas=2, priority=5),
    JobSpec("f1", 13.0, 600.0, req(1, T4, 500), priority=3),
    JobSpec("f2", 14.0, 600.0, req(1, T4, 500), priority=3),
    JobSpec("hi", 15.0, 600.0, req(4, T4), priority=10),
    JobSpec("rq", 16.0, 600.0, req(2, V100)),  # requeued after an interruption
]
EXPECTED_BOUND = {"g#0", "g#1", "f1#0", "f2#0", "m1#0", "rq#0"}


def simulator() -> tuple[ClusterSim, list[Bind]]:
    """The simulator's world: nodes ready, r1/r2 placed by its pass, the rest pending."""
    cs = ClusterSim(SC, RUNNING + PENDING, list(CAT), None, seed=0)
    for it, mig in NODES:  # launched in name order, so both drivers number the rows alike
        node = cs._launch_one(CAT[it], ZONE, False, None, 0.0, mig)
        assert node is not None
        cs.nodes.ready(node.name, 0.0)
    life = cs.life
    for j in cs.jobs[:2]:
        life.enqueue(j)
    life.on_pass(None)
    running = [b for j in cs.jobs[:2] for b, _ in j.binds]
    assert len(running) == 2, "the simulator's pass placed both running jobs"
    for j in cs.jobs[2:]:
        cs.engine.now = j.spec.submit_s
        if j.spec.job_id == "rq":
            j.requeue(0.0, True, False, 0.0)  # what an interruption's Requeue leaves
        life.enqueue(j)
    return cs, running


def node_dicts(cs: ClusterSim) -> list[dict]:
    out = []
    for name in cs.state.index:
        n = cs.cloud.nodes[name]
        spec = spec_from_instance(n.itype, name, zone=ZONE,
                                  mig_config=MIG_CONFIG if n.mig else None)
        out.append(node_object(spec))
    return out


def pod(name: str, spec: JobSpec, t: int, *, node: str = "", ann: dict | None = None,
        labels: dict | None = None, owner: str = "", phase: str | None = None) -> dict:
    r = spec.request
    limits: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    annotations = dict(ann or {})
    if r.mig_profile:
        limits[f"nvidia.com/mig-{r.mig_profile}"] = "1"
    elif r.gpu_milli < 1000:
        annotations[names.GPU_FRACTION] = str(r.gpu_milli / 1000)
    else:
        limits["nvidia.com/gpu"] = str(r.num_gpu)
    selector = {}
    if r.gpu_models == T4:
        selector[names.GPU_PRODUCT] = "Tesla-T4"
    elif r.gpu_models == V100:
        selector[names.GPU_PRODUCT] = "Tesla-V100-SXM2-16GB"
    meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                  "resourceVersion": "1", "annotations": annotations, "labels": labels or {},
                  "creationTimestamp": f"2026-01-01T00:00:{t:02d}Z"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner,
                                    "uid": f"job-{owner}", "controller": True}]
    return {"metadata": meta,
            "spec": {"schedulerName": "gpufleet", "nodeName": node, "priority": spec.priority,
                     "nodeSelector": selector, "restartPolicy": "Never",
                     "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": phase or ("Running" if node else "Pending")}}


def live_pods(running: list[Bind]) -> list[dict]:
    specs = {s.job_id: s for s in RUNNING + PENDING}
    out = []
    for b in running:
        job = b.job_id.rpartition("#")[0]
        ann = {k: v for k, v in assignment_annotations(b).items() if v is not None}
        out.append(pod(job, specs[job], int(specs[job].submit_s), node=b.node, ann=ann))
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    for s in PENDING:
        t = int(s.submit_s)
        if s.replicas > 1:
            out += [pod(f"g-{r}", s, t, labels=group,
                        ann={"scheduling.x-k8s.io/min-available": "2"}) for r in range(2)]
            continue
        if s.job_id == "rq":  # the predecessor, evicted (DisruptionTarget), still listed
            old = pod("rq-old", s, 2, owner="rq", phase="Failed")
            old["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
            out += [old, pod("rq", s, t, owner="rq")]
            continue
        out.append(pod(s.job_id, s, t))
    return out


def live_id(sim_id: str) -> str:
    job, _, r = sim_id.rpartition("#")
    return f"ns/g-{r}" if job == "g" else f"ns/{job or sim_id}"


def test_both_drivers_plan_the_same_binds_and_evictions() -> None:
    cs, running = simulator()
    cs.life.rng = np.random.default_rng(7)
    sim_plan = cs.life.plan_pass()
    assert sim_plan is not None

    snap = build_snapshot(node_dicts(cs), live_pods(running))
    # the two translations of the fleet agree before anything is planned
    st, lt = cs.state, snap.state
    assert list(st.index) == list(lt.index)
    for col in ("free_milli", "cpu_free", "mem_free", "mig_used", "num_gpus"):
        assert np.array_equal(getattr(st, col)[: st.n], getattr(lt, col)[: lt.n]), col
    assert snap.requeued == frozenset({"ns/rq"})
    live_plan = plan_cycle(snap, placement_policy(SC, 0), np.random.default_rng(7),
                           backfill_pass(SC))

    sim_binds = {live_id(b.job_id): (b.node, b.gpus, b.milli_per_gpu, b.mig)
                 for b in sim_plan.binds}
    live_binds = {b.job_id: (b.node, b.gpus, b.milli_per_gpu, b.mig) for b in live_plan.binds}
    assert sim_binds == live_binds
    assert {live_id(b) for b in EXPECTED_BOUND} == set(live_binds)
    assert [live_id(e.job_id) for e in sim_plan.evictions] == \
        [e.job_id for e in live_plan.evictions] == ["ns/r1"]
    # the requeued job took C's last V100s ahead of the older new one
    r2_node = next(b.node for b in running if b.job_id == "r2#0")
    assert live_binds["ns/rq"][0] == r2_node and "ns/nw" not in live_binds
    assert {r.job_id for r in live_plan.refusals} == {"ns/nw", "ns/hi"}
