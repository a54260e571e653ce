"""Launching nodes and converging launches: the launch records, the provider's instances and the
Nodes brought to agreement (step 1 of the capacity loop, :mod:`gpufleet.k8s.capacity.loop`).

A launch is recorded (``k8s.capacity.launch_records``) *before* the provider is asked, with an
idempotency token: a crash between the two leaves the record, and the next converge asks again
with the same token (the provider hands back the instance if the first call got through). Each
converge: a record without an instance is created again; a record whose Node registered (joined
on ``spec.providerID``, Ready) or whose instance is gone is deleted; an instance whose Node has
not registered within ``registration_timeout_s`` of its launch is terminated, and so is an
unrecorded gpufleet instance with no Node past that time (a leak) — both through the one
termination path (:mod:`gpufleet.k8s.capacity.termination`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpufleet.cloud.provider import CapacityShortage, CloudProvider, Instance
from gpufleet.decisions import Launch
from gpufleet.k8s.capacity.launch_records import LaunchRecord, LaunchRecords, new_token
from gpufleet.k8s.capacity.metrics import CapacityMetrics, ReconcileReport
from gpufleet.k8s.capacity.termination import GONE, Terminator

log = logging.getLogger(__name__)


def ready(node: Mapping[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


class Provisioner:
    def __init__(self, records: LaunchRecords, provider: CloudProvider,
                 metrics: CapacityMetrics, terminator: Terminator,
                 registration_timeout_s: float) -> None:
        self.records = records
        self.provider = provider
        self.metrics = metrics
        self.terminator = terminator
        self.timeout_s = registration_timeout_s
        self.recorded: set[str] = set()  # launch-record tokens, as of this cycle's converge

    def converge(self, instances: list[Instance], by_pid: Mapping[str, Mapping[str, Any]],
                 now: float, out: ReconcileReport) -> list[Instance]:
        """The module docstring's converge; returns the instances still booting."""
        by_token = {i.client_token: i for i in instances if i.client_token}
        booting: list[Instance] = []
        self.recorded = recorded = set()
        for rec in self.records.list():
            recorded.add(rec.token)
            inst = by_token.get(rec.token)
            if inst is None:
                inst = self._resume(rec, now, out)
                if inst is None:
                    continue
            if inst.state in GONE:
                self.records.delete(rec.token)
                continue
            node = by_pid.get(inst.provider_id)
            if node is not None and ready(node):
                self.records.delete(rec.token)
                self.metrics.registration.observe(max(0.0, now - inst.launched_at))
                out.registered.append(inst.instance_id)
                continue
            if now - inst.launched_at > self.timeout_s:
                log.warning("instance %s: no Node registered within %.0f s; deleting",
                            inst.instance_id, self.timeout_s)
                self.terminator.terminate("registration-timeout", instances=[inst])
                self.records.delete(rec.token)
                out.timed_out.append(inst.instance_id)
                continue
            booting.append(inst)
        for inst in instances:
            if inst.client_token in recorded or inst.state in GONE or inst.provider_id in by_pid:
                continue
            if now - inst.launched_at > self.timeout_s:
                log.warning("instance %s: gpufleet's, no record and no Node; deleting",
                            inst.instance_id)
                self.terminator.terminate("leak", instances=[inst])
                out.leaked.append(inst.instance_id)
            else:
                booting.append(inst)
        self.metrics.in_flight.set(len(booting))
        return booting

    def _resume(self, rec: LaunchRecord, now: float, out: ReconcileReport) -> Instance | None:
        """A record without an instance: ask again with its token (never a second instance),
        or give it up past the registration timeout or when the cloud has no capacity."""
        if now - rec.created_at > self.timeout_s:
            self.records.delete(rec.token)
            self.metrics.launch_failures.labels(reason="gave-up").inc()
            return None
        got = self.provider.create(rec.request())
        if isinstance(got, CapacityShortage):
            log.info("launch %s: %s", rec.token, got.reason)
            self.records.delete(rec.token)
            self.metrics.launch_failures.labels(reason="capacity").inc()
            return None
        out.resumed.append(rec.token)
        log.info("resumed launch %s: %s (%s %s %s)", rec.token, got.instance_id,
                 rec.instance_type, rec.zone, rec.capacity_type)
        return got

    def launch(self, launch: Launch, now: float, out: ReconcileReport) -> str | None:
        """One node of ``launch``: the record written before the cloud is asked. Returns the
        token, or None when the cloud had no capacity (the record is deleted)."""
        rec = LaunchRecord(new_token(), launch.instance_type, launch.zone,
                           launch.capacity_type, now, launch.max_price, launch.mig_config)
        self.records.write(rec)
        got = self.provider.create(rec.request())
        if isinstance(got, CapacityShortage):
            log.info("launch %s %s %s: %s", launch.instance_type, launch.zone,
                     launch.capacity_type, got.reason)
            self.records.delete(rec.token)
            self.metrics.launch_failures.labels(reason="capacity").inc()
            return None
        self.recorded.add(rec.token)
        self.metrics.launches.labels(capacity_type=str(launch.capacity_type),
                                     instance_type=launch.instance_type).inc()
        out.launched.append(rec.token)
        log.info("launched %s (%s %s %s) for %s", got.instance_id, launch.instance_type,
                 launch.zone, launch.capacity_type, launch.reason)
        return rec.token
