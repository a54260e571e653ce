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


def can_i(lab: LabSession, verb: str, resource: str, *extra: str) -> bool:
    out = lab.kubectl("auth", "can-i", verb, resource, f"--as={SA}", *extra, check=False)
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
    assert can_i(lab, "create", "pods", "--subresource=binding")
    assert can_i(lab, "create", "pods", "--subresource=eviction")
    assert can_i(lab, "patch", "pods", "--subresource=status")
    assert can_i(lab, "create", "events")
    assert can_i(lab, "create", "leases.coordination.k8s.io", "-n", "gpufleet-system")
    assert can_i(
        lab, "update", "leases.coordination.k8s.io/gpufleet-scheduler", "-n", "gpufleet-system"
    )
    assert not can_i(lab, "update", "leases.coordination.k8s.io/other", "-n", "gpufleet-system")
    assert not can_i(lab, "create", "leases.coordination.k8s.io", "-n", "kube-system")
    assert not can_i(lab, "delete", "pods")
    assert not can_i(lab, "update", "nodes")
    assert not can_i(lab, "get", "secrets")
    assert not can_i(lab, "create", "pods")
    # the capacity loop (15-rbac-capacity.yaml): cordon/mark and delete Nodes, launch records
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
    lab.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / "preemptible-job.yaml"))
    job = lab.batch.read_namespaced_job("preemptible-finetune", ns)
    assert job.spec.pod_failure_policy is not None  # stored, not dropped by the server
