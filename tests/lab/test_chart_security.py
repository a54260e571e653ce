"""charts/gpufleet's handling of cloud credentials and of Pod Security, from its renderings (helm
only, no cluster; test_chart_security_live.py checks the same chart against the API server).

Cloud credentials reach the controller only from a Secret (``cloud.credentialsSecret`` as
``envFrom``, or an env entry's ``valueFrom.secretKeyRef``) or from workload identity (IRSA / RRSA
ServiceAccount annotations): no rendering of the values matrix carries a credential-like key as
a literal in a ConfigMap or an env ``value``, and values that try are refused by the chart.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_cases import CASES, CHART, render

from gpufleet.lab.binaries import binary

NS = "gpufleet-system"
# environment names the AWS and Alibaba Cloud SDKs read credentials from, and the like
CREDENTIAL = re.compile(r"(?i)(secret|access_?key|session_?token|security_?token|password|"
                        r"credential)")
KNOWN = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
         "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
         "ALIBABA_CLOUD_SECURITY_TOKEN")


@pytest.fixture(scope="module")
def helm(lab_binaries: Path) -> Path:
    return binary("helm", lab_binaries)


def containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for d in docs if d["kind"] in ("Deployment", "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"]]


def keys(node: Any) -> list[str]:
    """Every mapping key in a (parsed) YAML tree."""
    if isinstance(node, dict):
        return [str(k) for k in node] + [k for v in node.values() for k in keys(v)]
    if isinstance(node, list):
        return [k for v in node for k in keys(v)]
    return []


def literals(docs: list[dict[str, Any]]) -> list[str]:
    """Credential-like names carried as literals: env entries with a ``value``, ConfigMap keys
    (and the keys of YAML documents stored in them)."""
    found = [e["name"] for c in containers(docs) for e in c.get("env") or ()
             if CREDENTIAL.search(e["name"]) and "value" in e]
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        for k, v in (cm.get("data") or {}).items():
            found += [k] if CREDENTIAL.search(k) else []
            try:
                parsed = yaml.safe_load(v)
            except yaml.YAMLError:
                continue
            found += [n for n in keys(parsed) if CREDENTIAL.search(n)]
    return found


def test_the_pattern_knows_the_sdks_credential_names() -> None:
    assert all(CREDENTIAL.search(n) for n in KNOWN)
    assert not any(CREDENTIAL.search(n) for n in ("AWS_REGION", "POD_NAME", "NODE_NAME",
                                                  "ALIBABA_CLOUD_ECS_METADATA_DISABLED",
                                                  "KUBERNETES_SERVICE_HOST"))


def test_the_check_finds_a_literal() -> None:
    pod = {"template": {"spec": {"containers": [{"name": "c", "env": [
        {"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}]}]}}}
    assert literals([{"kind": "Deployment", "spec": pod}]) == ["AWS_SECRET_ACCESS_KEY"]
    cm = {"kind": "ConfigMap", "data": {"config.yaml": "cloud:\n  aws: {secret_key: x}\n"}}
    assert literals([cm]) == ["secret_key"]


def test_no_rendering_carries_a_credential_literal(helm: Path, tmp_path: Path) -> None:
    for case in CASES:
        docs = render(helm, case, NS, tmp_path)
        assert not literals(docs), case
        assert not [d for d in docs if d["kind"] == "Secret"], case  # referenced, never rendered


def test_credentials_come_by_secret_reference_or_workload_identity(helm: Path,
                                                                   tmp_path: Path) -> None:
    (ctl,) = [c for c in containers(render(helm, "secret", NS, tmp_path))
              if c["name"] == "controller"]
    assert ctl["envFrom"] == [{"secretRef": {"name": "gpufleet-aws-keys"}}]
    for case, annotation in (("aws-irsa", "eks.amazonaws.com/role-arn"),
                             ("aliyun-rrsa", "pod-identity.alibabacloud.com/role-name")):
        docs = render(helm, case, NS, tmp_path)
        sas = [d for d in docs if d["kind"] == "ServiceAccount"
               and d["metadata"]["name"].endswith("-controller")]
        assert annotation in sas[0]["metadata"]["annotations"], case
        assert all("envFrom" not in c for c in containers(docs)), case


def template(helm: Path, tmp_path: Path, values: dict[str, Any]
             ) -> subprocess.CompletedProcess[str]:
    vfile = tmp_path / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    return subprocess.run([str(helm), "template", "gpufleet", str(CHART), "--namespace", NS,
                           "-f", str(vfile)], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize(("values", "refused"), [
    ({"controller": {"env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}]}},
     "controller.env: AWS_SECRET_ACCESS_KEY is a credential"),
    ({"controller": {"env": [{"name": "AWS_SESSION_TOKEN", "value": "x"}]}},
     "controller.env: AWS_SESSION_TOKEN is a credential"),
    ({"agent": {"env": [{"name": "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "value": "x"}]}},
     "agent.env: ALIBABA_CLOUD_ACCESS_KEY_SECRET is a credential"),
    ({"config": {"cloud": {"name": "aws", "aws": {"aws_secret_access_key": "x"}}}},
     "config: holds a credential-like key"),
    ({"config": {"cloud": {"name": "aliyun", "aliyun": {"access_key_id": "x"}}}},
     "config: holds a credential-like key"),
])
def test_a_credential_literal_is_refused(helm: Path, tmp_path: Path, values: dict[str, Any],
                                         refused: str) -> None:
    out = template(helm, tmp_path, values)
    assert out.returncode != 0 and refused in out.stderr, out.stderr


def test_a_credential_from_a_secret_key_ref_renders(helm: Path, tmp_path: Path) -> None:
    ref = {"secretKeyRef": {"name": "aws", "key": "secret"}}
    out = template(helm, tmp_path, {"controller": {"env": [
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": ref},
        {"name": "AWS_REGION", "value": "us-east-1"}]}})
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    (ctl,) = [c for c in containers(docs) if c["name"] == "controller"]
    assert {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": ref} in ctl["env"]
    assert not literals(docs)


def test_the_created_namespace_enforces_restricted_and_host_network_needs_privileged(
        helm: Path, tmp_path: Path) -> None:
    out = template(helm, tmp_path, {"namespace": {"create": True}})
    assert out.returncode == 0, out.stderr
    (ns,) = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce-version"] == "latest"
    host = {"namespace": {"create": True}, "agent": {"hostNetwork": True}}
    out = template(helm, tmp_path, host)
    assert out.returncode != 0 and "forbids the host's network" in out.stderr, out.stderr
    out = template(helm, tmp_path, {**host, "namespace": {"create": True,
                                                          "podSecurity": "privileged"}})
    assert out.returncode == 0, out.stderr
    out = template(helm, tmp_path, {"namespace": {"create": True, "podSecurity": "strict"}})
    assert out.returncode != 0 and "namespace.podSecurity: expected" in out.stderr
