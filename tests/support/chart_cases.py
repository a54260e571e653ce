"""The values matrix the chart tests render (charts/gpufleet), and how to render one case.

Shared by tests/lab/test_chart.py (what each rendering contains) and test_chart_live.py (every
rendering through the real API server's validation and admission, server-side dry run).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpufleet.lab.release import lab_values

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpufleet"

AWS = {"region": "us-east-1",
       "zones": {"us-east-1a": "subnet-0abc1234", "us-east-1b": "subnet-0def5678"},
       "launch_template": {"name": "gpufleet-gpu-nodes"},
       "instance_types": ["g5.xlarge", "g5.12xlarge"],
       "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/gpufleet-interruptions"}
ALIYUN = {"region": "cn-hangzhou",
          "zones": {"cn-hangzhou-h": "vsw-bp1aaaaaaaaaaaaaaaaaa"},
          "image_id": "m-bp1ccccccccccccccccc", "security_group_id": "sg-bp1dddddddddddddddd"}
BASE = {"name": "prod", "provider": "aws", "spot": True, "scale_down_unneeded_s": 600}
DEVICE_FILE = ("gpus:\n"
               "  - {uuid: GPU-11111111-0000-0000-0000-000000000000, index: 0, minor: 0,\n"
               "     product: NVIDIA H100 80GB HBM3, memoryMiB: 81920}\n")
NODE_PLUGIN_LAB = {
    "enabled": True, "deviceFile": DEVICE_FILE, "mpsDaemon": False,
    "kubeletRootDir": "/var/lib/gpufleet-lab/kubelet/", "cdiDir": "/etc/cdi",
    "stateDir": "/var/lib/gpufleet-lab/node-plugin", "mpsDir": "/run/gpufleet-lab/mps",
    "metricsPort": 9502, "hostNetwork": True, "priorityClassName": "",
    "nodeSelector": {"gpufleet.io/gpu-pool": None, "kubernetes.io/hostname": "real-node"},
    "tolerations": [{"key": "gpufleet.io/lab", "operator": "Exists"}],
    "extraArgs": ["--resync-seconds=5"],
    "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}],
}

# case -> (release name, values)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "defaults": ("gpufleet", {}),
    "aws-irsa": ("gpufleet", {
        "config": {**BASE, "cloud": {"name": "aws", "aws": AWS}},
        "cloud": {"aws": {"roleArn": "arn:aws:iam::123456789012:role/gpufleet"}},
        "controller": {"env": [{"name": "AWS_REGION", "value": "us-east-1"}]}}),
    "aliyun-rrsa": ("gpufleet", {
        "config": {**BASE, "provider": "aliyun", "cloud": {"name": "aliyun", "aliyun": ALIYUN}},
        "cloud": {"aliyun": {"rrsaRoleName": "gpufleet-controller"}}}),
    "secret": ("gpufleet", {
        "config": {**BASE, "cloud": {"name": "aws", "aws": AWS}},
        "cloud": {"credentialsSecret": "gpufleet-aws-keys"}}),
    "servicemonitor": ("gpufleet", {"serviceMonitor": {"enabled": True,
                                                       "labels": {"release": "prom"}}}),
    "dashboard": ("gpufleet", {"dashboard": {"enabled": True}}),
    "replicas-2": ("gpufleet", {"controller": {"replicas": 2}}),
    "single-no-election": ("gpufleet", {"controller": {"replicas": 1,
                                                       "leaderElection": {"enabled": False}}}),
    # the gpu-fraction admission policy: for labelled namespaces, and for listed ones (with the
    # share templates installed there; "default" exists in every cluster)
    "gpu-shares-labelled": ("gpufleet", {"dra": {"gpuShares": {"enabled": True}}}),
    "gpu-shares-listed": ("gpufleet", {"dra": {"gpuShares": {"enabled": True,
                                                             "namespaces": ["default"]}}}),
    # helm merges maps: replacing the default selector means nulling its key
    "other-release": ("prod", {"agent": {"nodeSelector": {
        "karpenter.sh/capacity-type": None, "node.kubernetes.io/lifecycle": "spot"}}}),
    # the DRA node plugin: the defaults, and a lab-like node (a device file instead of NVML, the
    # kubelet under another root dir, no MPS daemon, every other value moved)
    "node-plugin": ("gpufleet", {"nodePlugin": {"enabled": True}}),
    "node-plugin-lab": ("gpufleet", {"nodePlugin": NODE_PLUGIN_LAB}),
    # what `gpufleet lab up --real-node` installs
    "lab-real-node": ("gpufleet", lab_values("https://127.0.0.1:6443", "real-node",
                                             "localhost/gpufleet:0.1.0")),
}


def render(helm: Path, case: str, namespace: str, tmp: Path) -> list[dict[str, Any]]:
    """`helm template` of one case into ``namespace``: the documents, in order."""
    release, values = CASES[case]
    vfile = tmp / f"{case}.values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    out = subprocess.run([str(helm), "template", release, str(CHART), "--namespace", namespace,
                          "-f", str(vfile)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, f"{case}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]
