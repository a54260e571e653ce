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


def _node_plugin(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs
            if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component")
            == "node-plugin"]


def _node_plugin_parts(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any],
                                                             dict[str, Any]]:
    """(the DaemonSet's pod spec, its container, name -> host path of its hostPath volumes)."""
    (ds,) = [d for d in by_kind(docs, "DaemonSet") if d["metadata"]["name"].endswith(
        "-node-plugin")]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxUnavailable": 1}}
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"][
        "labels"].items()
    (c,) = pod["containers"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    # every host directory is mounted at its host path: the kubelet dials the socket path the
    # plugin registers, and the runtime reads the CDI spec the plugin writes; but the MPS
    # daemons' /dev/shm, a host directory the CDI specs mount as the clients' /dev/shm too
    for m in c["volumeMounts"]:
        if m["name"] == "mps-shm":
            assert m["mountPath"] == "/dev/shm"
            assert f"--mps-shm-dir={host['mps-shm']}" in c["args"], c["args"]
        elif m["name"] in host:
            assert m["mountPath"] == host[m["name"]], m
    return pod, c, host


def test_node_plugin_is_off_by_default(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "defaults", NS, tmp_path)
    assert not _node_plugin(docs)
    assert not [d for d in docs if "node-plugin" in d["metadata"]["name"]]


def test_node_plugin_defaults(helm: Path, tmp_path: Path) -> None:
    """nodePlugin.enabled alone: the plugin on the shared pool's nodes with the host's standard
    directories, an MPS daemon, its metrics port probed; its own ServiceAccount and
    least-privilege ClusterRole."""
    docs = render(helm, "node-plugin", NS, tmp_path)
    pod, c, host = _node_plugin_parts(docs)
    assert c["command"] == ["gpufleet", "node-plugin"]
    assert c["image"] == controller(docs)["image"] == "localhost/gpufleet:0.1.0"
    assert c["args"] == ["--kubelet-root-dir=/var/lib/kubelet", "--cdi-dir=/var/run/cdi",
                         "--state-dir=/var/lib/gpufleet/node-plugin", "--metrics-port=9402",
                         "--mps-dir=/run/gpufleet/mps", "--mps-shm-dir=/run/gpufleet/mps/shm"]
    assert c["env"] == [{"name": "NODE_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9402}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["securityContext"]["privileged"] is True and c["securityContext"]["runAsUser"] == 0
    assert c["resources"]["requests"]
    assert host == {"plugins-registry": "/var/lib/kubelet/plugins_registry",
                    "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi",
                    "state": "/var/lib/gpufleet/node-plugin", "mps": "/run/gpufleet/mps",
                    "mps-shm": "/run/gpufleet/mps/shm", "dev": "/dev"}
    assert pod["nodeSelector"] == {"gpufleet.io/gpu-pool": "shared"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert "tolerations" not in pod and "hostNetwork" not in pod
    # no device file: the GPUs come from NVML
    assert not [d for d in by_kind(docs, "ConfigMap") if "node-plugin" in d["metadata"]["name"]]
    # RBAC: its own ServiceAccount, bound to exactly these rules
    (sa,) = [d for d in _node_plugin(docs) if d["kind"] == "ServiceAccount"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"] == "gpufleet-node-plugin"
    assert sa["metadata"]["namespace"] == NS
    (role,) = [d for d in _node_plugin(docs) if d["kind"] == "ClusterRole"]
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
         "verbs": ["create", "patch"]}]
    (binding,) = [d for d in _node_plugin(docs) if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpufleet-node-plugin",
                                    "namespace": NS}]
    # nothing else of the release changes
    assert {d["kind"] for d in _node_plugin(docs)} == {"ServiceAccount", "ClusterRole",
                                                       "ClusterRoleBinding", "DaemonSet"}
    assert len(docs) - len(_node_plugin(docs)) == len(render(helm, "defaults", NS, tmp_path))


def test_node_plugin_lab_values(helm: Path, tmp_path: Path) -> None:
    """Every value moved: a device file (a ConfigMap the plugin's own loader accepts, mounted
    where --device-file points), another kubelet root dir (trailing slash dropped), other
    directories and port, no MPS daemon, extra args last, the host network."""
    from chart_cases import DEVICE_FILE, NODE_PLUGIN_LAB

    from gpufleet.node_plugin.inventory import load_device_file

    docs = render(helm, "node-plugin-lab", NS, tmp_path)
    pod, c, host = _node_plugin_parts(docs)
    assert c["args"] == ["--kubelet-root-dir=/var/lib/gpufleet-lab/kubelet", "--cdi-dir=/etc/cdi",
                         "--state-dir=/var/lib/gpufleet-lab/node-plugin",
                         "--device-file=/etc/gpufleet/node-plugin/devices.yaml",
                         "--metrics-port=9502", "--no-mps-daemon", "--resync-seconds=5"]
    assert host == {"plugins-registry": "/var/lib/gpufleet-lab/kubelet/plugins_registry",
                    "plugins": "/var/lib/gpufleet-lab/kubelet/plugins", "cdi": "/etc/cdi",
                    "state": "/var/lib/gpufleet-lab/node-plugin", "mps": "/run/gpufleet-lab/mps",
                    "dev": "/dev"}
    assert c["ports"] == [{"name": "metrics", "containerPort": 9502}]
    assert {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"} in c["env"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "real-node"}
    assert pod["tolerations"] == NODE_PLUGIN_LAB["tolerations"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "priorityClassName" not in pod
    # the device file: its ConfigMap, mounted where --device-file points, read by the plugin's
    # own loader
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith(
        "-node-plugin-devices")]
    (vol,) = [v for v in pod["volumes"] if v.get("configMap", {}).get("name")
              == cm["metadata"]["name"]]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    path = arg(c, "device-file") or ""
    key = path.removeprefix(mount["mountPath"] + "/")
    assert cm["data"][key] == DEVICE_FILE
    (tmp_path / key).write_text(cm["data"][key])
    (gpu,) = load_device_file(tmp_path / key)
    assert (gpu.index, gpu.memory_mib) == (0, 81920)
    # the same file given as a mapping instead of a string
    values = {"nodePlugin": {**NODE_PLUGIN_LAB, "deviceFile": yaml.safe_load(DEVICE_FILE)}}
    vfile = tmp_path / "mapping.values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    out = subprocess.run([str(helm), "template", "gpufleet", str(CHART), "--namespace", NS,
                          "-f", str(vfile)], capture_output=True, text=True, timeout=60,
                         check=True)
    (cm,) = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "ConfigMap"
             and d["metadata"]["name"].endswith("-node-plugin-devices")]
    (tmp_path / key).write_text(cm["data"][key])
    assert load_device_file(tmp_path / key) == [gpu]
    assert "warning" not in out.stderr, out.stderr
    # a new device file rolls the pods
    (ds,) = [d for d in by_kind(docs, "DaemonSet") if d["metadata"]["name"].endswith(
        "-node-plugin")]
    assert ds["spec"]["template"]["metadata"]["annotations"]["checksum/devices"]


def _node_plugin_values(helm: Path, tmp_path: Path, values: dict[str, Any]
                        ) -> subprocess.CompletedProcess[str]:
    vfile = tmp_path / "np.values.yaml"
    vfile.write_text(yaml.safe_dump({"nodePlugin": {"enabled": True, **values}}))
    return subprocess.run([str(helm), "template", "gpufleet", str(CHART), "--namespace", NS,
                           "-f", str(vfile)], capture_output=True, text=True, timeout=60,
                          check=False)


HAMI_CORE = {"hamiCore": "/usr/local/vgpu/libvgpu.so"}


def test_node_plugin_with_hami_core(helm: Path, tmp_path: Path) -> None:
    """nodePlugin.hamiCore: --hami-core and --hami-dir instead of the MPS flags (which the plugin
    refuses beside it), the library mounted read-only at its host path (a File: a node without
    it fails the pod's start), the HAMi directory in place of the MPS one; mpsDaemon is moot."""
    extras: list[dict[str, Any]] = [{}, {"mpsDaemon": False}, {"hamiDir": "/run/hami/"}]
    for extra in extras:
        out = _node_plugin_values(helm, tmp_path, {**HAMI_CORE, **extra})
        assert out.returncode == 0, out.stderr
        _, c, host = _node_plugin_parts([d for d in yaml.safe_load_all(out.stdout) if d])
        hami_dir = str(extra.get("hamiDir", "/run/gpufleet/hami/")).rstrip("/")
        assert c["args"] == ["--kubelet-root-dir=/var/lib/kubelet", "--cdi-dir=/var/run/cdi",
                             "--state-dir=/var/lib/gpufleet/node-plugin", "--metrics-port=9402",
                             "--hami-core=/usr/local/vgpu/libvgpu.so",
                             f"--hami-dir={hami_dir}"], extra
        assert host == {"plugins-registry": "/var/lib/kubelet/plugins_registry",
                        "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi",
                        "state": "/var/lib/gpufleet/node-plugin",
                        "hami-core": "/usr/local/vgpu/libvgpu.so", "hami": hami_dir,
                        "dev": "/dev"}, extra
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["hami-core"].get("readOnly") is True
        assert not mounts["hami"].get("readOnly")
        (pod,) = [d["spec"]["template"]["spec"] for d in yaml.safe_load_all(out.stdout)
                  if d and d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith(
                      "-node-plugin")]
        types = {v["name"]: v["hostPath"]["type"] for v in pod["volumes"] if "hostPath" in v}
        assert types["hami-core"] == "File" and types["hami"] == "DirectoryOrCreate"
    out = _node_plugin_values(helm, tmp_path, {"hamiCore": "libvgpu.so"})
    assert out.returncode != 0 and 'nodePlugin.hamiCore: "libvgpu.so" is not an absolute path' \
        in out.stderr, out.stderr


def test_node_plugin_args_are_the_commands_options(helm: Path, tmp_path: Path) -> None:
    """Every flag the chart passes is an option of `gpufleet node-plugin` (the typer app), so a
    renamed flag fails here instead of crash-looping the DaemonSet."""
    import typer.main

    import gpufleet.node_plugin.cli  # noqa: F401  registers the command on the app
    from gpufleet.cli_app import app

    cmd = typer.main.get_command(app).commands["node-plugin"]  # type: ignore[attr-defined]
    options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    for case in ("node-plugin", "node-plugin-lab"):
        _, c, _ = _node_plugin_parts(render(helm, case, NS, tmp_path))
        flags = {a.split("=", 1)[0] for a in c["args"]}
        assert flags <= options, (case, sorted(flags - options))
    out = _node_plugin_values(helm, tmp_path, HAMI_CORE)
    _, c, _ = _node_plugin_parts([d for d in yaml.safe_load_all(out.stdout) if d])
    flags = {a.split("=", 1)[0] for a in c["args"]}
    assert {"--hami-core", "--hami-dir"} <= flags <= options, sorted(flags - options)


def test_node_plugin_in_a_restricted_namespace_is_refused(helm: Path, tmp_path: Path) -> None:
    """Its pods are privileged: a namespace the chart creates under restricted (or baseline) Pod
    Security would refuse them, so the chart refuses to render that."""
    def template(values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        vfile = tmp_path / "values.yaml"
        vfile.write_text(yaml.safe_dump(values))
        return subprocess.run([str(helm), "template", "gpufleet", str(CHART), "--namespace", NS,
                               "-f", str(vfile)], capture_output=True, text=True, timeout=60,
                              check=False)

    for level in ("restricted", "baseline"):
        out = template({"nodePlugin": {"enabled": True},
                        "namespace": {"create": True, "podSecurity": level}})
        assert out.returncode != 0 and "nodePlugin.enabled: the node plugin's pods are " \
            "privileged" in out.stderr, out.stderr
    out = template({"nodePlugin": {"enabled": True},
                    "namespace": {"create": True, "podSecurity": "privileged"}})
    assert out.returncode == 0, out.stderr


def test_helm_lint_with_the_node_plugin(helm: Path) -> None:
    out = subprocess.run([str(helm), "lint", "--strict", str(CHART), "--set",
                          "nodePlugin.enabled=true"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
