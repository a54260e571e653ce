"""charts/gpufleet rendered by the real helm (built by deploy/testcluster/build.sh): `helm lint`,
`helm template` for a matrix of values (tests/support/chart_cases.py) and what each rendering must
hold; deploy/kubernetes/ is the chart's rendering, byte for byte.

Needs only helm, not a running cluster (test_chart_live.py sends every rendering to the lab's API
server); it uses the ``lab_binaries`` fixture, so it skips (fails under CI) without the binaries.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_cases import ALIYUN, AWS, CASES, CHART, ROOT, render

from gpufleet.cloud.aliyun import AliyunConfig
from gpufleet.cloud.aws_config import AwsConfig
from gpufleet.k8s.settings import load_config
from gpufleet.lab.binaries import binary

NS = "gpufleet-system"


@pytest.fixture(scope="module")
def helm(lab_binaries: Path) -> Path:
    return binary("helm", lab_binaries)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = by_kind(docs, kind)
    return doc


def controller(docs: list[dict[str, Any]]) -> dict[str, Any]:
    dep = one(docs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c


def arg(c: dict[str, Any], name: str) -> str | None:
    for a in c["args"]:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def test_helm_lint(helm: Path) -> None:
    out = subprocess.run([str(helm), "lint", "--strict", str(CHART)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_chart_dashboard_is_the_repository_dashboard() -> None:
    ours = json.loads((CHART / "dashboards" / "gpufleet.json").read_text())
    assert ours == json.loads((ROOT / "dashboards" / "gpufleet.json").read_text())


def test_deploy_kubernetes_is_the_chart_rendered(helm: Path, tmp_path: Path) -> None:
    out = subprocess.run(["bash", str(ROOT / "deploy/kubernetes/generate.sh"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={"PATH": "/usr/bin:/bin", "HELM": str(helm)})
    assert out.returncode == 0, out.stderr
    fresh = {p.name: p.read_text() for p in tmp_path.glob("[0-9][0-9]-*.yaml")}
    committed = {p.name: p.read_text()
                 for p in (ROOT / "deploy/kubernetes").glob("[0-9][0-9]-*.yaml")}
    assert fresh.keys() == committed.keys()
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{stale}: run deploy/kubernetes/generate.sh"


def test_defaults(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "defaults", NS, tmp_path)
    kinds = {d["kind"] for d in docs}
    assert kinds == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                     "ConfigMap", "Deployment", "DaemonSet", "Service", "Lease",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert all(d["metadata"].get("namespace", NS) == NS for d in docs)
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    c = controller(docs)
    assert c["command"] == ["gpufleet", "controller"]
    assert c["image"] == "localhost/gpufleet:0.1.0"
    # leader election on the one Lease the Role lets it update
    assert "--leader-elect" in c["args"]
    assert arg(c, "identity") == "$(POD_NAME)"  # unique per replica, even on the host network
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c[
        "env"]
    lease = arg(c, "lease-name")
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role")}
    (rule,) = roles["gpufleet-leader-election"]["rules"]
    assert rule["resourceNames"] == [lease] == ["gpufleet-scheduler"]
    assert rule["verbs"] == ["get", "update"]  # the chart owns the Lease: no create
    assert one(docs, "Lease")["metadata"]["name"] == lease
    # the probes hit the port the controller serves (k8s/schedule/telemetry.py), on all addresses
    (port,) = c["ports"]
    assert port["containerPort"] == int(arg(c, "port") or 0) == 10260
    assert arg(c, "bind-address") == "0.0.0.0"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    svc = one(docs, "Service")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    # the config is a scenario the controller loads; the mount is where --config points
    cm = one(docs, "ConfigMap")
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(cm["data"]["config.yaml"])
    sc = load_config(cfg_path)
    assert (sc.name, sc.scale_down_unneeded_s, sc.cloud) == ("production", 600, None)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "config"]
    assert arg(c, "config") == f"{mount['mountPath']}/config.yaml"
    # non-root, read-only root filesystem; the agent only on spot nodes
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532 and pod["securityContext"]["runAsNonRoot"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    ds = one(docs, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"karpenter.sh/capacity-type": "spot"}
    (agent,) = ds["spec"]["template"]["spec"]["containers"]
    assert agent["command"] == ["gpufleet", "agent"]
    # the agent's probes: alive while it waits for its cloud, ready only while it reads notices
    (aport,) = agent["ports"]
    assert aport["containerPort"] == int(arg(agent, "port") or 0) == 10261
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": aport["name"]}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": aport["name"]}
    assert "hostNetwork" not in ds["spec"]["template"]["spec"]
    assert "annotations" not in _controller_sa(docs)["metadata"]


def test_the_lab_real_node_values(helm: Path, tmp_path: Path) -> None:
    """What `lab up --real-node` installs (gpufleet.lab.release.lab_values): both workloads on
    the host network, on the real node, reaching the API server on loopback."""
    docs = render(helm, "lab-real-node", NS, tmp_path)
    values = CASES["lab-real-node"][1]
    for kind, key in (("Deployment", "controller"), ("DaemonSet", "agent")):
        spec = one(docs, kind)["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": "real-node"}
        (c,) = spec["containers"]
        assert c["image"] == "localhost/gpufleet:0.1.0" and c["imagePullPolicy"] == "Never"
        assert {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"} in c["env"]
        assert c["ports"][0]["containerPort"] == values[key]["port"] == int(arg(c, "port") or 0)


def _controller_sa(docs: list[dict[str, Any]]) -> dict[str, Any]:
    dep = one(docs, "Deployment")
    name = dep["spec"]["template"]["spec"]["serviceAccountName"]
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == name]
    return sa


def _scenario(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(one(docs, "ConfigMap")["data"]["config.yaml"])
    return load_config(path)


def test_aws_irsa(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "aws-irsa", NS, tmp_path)
    ann = _controller_sa(docs)["metadata"]["annotations"]
    assert ann == {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/gpufleet"}
    sc = _scenario(docs, tmp_path)
    assert sc.cloud is not None and sc.cloud.name == "aws"
    assert AwsConfig.model_validate(sc.cloud.aws) == AwsConfig.model_validate(AWS)
    assert {"name": "AWS_REGION", "value": "us-east-1"} in controller(docs)["env"]
    assert "envFrom" not in controller(docs)  # no static keys beside IRSA


def test_aliyun_rrsa(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "aliyun-rrsa", NS, tmp_path)
    ann = _controller_sa(docs)["metadata"]["annotations"]
    assert ann == {"pod-identity.alibabacloud.com/role-name": "gpufleet-controller"}
    sc = _scenario(docs, tmp_path)
    assert sc.cloud is not None and sc.cloud.name == "aliyun"
    assert AliyunConfig.model_validate(sc.cloud.aliyun) == AliyunConfig.model_validate(ALIYUN)


def test_credentials_from_a_secret(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "secret", NS, tmp_path)
    assert controller(docs)["envFrom"] == [{"secretRef": {"name": "gpufleet-aws-keys"}}]
    assert "annotations" not in _controller_sa(docs)["metadata"]
    assert not by_kind(docs, "Secret")  # referenced, never rendered


def test_service_monitor(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "servicemonitor", NS, tmp_path)
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert ep["path"] == "/metrics"
    assert not by_kind(render(helm, "defaults", NS, tmp_path), "ServiceMonitor")


def test_dashboard(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "dashboard", NS, tmp_path)
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["gpufleet.json"])
    assert dashboard == json.loads((ROOT / "dashboards" / "gpufleet.json").read_text())


def test_replicas_and_leader_election(helm: Path, tmp_path: Path) -> None:
    two = render(helm, "replicas-2", NS, tmp_path)
    assert one(two, "Deployment")["spec"]["replicas"] == 2
    assert "--leader-elect" in controller(two)["args"]
    single = render(helm, "single-no-election", NS, tmp_path)
    assert one(single, "Deployment")["spec"]["replicas"] == 1
    assert "--no-leader-elect" in controller(single)["args"]
    assert arg(controller(single), "lease-name") is None
    assert not [r for r in by_kind(single, "Role") if "leader" in r["metadata"]["name"]]
    assert not by_kind(single, "Lease")


def test_another_release_and_namespace(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "other-release", "ml", tmp_path)
    names = {d["metadata"]["name"] for d in docs}
    assert all(n.startswith("prod-gpufleet") for n in names), names
    vap = one(docs, "ValidatingAdmissionPolicy")
    (cond,) = vap["spec"]["matchConditions"]
    assert '"system:serviceaccount:ml:prod-gpufleet-agent"' in cond["expression"]
    ds = one(docs, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "prod-gpufleet-agent"
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/lifecycle":
                                                              "spot"}
    for b in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
        assert all(s["namespace"] == "ml" for s in b["subjects"])


def test_every_case_renders(helm: Path, tmp_path: Path) -> None:
    for case in CASES:
        docs = render(helm, case, NS, tmp_path)
        assert one(docs, "Deployment")
        yaml.safe_dump_all(docs)


def test_gpu_share_policy(helm: Path, tmp_path: Path) -> None:
    """Off by default; on, the generated policy (files/) with a binding for the labelled
    namespaces, or for the listed ones with the share templates installed in each."""
    from gpufleet.k8s.dra.shares import fraction_policy, share_claim_templates

    assert not by_kind(render(helm, "defaults", NS, tmp_path), "MutatingAdmissionPolicy")
    labelled = render(helm, "gpu-shares-labelled", NS, tmp_path)
    assert one(labelled, "MutatingAdmissionPolicy") == fraction_policy()
    sel = one(labelled, "MutatingAdmissionPolicyBinding")["spec"]["matchResources"]
    assert sel["namespaceSelector"] == {"matchLabels": {"gpufleet.io/gpu-shares": "enabled"}}
    assert not by_kind(labelled, "ResourceClaimTemplate")
    listed = render(helm, "gpu-shares-listed", NS, tmp_path)
    sel = one(listed, "MutatingAdmissionPolicyBinding")["spec"]["matchResources"]
    assert sel["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["default"]}]
    templates = by_kind(listed, "ResourceClaimTemplate")
    assert [t["metadata"].pop("namespace") for t in templates] == ["default"] * 24
    assert templates == share_claim_templates()
