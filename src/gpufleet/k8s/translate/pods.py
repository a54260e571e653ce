"""Pod objects → the request model placement consumes, and bound pods → their GPU assignment.

* Whole GPUs: ``nvidia.com/gpu: N`` (limits, as the device plugin requires; requests accepted).
* MIG: one ``nvidia.com/mig-<profile>: 1`` ("mixed" strategy); more than one instance per pod is
  refused with a reason (placement gives a pod one MIG instance).
* Fractional GPUs: KAI scheduler's annotation ``gpu-fraction: "0.25"`` (a share of one GPU, no
  ``nvidia.com/gpu`` request), optionally ``gpu-memory: "<MiB>"``.
* Every annotation and label read from a pod is a field of :mod:`.pod_fields`: a pending pod
  with a value that does not parse is refused with a reason naming the key, the value and what
  was expected, never read as if the key were absent.
* Node selection: ``nodeSelector`` and required node affinity (:mod:`.node_selector`); GFD's
  ``nvidia.com/gpu.product`` (``In``) and CUDA major (``In``/``Gt``) become the request's model
  and CUDA constraints, the rest a node mask the cycle applies.
* Gangs: the coscheduling label ``scheduling.x-k8s.io/pod-group`` (or the legacy
  ``pod-group.scheduling.sigs.k8s.io``) and a ``…/min-available`` annotation or label.
* Requeued work (:func:`requeued_keys`): the pod that replaces an interrupted pod of a
  checkpointing Job goes ahead of new work of its priority, as a requeued job does in the
  simulator. The Job controller names the replacement only through its controller owner (the
  Job's uid) and, for an Indexed Job, its completion index; the pod it replaces was interrupted
  when it was evicted or preempted (condition ``DisruptionTarget``) or exited 75
  (``checkpoint.protocol.EXIT_PREEMPTED``: checkpointed and asked to be rescheduled). Either the
  interrupted pod is still there (same owner and index, created earlier), or it is gone and the
  Job controller counted it on the replacement (``batch.kubernetes.io/job-index-ignored-failure-
  count``, written when the Job has ``backoffLimitPerIndex`` and its ``podFailurePolicy`` ignored
  the failure — the checkpointing Job's recipe in docs/kubernetes.md).

Tolerations are kept raw and matched against the fleet's taints once the fleet is known
(:func:`tolerated`), with Kubernetes' rules (``Exists``, ``Equal``, empty key, empty effect).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.checkpoint.protocol import EXIT_PREEMPTED
from gpufleet.control.admission import SPOT_TAINT
from gpufleet.control.value_of_time import spot_eligible
from gpufleet.decisions import Bind, MigSlot
from gpufleet.k8s.dra.claims import pod_claim_names
from gpufleet.k8s.dra.extended_claims import ExtendedRequest, extended_requests
from gpufleet.k8s.translate import names, pod_fields
from gpufleet.k8s.translate.node_selector import Selector, lift_gpu_constraints, selector_of
from gpufleet.k8s.translate.quantity import count, cpu_milli, memory_mib, quantity
from gpufleet.state import GPU_MILLI, ResourceRequest

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod as the controller needs it; ``request`` is None when ``refusal`` says why."""

    key: str  # "namespace/name": the job id decisions carry
    namespace: str
    name: str
    uid: str
    request: ResourceRequest | None
    refusal: str | None
    tolerations: tuple[Mapping[str, Any], ...]
    priority: int
    preempt_never: bool
    created_s: float
    node_name: str
    scheduler: str
    group: str | None
    min_available: int
    terminating: bool
    terminal: bool
    grace_s: int | None
    assignment: Bind | None  # from our annotations, when they name the bound node
    scheduled_condition: tuple[str, str] | None  # (reason, message) of PodScheduled=False
    selector: Selector = ()  # node requirements placement's filters do not cover (() = any)
    annotations: Mapping[str, str] = field(default_factory=dict)
    deadline_s: float | None = None  # gpufleet.io/deadline, epoch seconds (.deadlines)
    work_s: float | None = None  # gpufleet.io/duration
    started_s: float | None = None  # status.startTime (the kubelet took it), None: not yet
    on_demand_only: bool = False  # pinned off spot by the deadline guard (k8s.settings)
    # gpufleet.io/value-of-time and gpufleet.io/latency-sensitive (None: absent); a pending
    # pod's are its resolved ones once k8s.settings.apply_levers ran (control.value_of_time)
    value_of_time: float | None = None
    latency_sensitive: bool | None = None
    owner_uid: str = ""  # the controller ownerReference's uid (a Job's), "" when none
    completion_index: str | None = None  # an Indexed Job's completion index
    interrupted: bool = False  # evicted/preempted (DisruptionTarget) or exited 75
    ignored_failures: int = 0  # the Job controller's count of ignored failures of its index
    # DRA: the pod's ResourceClaims (names in its namespace); claims_wait says why they are not
    # all known yet (a template's claim not created). The snapshot reads their devices.
    uses_claims: bool = False
    claim_names: tuple[str, ...] = ()
    claims_wait: str | None = None
    # extended resources a DeviceClass may map (KEP-5004), for a pod without claims
    extended: tuple[ExtendedRequest, ...] = ()

    @property
    def pending(self) -> bool:
        return not self.node_name and not self.terminal and not self.terminating

    @property
    def ours(self) -> bool:
        return self.scheduler == names.SCHEDULER_NAME


def parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _resources(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Effective requests: max(sum of containers, any init container), kube's rule."""
    spec = pod.get("spec") or {}
    total: dict[str, Any] = {}

    def reqs(c: Mapping[str, Any]) -> dict[str, Any]:
        res = c.get("resources") or {}
        out = dict(res.get("limits") or {})
        out.update(res.get("requests") or {})
        return out

    for c in spec.get("containers") or ():
        for k, v in reqs(c).items():
            q = quantity(v)
            if q is not None:
                total[k] = total.get(k, 0) + q
    for c in spec.get("initContainers") or ():
        for k, v in reqs(c).items():
            q = quantity(v)
            if q is not None and q > total.get(k, 0):
                total[k] = q
    return total


def assignment_of(ann: Mapping[str, str], node: str, key: str) -> Bind | None:
    """The Bind our annotations record, if they belong to ``node`` and parse."""
    if not node or ann.get(names.ANN_NODE) != node:
        return None
    try:
        if ann.get(names.ANN_MIG):  # empty: cleared (see binding_annotations)
            gpu, _, rest = ann[names.ANN_MIG].partition(":")
            profile, _, start = rest.partition("@")
            slot = MigSlot(int(gpu), profile, int(start))
            return Bind(job_id=key, node=node, gpus=(), milli_per_gpu=0, mig=(slot,))
        gpus_txt = ann.get(names.ANN_GPUS, "")
        gpus = tuple(int(g) for g in gpus_txt.split(",") if g.strip())
        milli = int(ann.get(names.ANN_GPU_MILLI) or GPU_MILLI)
        return Bind(job_id=key, node=node, gpus=gpus, milli_per_gpu=milli)
    except ValueError:
        return None


def assignment_annotations(bind: Bind) -> dict[str, str | None]:
    """The GPU assignment of ``bind`` as annotations (None: the key does not apply to it)."""
    out: dict[str, str | None] = {names.ANN_NODE: bind.node}
    if bind.mig:
        m = bind.mig[0]
        out[names.ANN_MIG] = f"{m.gpu}:{m.profile}@{m.start}"
        out[names.ANN_GPUS] = str(m.gpu)
        out[names.ANN_GPU_MILLI] = None
    else:
        out[names.ANN_MIG] = None
        out[names.ANN_GPUS] = ",".join(str(g) for g in bind.gpus)
        out[names.ANN_GPU_MILLI] = str(bind.milli_per_gpu)
    return out



def binding_annotations(bind: Bind, current: Mapping[str, str]) -> dict[str, str]:
    """The annotations a ``Binding`` carries onto the pod with its node, in the same write.

    The API server only adds or overwrites a Binding's annotations — it cannot delete one — so
    a key that does not apply to this assignment but is already on the pod (say, a stale
    ``gpufleet.io/mig`` a user copied in) is written empty, which :func:`assignment_of` reads
    as absent.
    """
    return {k: "" if v is None else v for k, v in assignment_annotations(bind).items()
            if v is not None or k in current}

def request_of(
    pod: Mapping[str, Any], cat: GpuCatalog
) -> tuple[ResourceRequest | None, str | None]:
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    res = _resources(pod)
    gpus = count(res.get(names.GPU_RESOURCE, 0))
    migs = {k[len(names.MIG_RESOURCE_PREFIX):]: count(v) for k, v in res.items()
            if k.startswith(names.MIG_RESOURCE_PREFIX) and count(v) > 0}
    selector, refusal = selector_of(spec)
    models, min_cuda, _rest = lift_gpu_constraints(selector, cat)
    base = ResourceRequest(cpu_milli=cpu_milli(res.get("cpu", 0)),
                           memory_mib=memory_mib(res.get("memory", 0)),
                           gpu_models=models, min_cuda=min_cuda)
    shared = pod_fields.GPU_FRACTION.found(meta)
    if refusal:
        return None, refusal
    if migs:
        if gpus or len(migs) > 1 or sum(migs.values()) > 1 or shared:
            return None, "a pod may ask for one MIG instance and nothing else GPU-wise"
        (profile,) = migs
        return replace(base, num_gpu=1, mig_profile=profile), None
    if shared:
        bad = pod_fields.GPU_FRACTION.problem(meta) or pod_fields.GPU_MEMORY.problem(meta)
        if bad is not None:
            return None, bad
        frac = pod_fields.GPU_FRACTION.get(meta)
        assert frac is not None  # present, and its problem() found none
        if gpus:
            return None, (f"annotation {names.GPU_FRACTION}: {pod_fields.quote(shared[0][2])} "
                          f"asks for a share of one GPU; the pod cannot also ask for "
                          f"{names.GPU_RESOURCE}")
        milli = max(1, int(frac * GPU_MILLI))
        mem = pod_fields.GPU_MEMORY.get(meta) or 0
        return replace(base, num_gpu=1, gpu_milli=milli, gpu_memory_mib=mem), None
    return replace(base, num_gpu=gpus), None


def pod_info(pod: Mapping[str, Any], catalog: GpuCatalog | None = None) -> PodInfo:
    cat = catalog or default_gpu_catalog()
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ns, name = meta.get("namespace", "default"), meta.get("name", "")
    key = f"{ns}/{name}"
    ann = dict(meta.get("annotations") or {})
    node = spec.get("nodeName") or ""
    terminating = bool(meta.get("deletionTimestamp"))
    terminal = status.get("phase") in TERMINAL_PHASES
    request, refusal = request_of(pod, cat)
    if refusal is None and not node and not terminal and not terminating:
        bad = pod_fields.refusal(meta)  # a bound pod keeps what it holds: nothing to refuse
        if bad is not None:
            request, refusal = None, bad
    group = pod_fields.POD_GROUP.get(meta)
    claim_names, claims_wait = pod_claim_names(pod)
    cond = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"
                 and c.get("status") == "False"), None)
    return PodInfo(
        key=key, namespace=ns, name=name, uid=meta.get("uid", ""),
        request=request, refusal=refusal,
        tolerations=tuple(spec.get("tolerations") or ()),
        priority=int(spec.get("priority") or 0),
        preempt_never=spec.get("preemptionPolicy") == "Never",
        created_s=parse_time(meta.get("creationTimestamp")),
        node_name=node, scheduler=spec.get("schedulerName") or "default-scheduler",
        group=f"{ns}/{group}" if group else None,
        min_available=pod_fields.MIN_AVAILABLE.get(meta) or 1,
        terminating=terminating, terminal=terminal,
        grace_s=spec.get("terminationGracePeriodSeconds"),
        assignment=assignment_of(ann, node, key),
        scheduled_condition=(cond.get("reason", ""), cond.get("message", "")) if cond else None,
        annotations=ann,
        selector=lift_gpu_constraints(selector_of(spec)[0], cat)[2],
        deadline_s=pod_fields.DEADLINE.get(meta), work_s=pod_fields.DURATION.get(meta),
        value_of_time=pod_fields.VALUE_OF_TIME.get(meta),
        latency_sensitive=pod_fields.LATENCY_SENSITIVE.get(meta),
        started_s=parse_time(status["startTime"]) if status.get("startTime") else None,
        owner_uid=next((o.get("uid", "") for o in meta.get("ownerReferences") or ()
                        if o.get("controller")), ""),
        completion_index=pod_fields.COMPLETION_INDEX.get(meta),
        interrupted=_interrupted(status),
        ignored_failures=pod_fields.IGNORED_FAILURES.get(meta) or 0,
        uses_claims=bool(claim_names or claims_wait),
        claim_names=claim_names, claims_wait=claims_wait,
        extended=() if claim_names or claims_wait else extended_requests(pod),
    )


def _interrupted(status: Mapping[str, Any]) -> bool:
    """The pod left to be rescheduled: a ``DisruptionTarget`` condition (the Eviction API and
    kube's own disruptions add it) or a container that exited 75 (``EXIT_PREEMPTED``)."""
    if any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
           for c in status.get("conditions") or ()):
        return True
    return any(((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == EXIT_PREEMPTED
               or ((cs.get("lastState") or {}).get("terminated") or {}).get("exitCode")
               == EXIT_PREEMPTED
               for cs in status.get("containerStatuses") or ())


def requeued_keys(infos: Iterable[PodInfo]) -> frozenset[str]:
    """The pending pods that replace an interrupted pod of their Job (see the module
    docstring): they are queued as requeued work."""
    infos = list(infos)
    return requeued_among(infos, infos)


def requeued_among(interrupted: Iterable[PodInfo], pending: Iterable[PodInfo]) -> frozenset[str]:
    """:func:`requeued_keys` with its two readings apart: ``interrupted`` holds (at least)
    every interrupted pod of a controller, and ``pending`` every pending pod that ran before or
    has a controller; other pods in either are ignored."""
    gone: dict[tuple[str, str | None], float] = {}
    for i in interrupted:
        if i.owner_uid and i.interrupted:
            k = (i.owner_uid, i.completion_index)
            gone[k] = min(gone.get(k, i.created_s), i.created_s)
    return frozenset(
        i.key for i in pending if i.pending and (
            i.ignored_failures > 0
            or (i.owner_uid and gone.get((i.owner_uid, i.completion_index), i.created_s)
                < i.created_s)))


def tolerates(tol: Mapping[str, Any], taint: str) -> bool:
    """Kubernetes' toleration match against a ``key=value:Effect`` taint string."""
    kv, _, effect = taint.rpartition(":")
    key, _, value = kv.partition("=")
    if tol.get("effect") and tol["effect"] != effect:
        return False
    op = tol.get("operator") or "Equal"
    tkey = tol.get("key") or ""
    if not tkey:
        return op == "Exists"
    if tkey != key:
        return False
    return op == "Exists" or (tol.get("value") or "") == value


def spot_ok(pod: PodInfo) -> bool:
    """Whether the pod may be interrupted: it tolerates the spot taint (admission's rule), read
    from its own tolerations — the snapshot lists only taints some node already carries."""
    return any(tolerates(t, SPOT_TAINT) for t in pod.tolerations)


def tolerated_now(pod: PodInfo, taints: Iterable[str]) -> frozenset[str]:
    """The fleet's taints the pod tolerates now: a pod pinned to on-demand no longer tolerates
    the spot taint (``control.admission.request_now``'s rule for the simulator's jobs), nor
    does a latency-sensitive pod the spot rule cannot weigh (``control.value_of_time.
    spot_eligible``, the simulator's admission rule: no value of time, or no stated work)."""
    got = tolerated(pod.tolerations, taints)
    if pod.on_demand_only or not spot_eligible(bool(pod.latency_sensitive),
                                               pod.value_of_time or 0.0, pod.work_s is not None):
        return got - {SPOT_TAINT}
    return got


def tolerated(tolerations: Iterable[Mapping[str, Any]], taints: Iterable[str]) -> frozenset[str]:
    tols = list(tolerations)
    return frozenset(t for t in taints if any(tolerates(x, t) for x in tols))


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod_key(pod: Mapping[str, Any]) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace')}/{m['name']}"


def stays_on_drain(pod: Mapping[str, Any]) -> bool:
    """DaemonSet pods (their controller ignores cordons and would recreate them at once) and
    mirror pods (the kubelet owns them) are not evicted and do not keep a node from emptying."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(o.get("kind") == "DaemonSet" and o.get("controller")
               for o in meta.get("ownerReferences") or ())


def finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
