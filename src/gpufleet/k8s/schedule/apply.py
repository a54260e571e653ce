"""Scheduling decisions → API calls: the one writer of a pod's placement (Bind, Preempt, Refuse).

Every other write the controller makes has exactly one owner too, each a Decision or a record
applied in one place (docs/kubernetes.md, "Who writes what"): ``Cordon`` and Node deletion
without a cloud — ``k8s.disruption.drain``; ``Terminate`` with a cloud (instance, then Node) —
``k8s.capacity.termination``; the interruption mark — ``k8s.disruption.interruption``; the
consolidation mark and its undoing — ``k8s.disruption.consolidation_mark``; launch records —
``k8s.capacity.launch_records``; the Lease — ``k8s.watch.leader``; a GpuQueue's status —
``k8s.queues.tracker`` (its Events through :meth:`Applier.event`). Evictions of drained and
consolidated nodes' pods come here, as ``Preempt``.

* ``Bind``: for a pod with ResourceClaims, first its claims (``claim_writes``: finalizer, then
  allocation and reservation), then one write, ``pods/binding``, carrying the GPU assignment as
  the Binding's annotations (the API server copies them onto the pod in the same update that sets
  ``nodeName``) and the pod's UID and ``resourceVersion`` as preconditions — so a replica with a
  stale view gets 409 instead of binding or overwriting another's record. A 409 means someone
  else changed or bound the pod: not an error — the next cycle re-reads the world. A 404 means
  the pod is gone. A bind onto a node with the spot taint of a pod that does not tolerate it
  (the cycle moved a ``spot-only`` team's work to spot, ``control.cycle`` step 6) first adds
  the toleration to the pod (a merge patch of ``spec.tolerations`` — the one pod-spec field an
  update may extend — under the pod's ``resourceVersion``; the Binding then carries the new
  one): the pod says where it may run, as the simulator's job request does, so kube-scheduler,
  a descheduler or a restarted gpufleet reading it sees a pod that belongs on spot.
* ``Preempt``: the Eviction API with the pod's own ``terminationGracePeriodSeconds``; the API
  server adds the ``DisruptionTarget`` condition that a Job's ``podFailurePolicy`` can ignore.
  A 429 (a PodDisruptionBudget says not now) is retried by a later cycle. An accepted eviction
  is counted by queue and cause (``gpufleet_pod_disruptions_total``) with the running work it
  interrupts (``gpufleet_caused_delay_gpu_seconds_total``: ``running_gpu_seconds``).
* ``Refuse``: ``PodScheduled=False``, reason ``Unschedulable``, with the framework's message, and
  a ``FailedScheduling`` Warning Event — only when the message differs from the one already on
  the pod, so a pod that stays pending for an hour gets one event, not one per cycle.

Every write is made only while ``leading()`` holds (the controller passes its Lease check: the
last successful renewal younger than the renew deadline, on the monotonic clock), asked right
before the call — not once per cycle: a replica paused or starved mid-cycle (SIGSTOP, a long GC,
a VM freeze) past its lease wakes with writes still queued in its threads, planned on a view in
which another replica may since have given the same GPUs away. Such a decision is dropped and
counted as a conflict, so its assumption is forgotten.

Kubernetes' client deserialises the ``Binding`` create's response into a model that rejects it
(a known quirk), so every write here asks for the raw response (``_preload_content=False``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.control.admission import SPOT_TAINT, spot_taint_object
from gpufleet.decisions import Bind, Preempt, Refuse
from gpufleet.k8s.schedule.claim_writes import CONFLICT
from gpufleet.k8s.schedule.telemetry import ControllerMetrics
from gpufleet.k8s.translate.pods import binding_annotations, parse_time, request_of, tolerates
from gpufleet.k8s.watch.connections import release
from gpufleet.k8s.watch.ratelimit import TokenBucket
from gpufleet.provisioning.binpack import gpu_milli_of
from gpufleet.state import GPU_MILLI

log = logging.getLogger(__name__)

ApiErrors = (ApiException, urllib3.exceptions.HTTPError, OSError)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_gpu_seconds(pod: Mapping[str, Any], now: float) -> float:
    """The running work an eviction of ``pod`` interrupts: the GPUs its request holds (a share
    or a MIG instance as its compute share, ``provisioning.binpack.gpu_milli_of``) × the
    seconds since it started (``status.startTime``). The controller does not see a job's
    checkpoints, so this is all a pod that does not checkpoint runs again, and an upper bound
    on what one that does loses. 0 for a pod not started, or whose request it cannot read."""
    started = (pod.get("status") or {}).get("startTime")
    if not started:
        return 0.0
    req, _ = request_of(pod, default_gpu_catalog())
    if req is None:
        return 0.0
    return gpu_milli_of(req) / GPU_MILLI * max(0.0, now - parse_time(started))


@dataclass(slots=True)
class Outcome:
    bound: list[Bind] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # pods of those errors (a 409 is not one)


class Applier:
    """Applies one cycle's decisions; ``pods`` is the informer's view the cycle was planned on."""

    def __init__(self, core: Any, metrics: ControllerMetrics, component: str = "gpufleet",
                 instance: str = "", limiter: TokenBucket | None = None,
                 workers: int = 32) -> None:
        self.core = core
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gpufleet-apply")
        self.limiter = limiter or TokenBucket(0, 1)
        self.metrics = metrics
        self.component = component
        self.instance = instance or uuid.uuid4().hex[:8]
        self._written: dict[str, str] = {}  # pod key → refusal message we last wrote
        # DRA: writes a pod's claims before its Binding (claim_writes.ClaimWriter.prebind via
        # the controller); None: the pod may be bound, CONFLICT or an error message: it is not
        self.prebind: Callable[[Bind, Mapping[str, Any]], str | Mapping[str, Any] | None] | \
            None = None
        # whether a bind's devices are recorded in claims: its Binding carries no annotations
        self.in_claims: Callable[[Bind], bool] = lambda _d: False
        # whether this replica may write now (module docstring); always, without an election
        self.leading: Callable[[], bool] = lambda: True
        # namespace → the GpuQueue it names ("" for none): the queue label of the disruption
        # metrics (the controller reads it from its namespace informer)
        self.queue_of: Callable[[str], str] = lambda _ns: ""

    def apply(self, decisions: list, pods: Mapping[str, Mapping[str, Any]],
              spot_nodes: Collection[str] = ()) -> Outcome:
        """Apply every decision; different pods' calls run in parallel (``workers`` threads),
        as kube-scheduler binds asynchronously — one pod's own calls stay in order.
        ``spot_nodes``: the nodes carrying the spot taint (a pod bound there gets the
        toleration first, module docstring).

        kube-scheduler binds each pod in its own goroutine, bounded only by its client rate
        limit; with eight threads the 1,213-node benchmark found the scheduling loop always
        waiting here (a binding takes up to a second on a loaded API server), so 32 by default —
        the rate limit, not the thread count, is what bounds the writes."""
        out = Outcome()

        def one(d: object) -> None:
            match d:
                case Bind():
                    self._bind(d, pods.get(d.job_id), out, d.node in spot_nodes)
                case Preempt():
                    self._evict(d, pods.get(d.job_id), out)
                case Refuse():
                    self._refuse(d, pods.get(d.job_id), out)
                case _:
                    raise TypeError(f"the Kubernetes driver cannot apply {d!r}")

        if self.workers <= 1 or len(decisions) <= 1:
            for d in decisions:
                one(d)
        else:
            list(self._pool.map(one, decisions))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _stale(self, d: Bind | Preempt | Refuse, out: Outcome) -> bool:
        """True (and the decision dropped as a conflict) when this replica no longer leads."""
        if self.leading():
            return False
        out.conflicts.append(d.job_id)
        if isinstance(d, Bind):
            self.metrics.conflicts.inc()
        log.warning("%s %s: not leading any more; dropped unwritten", type(d).__name__,
                    d.job_id)
        return True

    # -- Bind ---------------------------------------------------------------------------------
    def _bind(self, d: Bind, pod: Mapping[str, Any] | None, out: Outcome,
              spot: bool = False) -> None:
        if pod is None or self._stale(d, out):
            return
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if self.prebind is not None and (why := self.prebind(d, pod)) is not None:
            if not isinstance(why, str):  # its claims are written and its status patched
                pod = why
                meta = why["metadata"]
            elif why == CONFLICT:
                out.conflicts.append(d.job_id)
                self.metrics.conflicts.inc()
                self.metrics.attempts.labels(result="conflict").inc()
                return
            else:
                self._error(out, d.job_id, why)
                return
        version = meta.get("resourceVersion")
        tols = list((pod.get("spec") or {}).get("tolerations") or ())
        if spot and not any(tolerates(t, SPOT_TAINT) for t in tols):
            version = self._tolerate_spot(d, pod, tols, out)
            if version is None:
                return
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": meta.get("uid"),
                             "resourceVersion": version,
                             "annotations": {} if self.in_claims(d) else
                             binding_annotations(d, meta.get("annotations") or {})},
                "target": {"apiVersion": "v1", "kind": "Node", "name": d.node}}
        if self._stale(d, out):  # the claim writes or the toleration patch took a while
            return
        try:
            self.limiter.take()
            release(self.core.create_namespaced_binding(ns, body, _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                out.conflicts.append(d.job_id)
                self.metrics.conflicts.inc()
                self.metrics.attempts.labels(result="conflict").inc()
                log.info("bind %s → %s: 409 (already bound or changed); re-reading", d.job_id,
                         d.node)
                return
            if exc.status == 404:
                return
            self._error(out, d.job_id,
                        f"bind {d.job_id} → {d.node}: {exc.status} {exc.reason}")
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._error(out, d.job_id, f"bind {d.job_id} → {d.node}: {exc}")
            return
        out.bound.append(d)
        self._written.pop(d.job_id, None)
        self.metrics.binds.inc()
        self.metrics.attempts.labels(result="scheduled").inc()
        created = parse_time(meta.get("creationTimestamp"))
        if created:
            self.metrics.latency.observe(max(0.0, time.time() - created))

    def _tolerate_spot(self, d: Bind, pod: Mapping[str, Any], tols: list[Any],
                       out: Outcome) -> str | None:
        """Add the spot toleration to the pod before binding it to a spot node; the pod's new
        ``resourceVersion``, or None when the patch failed (409/404 as for the bind)."""
        meta = pod["metadata"]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                "spec": {"tolerations": [*tols, spot_taint_object()]}}
        try:
            self.limiter.take()
            resp = self.core.patch_namespaced_pod(
                meta["name"], meta["namespace"], body,
                _content_type="application/merge-patch+json", _preload_content=False)
        except ApiException as exc:
            if exc.status == 409:
                out.conflicts.append(d.job_id)
                self.metrics.conflicts.inc()
                log.info("spot toleration for %s: 409 (changed); re-reading", d.job_id)
            elif exc.status != 404:
                self._error(out, d.job_id,
                            f"spot toleration for {d.job_id}: {exc.status} {exc.reason}")
            return None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._error(out, d.job_id, f"spot toleration for {d.job_id}: {exc}")
            return None
        return str(json.loads(resp.data)["metadata"]["resourceVersion"])

    # -- Preempt ------------------------------------------------------------------------------
    def _evict(self, d: Preempt, pod: Mapping[str, Any] | None, out: Outcome) -> None:
        if pod is None or self._stale(d, out):
            return
        meta = pod["metadata"]
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        if grace is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": int(grace)}
        try:
            self.limiter.take()
            release(self.core.create_namespaced_pod_eviction(
                meta["name"], meta["namespace"], body, _preload_content=False))
        except ApiException as exc:
            if exc.status in (404, 429):  # gone already / a disruption budget says not now
                log.info("evict %s: %s %s", d.job_id, exc.status, exc.reason)
                return
            self._error(out, d.job_id, f"evict {d.job_id}: {exc.status} {exc.reason}")
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._error(out, d.job_id, f"evict {d.job_id}: {exc}")
            return
        out.evicted.append(d.job_id)
        self.metrics.evictions.inc()
        self.count_disruption(d, pod, time.time())
        self.event(pod, "Preempted", d.reason, "Normal")

    def count_disruption(self, d: Preempt, pod: Mapping[str, Any], now: float) -> None:
        """An accepted eviction of ``pod``: one disruption, and the running work it interrupts
        (``running_gpu_seconds``), under its queue and ``d.cause``."""
        labels = {"queue": self.queue_of(pod["metadata"]["namespace"]), "cause": str(d.cause)}
        self.metrics.disruptions.labels(**labels).inc()
        self.metrics.caused_delay.labels(**labels).inc(running_gpu_seconds(pod, now))

    # -- Refuse -------------------------------------------------------------------------------
    def _refuse(self, d: Refuse, pod: Mapping[str, Any] | None, out: Outcome) -> None:
        if pod is None:
            return
        self.metrics.attempts.labels(result="unschedulable").inc()
        current = next((c for c in (pod.get("status") or {}).get("conditions") or ()
                        if c.get("type") == "PodScheduled"), None)
        same = current is not None and current.get("status") == "False" and current.get(
            "reason") == "Unschedulable" and current.get("message") == d.message
        if same or self._written.get(d.job_id) == d.message or self._stale(d, out):
            return
        meta = pod["metadata"]
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": d.message, "lastTransitionTime": _now()}
        # the Event first, as kube-scheduler does: a controller that dies between the two writes
        # leaves the condition unwritten, so its successor writes both again (an Event at least
        # once); the other order would leave the condition and never the Event
        self.event(pod, "FailedScheduling", d.message, "Warning")
        try:
            self.limiter.take()
            release(self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": {"conditions": [cond]}},
                _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                self._error(out, d.job_id, f"status of {d.job_id}: {exc.status} {exc.reason}")
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._error(out, d.job_id, f"status of {d.job_id}: {exc}")
            return
        self._written[d.job_id] = d.message
        out.refused.append(d.job_id)

    def event(self, obj: Mapping[str, Any], reason: str, message: str, kind: str) -> None:
        """An Event about ``obj`` (a Pod unless it says its ``kind``; a cluster-scoped object's
        events go to the ``default`` namespace, where kubectl describe looks for them)."""
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        now = _now()
        involved = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Pod"),
                    "name": meta["name"], "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion")}
        if meta.get("namespace"):
            involved["namespace"] = ns
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": involved,
            "reason": reason, "message": message, "type": kind, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component, "reportingInstance": self.instance,
        }
        try:
            self.limiter.take()
            release(self.core.create_namespaced_event(ns, body, _preload_content=False))
        except ApiErrors as exc:  # an event is best effort: the condition already says it
            log.warning("event for %s/%s: %s", ns, meta["name"], exc)

    def _error(self, out: Outcome, job_id: str, msg: str) -> None:
        out.errors.append(msg)
        out.failed.append(job_id)
        self.metrics.attempts.labels(result="error").inc()
        log.warning("%s", msg)


