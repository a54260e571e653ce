"""The chart's security posture against the lab's real API server.

* **Pod Security.** Every pod template the chart renders (the controller's Deployment, the
  agent's DaemonSet), for every case of the values matrix (tests/support/chart_cases.py), is
  created as a Pod (server-side dry run) in a namespace made from the chart's own Namespace
  template, which enforces ``restricted``: each is admitted, except the lab's host-network case,
  which Pod Security refuses (the chart will only create a namespace for it at ``privileged``).
  A pod without the settings is refused by the same namespace, so the check can fail.
* **RBAC, shown by the audit log.** The chart's RBAC is installed, tokens are minted for its
  ServiceAccounts (TokenRequest), and the real ``gpufleet controller`` (with the lab's kwok
  cloud, whose own calls use the cloud's credentials, not the controller's) and the real
  ``gpufleet agent`` run as subprocesses with those tokens while a workload drives their write
  paths. The lab's API server audits ServiceAccounts' requests
  (:func:`gpufleet.lab.cluster.audit_policy_file`): from it, every (API group, resource, verb)
  each account used, and every request answered 403. A denied call fails the test, and so does a
  grant no call used, unless :data:`UNEXERCISED` names it with the reason.
* **Nothing secret served.** While the controller runs on its token, its ``/metrics`` and
  ``/healthz`` must not carry the token, a PEM block or the admin key the kwok cloud uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_cases import CASES, CHART, render
from imds import Imds
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for

from gpufleet.cloud.provider import TAG_MANAGED
from gpufleet.k8s.queues.spec import GROUP, PLURAL, QUEUE_LABEL, VERSION
from gpufleet.k8s.translate import names
from gpufleet.lab.binaries import binary
from gpufleet.lab.cluster import AUDIT_LOG, CONTROLLER_SERVING
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live

PAUSE = "registry.k8s.io/pause:3.10"
HOSTNAME = "kubernetes.io/hostname"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"  # the lab's issuer
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "Lease", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

# (apiGroup, resource[/subresource], verb)
Grant = tuple[str, str, str]

# Grants the workload here cannot exercise, each with why the chart keeps it.
UNEXERCISED: dict[str, dict[Grant, str]] = {
    "controller": {
        ("", "nodes", "get"): "a drained Node's provider id, read before its instance is "
                              "terminated (interruption and consolidation drains)",
        ("", "pods", "patch"): "the spot toleration added to a pod of a team whose budget made "
                               "it spot-only (docs/teams.md)",
        ("resource.k8s.io", "resourceclaims", "delete"): "checked, not called: "
            "OwnerReferencesPermissionEnforcement, where enabled, requires it to create the "
            "pod-owned extended-resource claim",
        ("resource.k8s.io", "resourceclaims/binding", "update"): "checked, not called: the API "
            "server requires it for a claim status update that writes allocation/reservedFor",
    },
    "agent": {},
}


def helm_template(lab_binaries: Path, release: str, ns: str, *sets: str) -> list[dict[str, Any]]:
    args = [a for s in sets for a in ("--set", s)]
    out = subprocess.run([str(binary("helm", lab_binaries)), "template", release, str(CHART),
                          "--namespace", ns, *args], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def apply(lab: LabSession, docs: list[dict[str, Any]]) -> None:
    lab.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


# -- Pod Security -----------------------------------------------------------------------------

def pod_templates(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod template) of every workload in a rendering."""
    out = []
    for d in docs:
        if d["kind"] in WORKLOADS:
            out.append((f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]))
        elif d["kind"] == "CronJob":
            out.append((f"CronJob/{d['metadata']['name']}",
                        d["spec"]["jobTemplate"]["spec"]["template"]))
        elif d["kind"] == "Pod":
            out.append((f"Pod/{d['metadata']['name']}", d))
    return out


def refusal(lab: LabSession, ns: str, name: str, template: dict[str, Any]) -> str | None:
    """None when the API server admits ``template`` as a Pod (server-side dry run), else its
    refusal."""
    meta = {k: v for k, v in (template.get("metadata") or {}).items()
            if k in ("labels", "annotations")}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name},
            "spec": template["spec"]}
    try:
        lab.core.create_namespaced_pod(ns, body, dry_run="All")
    except ApiException as exc:
        if exc.status in (400, 403, 422):
            return str(json.loads(exc.body).get("message", exc.body))
        raise
    return None


BARE = {"spec": {"containers": [{"name": "main", "image": PAUSE}]}}


def test_every_chart_pod_passes_pod_security_restricted(lab: LabSession, lab_binaries: Path,
                                                        tmp_path: Path) -> None:
    ns = f"psa-{uuid.uuid4().hex[:8]}"
    (namespace,) = [d for d in helm_template(lab_binaries, "gpufleet", ns,
                                             "namespace.create=true")
                    if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
    apply(lab, [namespace])  # the chart's own Namespace: its labels are what is enforced
    try:
        # the negative control, and the wait for Pod Security to see the namespace's labels
        msg = wait_for("the namespace to refuse a pod without the restricted settings",
                       lambda: (m := refusal(lab, ns, "bare", BARE)) and "restricted" in m and m)
        assert 'violates PodSecurity "restricted:latest"' in msg, msg
        for what in ("allowPrivilegeEscalation", "capabilities", "runAsNonRoot",
                     "seccompProfile"):
            assert what in msg, msg
        host_network, privileged = set(), set()
        checked = 0
        for case in sorted(CASES):
            docs = render(binary("helm", lab_binaries), case, ns, tmp_path)
            apply(lab, [d for d in docs if d["kind"] == "ServiceAccount"])  # pods name them
            templates = pod_templates(docs)
            assert {n.split("/")[0] for n, _ in templates} == {"Deployment", "DaemonSet"}, case
            for name, tmpl in templates:
                got = refusal(lab, ns, f"{case}-{name.split('/')[0].lower()}", tmpl)
                if name.endswith("-node-plugin"):
                    # the DRA node plugin's pods are privileged with host paths: the chart only
                    # creates a namespace for them at privileged (85-node-plugin.yaml)
                    assert got is not None and "privileged" in got and "hostPath" in got, (
                        case, name, got)
                    privileged.add(case)
                elif tmpl["spec"].get("hostNetwork"):
                    # host networking is refused by restricted (and baseline): the chart only
                    # creates a namespace for it at privileged (00-namespace.yaml)
                    assert got is not None and "host namespaces" in got, (case, name, got)
                    host_network.add(case)
                else:
                    assert got is None, f"{case}: {name}: {got}"
                    checked += 1
        assert host_network == {"lab-real-node"}
        assert privileged == {"node-plugin", "node-plugin-lab"}
        assert checked == 2 * (len(CASES) - 1)
    finally:
        lab.core.delete_namespace(ns)


# -- RBAC, from the audit log -----------------------------------------------------------------

@dataclass
class Release:
    """The chart's RBAC (and Lease, and the agent's admission policy) installed in ``ns``."""

    ns: str
    fullname: str
    docs: list[dict[str, Any]]

    @property
    def controller_sa(self) -> str:
        return f"{self.fullname}-controller"

    @property
    def agent_sa(self) -> str:
        return f"{self.fullname}-agent"

    @property
    def lease(self) -> str:
        return f"{self.fullname}-scheduler"

    def user(self, sa: str) -> str:
        return f"system:serviceaccount:{self.ns}:{sa}"

    def grants(self, sa: str) -> dict[Grant, str]:
        """Every (group, resource, verb) the rendering grants ``sa``, with the granting role."""
        def is_subject(b: dict[str, Any]) -> bool:
            return any(s["kind"] == "ServiceAccount" and s["name"] == sa
                       and s["namespace"] == self.ns for s in b.get("subjects") or ())

        roles = {(d["kind"], d["metadata"]["name"]): d for d in self.docs
                 if d["kind"] in ("ClusterRole", "Role")}
        out: dict[Grant, str] = {}
        for b in self.docs:
            if b["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not is_subject(b):
                continue
            ref = b["roleRef"]
            role = roles[(ref["kind"], ref["name"])]
            for rule in role["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out[(g, r, v)] = f"{ref['kind']}/{ref['name']}"
        return out


@pytest.fixture(scope="module")
def release(lab: LabSession, lab_binaries: Path) -> Iterator[Release]:
    crd = CHART / "crds" / "gpuqueues.gpufleet.io.yaml"
    lab.kubectl("apply", "-f", str(crd))
    lab.kubectl("wait", "--for=condition=Established", "crd/gpuqueues.gpufleet.io",
                "--timeout=60s")
    ns = lab.namespace("sec")
    name = f"sec{uuid.uuid4().hex[:5]}"
    docs = [d for d in helm_template(lab_binaries, name, ns) if d["kind"] in RBAC_KINDS]
    apply(lab, docs)
    try:
        yield Release(ns, f"{name}-gpufleet", docs)
    finally:
        cluster = [d for d in docs if "namespace" not in d["metadata"]]
        lab.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                    input=yaml.safe_dump_all(cluster))
        lab.core.delete_namespace(ns)


def token_kubeconfig(lab: LabSession, ns: str, sa: str, path: Path,
                     pod: Any = None) -> tuple[Path, str]:
    """A kubeconfig for the lab that authenticates as ``sa`` with a token from the TokenRequest
    API (bound to ``pod`` when given: the API server then names the pod's node in the token's
    user info, as for a token a kubelet mounts)."""
    bound = None if pod is None else client.V1BoundObjectReference(
        api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid)
    spec = client.V1TokenRequestSpec(audiences=[API_AUDIENCE], expiration_seconds=3600,
                                     bound_object_ref=bound)
    got = lab.core.create_namespaced_service_account_token(
        sa, ns, client.AuthenticationV1TokenRequest(spec=spec))
    token = str(got.status.token)
    kc = yaml.safe_load(lab.kubeconfig.read_text())
    kc["users"] = [{"name": sa, "user": {"token": token}}]
    kc["contexts"][0]["context"]["user"] = sa
    path.write_text(yaml.safe_dump(kc))
    path.chmod(0o600)
    return path, token


@dataclass
class Audit:
    used: dict[Grant, set[bool]]  # grant → namespaced? for each use
    denied: list[str]


def audit(lab: LabSession, user: str) -> Audit:
    """What ``user`` did, from the lab's audit log (and its rotated file, if any)."""
    log = lab.directory / AUDIT_LOG
    used: dict[Grant, set[bool]] = {}
    denied = []
    for f in sorted(log.parent.glob(f"{log.stem}*{log.suffix}")):
        for line in f.read_text().splitlines():
            if f'"{user}"' not in line:
                continue
            ev = json.loads(line)
            if ev["user"]["username"] != user:
                continue
            ref = ev.get("objectRef")
            if ref is None:  # a non-resource URL: discovery, not the chart's RBAC
                continue
            res = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            grant = (ref.get("apiGroup", ""), res, ev["verb"])
            used.setdefault(grant, set()).add("namespace" in ref)
            if ev.get("responseStatus", {}).get("code") == 403:
                denied.append(f"{ev['verb']} {ev['requestURI']}")
    return Audit(used, denied)


def check_least_privilege(lab: LabSession, rel: Release, sa: str, role: str) -> list[str]:
    """Fail on a denied call or an unused grant; return the table grant → used."""
    got = audit(lab, rel.user(sa))
    assert not got.denied, f"{sa}: denied {got.denied}"
    granted = rel.grants(sa)
    unused = sorted(g for g in granted if g not in got.used and g not in UNEXERCISED[role])
    ungranted = sorted(g for g in got.used if g not in granted)
    table = [f"{sa}: {g[0] or 'core'} {g[1]} {g[2]}: "
             f"{'used' if g in got.used else 'unused: ' + UNEXERCISED[role].get(g, '?')}"
             for g in sorted(granted)]
    print("\n".join(table))
    assert not ungranted, f"{sa}: used without a grant (another role?): {ungranted}"
    assert not unused, f"{sa}: granted but never used: {unused}"
    return table


def gpu_pod(name: str, selector: dict[str, str], gpus: int | None = 1, *,
            ann: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": ann or {}},
            "spec": {"schedulerName": "gpufleet", "nodeSelector": selector,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": PAUSE,
                                     "resources": {"limits": limits}}], **spec}}


def without_device_plugin(lab: LabSession, node: str) -> None:
    """Drop ``nvidia.com/gpu`` from the Node's status: its GPUs are DRA devices only, so a pod
    asking that extended resource gets a claim the scheduler creates (KEP-5004)."""
    patch = [{"op": "remove", "path": f"/status/{f}/nvidia.com~1gpu"}
             for f in ("capacity", "allocatable")]
    lab.core.api_client.call_api(
        f"/api/v1/nodes/{node}/status", "PATCH", body=patch,
        header_params={"Content-Type": "application/json-patch+json"},
        auth_settings=["BearerToken"], _preload_content=False)
    wait_for("the node without the device plugin's resource",
             lambda: "nvidia.com/gpu" not in lab.core.read_node(node).status.allocatable)


def serving_port(log: Path) -> int | None:
    m = re.search(CONTROLLER_SERVING, log.read_text()) if log.exists() else None
    return int(m.group(1)) if m else None


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def test_the_controller_uses_every_grant_and_is_denied_nothing(
        lab: LabSession, release: Release, tmp_path: Path) -> None:
    ns, core = release.ns, lab.core
    kc, token = token_kubeconfig(lab, ns, release.controller_sa, tmp_path / "controller.kc")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "name": "security", "provider": "aws", "spot": False, "instance_types": ["g4dn.xlarge"],
        "provisioning_delay_s": 0.0, "max_pending_wait_s": 1.0, "scale_down_unneeded_s": 2.0,
        # the lab's cloud acts with its own (admin) credentials, as EC2 answers to AWS's
        "cloud": {"name": "kwok", "registration_timeout_s": 120,
                  "kwok": {"namespace": ns, "kubeconfig": str(lab.kubeconfig)}}}))
    (big,) = lab.add_instance_nodes("g4dn.12xlarge", 1, zone=ns, prefix=ns)  # 4 T4
    (small,) = lab.add_instance_nodes("g4dn.xlarge", 1, zone=ns, prefix=ns)  # 1 T4: preemption
    # 4 T4 as DRA devices only: one for a claim, one for a plain pod's extended resource
    (dra_node,) = lab.add_instance_nodes("g4dn.12xlarge", 1, zone=ns, prefix=ns)
    without_device_plugin(lab, dra_node)
    sched = client.SchedulingV1Api(lab.api)
    custom = client.CustomObjectsApi(lab.api)
    high, queue = f"{ns}-high", f"{ns}-q"
    sched.create_priority_class({"metadata": {"name": high}, "value": 1000})
    log = tmp_path / "controller.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig", str(kc),
         "--config", str(config), "--lease-namespace", ns, "--lease-name", release.lease,
         "--identity", "security", "--lease-duration", "6", "--renew-deadline", "4",
         "--retry-period", "1", "--queue-spend-interval", "1", "--port", "0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"})
    launched: set[str] = set()
    try:
        port = wait_for("the controller to serve", lambda: serving_port(log), 90, log)

        def bound(name: str) -> str | None:
            try:
                return str(core.read_namespaced_pod(name, ns).spec.node_name or "") or None
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        # team queue: the namespace joins it; the controller writes its status
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuQueue",
            "metadata": {"name": queue}, "spec": {"gpus": 8}})
        core.patch_namespace(ns, {"metadata": {"labels": {QUEUE_LABEL: queue}}})
        # whole GPU, a fraction, one that fits nowhere, a DRA claim, a preemption victim
        on_big = {HOSTNAME: big}
        core.create_namespaced_pod(ns, gpu_pod("whole", on_big))
        core.create_namespaced_pod(ns, gpu_pod("frac", on_big, None,
                                               ann={names.GPU_FRACTION: "0.5"}))
        core.create_namespaced_pod(ns, gpu_pod("huge", {HOSTNAME: big}, 16))
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}})
        claim_pod = gpu_pod("claim", {HOSTNAME: dra_node}, None,
                            resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu"}])
        claim_pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        core.create_namespaced_pod(ns, claim_pod)
        core.create_namespaced_pod(ns, gpu_pod("plain", {HOSTNAME: dra_node}))
        core.create_namespaced_pod(ns, gpu_pod("low", {HOSTNAME: small}))
        for name in ("whole", "frac", "claim", "plain", "low"):
            wait_for(f"{name} to bind", partial(bound, name), 60, log)
        core.create_namespaced_pod(ns, gpu_pod("high", {HOSTNAME: small},
                                               priorityClassName=high))
        # the capacity loop: a pod only a launched node may take
        core.create_namespaced_pod(ns, gpu_pod("grow", {TAG_MANAGED: "true"}))

        def refused() -> bool:
            p = core.read_namespaced_pod("huge", ns)
            conds = p.status.conditions or []
            return any(c.type == "PodScheduled" and c.status == "False" for c in conds)

        wait_for("huge to be refused", refused, 60, log)
        wait_for("its FailedScheduling event", lambda: any(
            e.reason == "FailedScheduling" for e in core.list_namespaced_event(
                ns, field_selector="involvedObject.name=huge").items), 60, log)
        wait_for("low to be preempted and high to bind", lambda: bound("high") == small, 60, log)
        node = wait_for("grow to bind on a launched node", lambda: bound("grow"), 90, log)
        launched.add(node)
        assert node.startswith("kwok-"), node
        wait_for("the queue's status", lambda: (custom.get_cluster_custom_object(
            GROUP, VERSION, PLURAL, queue).get("status") or {}).get("usage"), 60, log)
        # an empty launched node is scaled down: cordoned, its instance and Node deleted
        core.delete_namespaced_pod("grow", ns, grace_period_seconds=0)

        def gone() -> bool:
            return not core.list_node(field_selector=f"metadata.name={node}").items

        wait_for("the empty launched node to be scaled down", gone, 90, log)
        # /metrics and /healthz carry nothing secret
        admin_key = yaml.safe_load(lab.kubeconfig.read_text())["users"][0]["user"]
        key_body = "".join(Path(admin_key["client-key"]).read_text().splitlines()[1:-1])
        for path in ("/metrics", "/healthz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
                body = resp.read().decode()
            assert body
            assert token not in body and token[:40] not in body, path
            assert "-----BEGIN" not in body and "PRIVATE KEY" not in body, path
            assert key_body[:64] not in body, path
    finally:
        stop(proc)
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("the pods to go", lambda: not core.list_namespaced_pod(ns).items, 60)
        managed = core.list_node(label_selector=f"{TAG_MANAGED}=true").items
        for n in [big, small, dra_node, *launched, *(m.metadata.name for m in managed)]:
            try:
                core.delete_node(n)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        sched.delete_priority_class(high)
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, queue)
    check_least_privilege(lab, release, release.controller_sa, "controller")


def test_the_agent_uses_every_grant_and_is_denied_nothing(
        lab: LabSession, release: Release, tmp_path: Path) -> None:
    ns, core = release.ns, lab.core
    (node,) = lab.add_instance_nodes("g4dn.xlarge", 1, prefix=f"{ns}-spot", zone=ns,
                                     capacity_type="spot")
    imds = Imds()
    proc = None
    try:
        # the agent's pod on that node, as the DaemonSet makes it: its token is bound to it
        pod = core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
            "spec": {"nodeName": node, "serviceAccountName": release.agent_sa,
                     "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "agent", "image": PAUSE}]}})
        kc, _ = token_kubeconfig(lab, ns, release.agent_sa, tmp_path / "agent.kc", pod)
        log = tmp_path / "agent.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "agent", f"--kubeconfig={kc}", "--node-name",
             node, "--provider", "aws", "--metadata-url", imds.url, "--poll", "0.2"],
            stdout=log.open("w"), stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"})
        imds.notice()

        def marked() -> bool:
            n = core.read_node(node)
            return any(t.key == names.INTERRUPTED_TAINT_KEY for t in n.spec.taints or ())

        wait_for("the agent to mark its node", marked, 60, log)
    finally:
        if proc is not None:
            stop(proc)
        imds.close()
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("the pods to go", lambda: not core.list_namespaced_pod(ns).items, 60)
        core.delete_node(node)
    check_least_privilege(lab, release, release.agent_sa, "agent")
