"""deploy/kubernetes and examples/ against the real API server (kubectl built from source).

The deploy manifests are applied for real (twice: apply is idempotent) and the RBAC is checked
with SubjectAccessReviews; the examples go through server-side dry-run (full validation and
admission, nothing persisted) in a fresh namespace.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SA = "system:serviceaccount:gpufleet-system:gpufleet-controller"


def can_i(lab: LabSession, verb: str, resource: str, *extra: str, as_: str = SA) -> bool:
    out = lab.kubectl("auth", "can-i", verb, resource, f"--as={as_}", *extra, check=False)
    return out.stdout.strip() == "yes"


def test_deploy_manifests_apply_to_the_real_api_server(lab: LabSession) -> None:
    for _ in range(2):
        out = lab.kubectl("apply", "-f", str(DEPLOY))
        assert "gpufleet-controller" in out.stdout
    dep = lab.kubectl(
        "get",
        "deployment",
        "gpufleet-controller",
        "-n",
        "gpufleet-system",
        "-o",
        "jsonpath={.spec.replicas}",
    )
    assert dep.stdout == "2"
    cm = lab.core.read_namespaced_config_map("gpufleet-config", "gpufleet-system")
    assert "scale_down_unneeded_s" in cm.data["config.yaml"]
    # The real Deployment and ReplicaSet controllers act on it: two pods appear.
    lab.kubectl(
        "wait",
        "--for=jsonpath={.status.replicas}=2",
        "deployment/gpufleet-controller",
        "-n",
        "gpufleet-system",
        "--timeout=60s",
    )

    # Least privilege: what the controller does, and nothing more.
    assert can_i(lab, "list", "nodes")
    assert can_i(lab, "watch", "pods")
    assert can_i(lab, "patch", "pods")
    assert not can_i(lab, "create", "pods", "--subresource=binding")  # never called
    assert can_i(lab, "create", "bindings")  # what create_namespaced_binding posts to
    assert can_i(lab, "create", "pods", "--subresource=eviction")
    assert can_i(lab, "patch", "pods", "--subresource=status")
    assert can_i(lab, "create", "events")
    # the Lease is part of the manifests (the chart owns it): get/update it, never create one
    assert not can_i(lab, "create", "leases.coordination.k8s.io", "-n", "gpufleet-system")
    assert can_i(lab, "get", "leases.coordination.k8s.io/gpufleet-scheduler", "-n",
                 "gpufleet-system")
    assert can_i(
        lab, "update", "leases.coordination.k8s.io/gpufleet-scheduler", "-n", "gpufleet-system"
    )
    assert not can_i(lab, "update", "leases.coordination.k8s.io/other", "-n", "gpufleet-system")
    assert not can_i(lab, "create", "leases.coordination.k8s.io", "-n", "kube-system")
    assert not can_i(lab, "delete", "pods")
    assert not can_i(lab, "update", "nodes")
    assert can_i(lab, "patch", "nodes")  # cordon / mark an interrupted node
    assert can_i(lab, "delete", "nodes")  # hand a drained node to termination
    assert not can_i(lab, "get", "secrets")
    # team queues: read GpuQueues and Namespaces, write only the queues' status
    assert can_i(lab, "watch", "gpuqueues.gpufleet.io")
    assert can_i(lab, "patch", "gpuqueues.gpufleet.io", "--subresource=status")
    assert not can_i(lab, "patch", "gpuqueues.gpufleet.io")
    assert not can_i(lab, "create", "gpuqueues.gpufleet.io")
    assert can_i(lab, "list", "namespaces") and not can_i(lab, "patch", "namespaces")
    crd = lab.kubectl("get", "crd", "gpuqueues.gpufleet.io", "-o",
                      "jsonpath={.status.conditions[?(@.type=='Established')].status}")
    assert crd.stdout == "True"
    assert not can_i(lab, "create", "pods")
    # the capacity loop: cordon/mark and delete Nodes (10-rbac.yaml), launch records
    # (15-rbac-capacity.yaml)
    assert can_i(lab, "patch", "nodes") and can_i(lab, "delete", "nodes")
    assert not can_i(lab, "create", "nodes")
    assert can_i(lab, "create", "configmaps", "-n", "gpufleet-system")
    assert can_i(lab, "delete", "configmaps", "-n", "gpufleet-system")
    assert not can_i(lab, "create", "configmaps", "-n", "kube-system")


def _pod_specs(doc: dict) -> list[dict]:
    if doc["kind"] == "Pod":
        return [doc["spec"]]
    return [doc["spec"]["template"]["spec"]]


def test_examples_are_gpufleet_workloads_the_api_server_accepts(lab: LabSession) -> None:
    assert {p.name for p in EXAMPLES} >= {
        "mig-pod.yaml",
        "whole-gpu-job.yaml",
        "fractional-inference.yaml",
        "gang-job.yaml",
        "preemptible-job.yaml",
    }
    ns = lab.namespace("examples")
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            for spec in _pod_specs(doc):
                assert spec["schedulerName"] == "gpufleet", path.name
        out = lab.kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(path), check=False)
        assert out.returncode == 0, f"{path.name}: {out.stderr}"
        assert "(server dry run)" in out.stdout


def test_preemptible_example_ignores_exit_75_and_disruption(lab: LabSession) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "preemptible-job.yaml").read_text())
    rules = doc["spec"]["podFailurePolicy"]["rules"]
    from gpufleet.checkpoint import EXIT_PREEMPTED

    assert any(
        r["action"] == "Ignore" and EXIT_PREEMPTED in r.get("onExitCodes", {}).get("values", [])
        for r in rules
    )
    assert any(
        r["action"] == "Ignore"
        and any(c["type"] == "DisruptionTarget" for c in r.get("onPodConditions", []))
        for r in rules
    )
    ns = lab.namespace("preempt")
    try:
        lab.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / "preemptible-job.yaml"))
        job = lab.batch.read_namespaced_job("preemptible-finetune", ns)
        assert job.spec.pod_failure_policy is not None  # stored, not dropped by the server
    finally:
        # Its pod stays pending for gpufleet: a controller started by a later test would place
        # it, possibly on a node that test meant for its own pod (test_image_live.py's own_lab).
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=60s", check=False,
                    timeout_s=90)


AGENT = "system:serviceaccount:gpufleet-system:gpufleet-agent"


def _as_agent_on(lab: LabSession, tmp_path: Path, node: str | None) -> Path:
    """A kubeconfig that impersonates the agent's service account as its pod on ``node`` does:
    a bound token puts the pod's node in userInfo.extra (what the admission policy checks)."""
    cfg = yaml.safe_load(lab.kubeconfig.read_text())
    for user in cfg["users"]:
        user["user"]["as"] = AGENT
        user["user"]["as-groups"] = ["system:serviceaccounts", "system:authenticated"]
        if node is not None:
            user["user"]["as-user-extra"] = {"authentication.kubernetes.io/node-name": [node]}
    path = tmp_path / f"agent-{node}.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_agent_daemonset_and_its_least_privilege(lab: LabSession, tmp_path: Path) -> None:
    import json
    import time

    from gpufleet.k8s.translate import names

    lab.kubectl("apply", "-f", str(DEPLOY / "00-namespace.yaml"))
    for _ in range(2):
        out = lab.kubectl("apply", "-f", str(DEPLOY / "40-agent.yaml"))
        assert "daemonset.apps/gpufleet-agent" in out.stdout
    spot, on_demand = (lab.add_instance_nodes("g4dn.xlarge", 1, prefix=p, capacity_type=c)[0]
                       for p, c in (("agent-spot", "spot"), ("agent-od", "on-demand")))
    try:
        # The real DaemonSet controller makes one agent pod for the spot node and none for the
        # on-demand one (it pins each pod to its node by affinity; the lab runs no
        # kube-scheduler to bind them, so we read the pin).
        def targets() -> set[str]:
            out = set()
            for p in pods:
                required = p.spec.affinity.node_affinity
                terms = required.required_during_scheduling_ignored_during_execution
                for term in terms.node_selector_terms:
                    for f in term.match_fields or ():
                        out |= set(f.values)
            return out

        end = time.monotonic() + 60
        placed: set[str] = set()
        while time.monotonic() < end and spot not in placed:
            pods = lab.core.list_namespaced_pod(
                "gpufleet-system", label_selector="app.kubernetes.io/component=agent").items
            placed = targets()
            time.sleep(0.5)
        assert spot in placed and on_demand not in placed
        env = {e.name: e.value_from.field_ref.field_path for e in pods[0].spec.containers[0].env}
        assert env == {"NODE_NAME": "spec.nodeName"}

        assert can_i(lab, "get", "nodes", as_=AGENT)
        assert can_i(lab, "patch", "nodes", as_=AGENT)
        for verb, res in (("list", "nodes"), ("delete", "nodes"), ("update", "nodes"),
                          ("get", "pods"), ("get", "secrets")):
            assert not can_i(lab, verb, res, as_=AGENT), (verb, res)

        mark = json.dumps({"kind": "spot-interruption", "deadline": None, "noticed_at": 1.0,
                           "source": "agent"})
        patch = json.dumps({"metadata": {"annotations": {names.ANN_INTERRUPTION: mark}},
                            "spec": {"taints": [{"key": names.INTERRUPTED_TAINT_KEY,
                                                 "value": "agent", "effect": "NoSchedule"}]}})

        def patch_as(node_of_pod: str | None, target: str, body: str) -> str:
            cfg = _as_agent_on(lab, tmp_path, node_of_pod)
            out = lab.kubectl(f"--kubeconfig={cfg}", "patch", "node", target, "--type=merge",
                              "-p", body, check=False)
            return "" if out.returncode == 0 else out.stderr

        # the admission policy: only its own node, only the mark
        assert "only mark the node its pod runs on" in patch_as(spot, on_demand, patch)
        assert "only mark the node its pod runs on" in patch_as(None, spot, patch)
        cordon = json.dumps({"spec": {"unschedulable": True}})
        assert "may only add the gpufleet.io/interruption" in patch_as(spot, spot, cordon)
        label = json.dumps({"metadata": {"labels": {"x": "y"}}})
        assert "may only add the gpufleet.io/interruption" in patch_as(spot, spot, label)
        assert patch_as(spot, spot, patch) == ""
        node = lab.core.read_node(spot)
        assert json.loads(node.metadata.annotations[names.ANN_INTERRUPTION])["source"] == "agent"
    finally:
        lab.kubectl("delete", "daemonset", "gpufleet-agent", "-n", "gpufleet-system",
                    "--wait=false", check=False)
        for n in (spot, on_demand):
            lab.core.delete_node(n)
