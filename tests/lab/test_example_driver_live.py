"""Kubernetes' example DRA driver (sigs.k8s.io/dra-example-driver) on the lab's real node: its
demo workloads run under kube-scheduler and under gpufleet, and get the same devices' env.

A lab of its own with a real node (containerd 2.x, the kubelet; the chart's controller is the
``gpufleet`` scheduler, kube-scheduler runs beside it). The driver's kubelet plugin, built by
deploy/testcluster/build.sh from the wrapper module deploy/dra-example-driver, runs as a host
process for the real node: it registers with the kubelet through the node's plugin directories,
writes its CDI specs where the node's containerd reads them and publishes a ResourceSlice of 8
fake GPUs (``gpu-0``..``gpu-7``). The test creates the driver's DeviceClass ``gpu.example.com``
as its Helm chart does.

Each demo under the driver module's ``demo/examples/`` is applied twice, in two namespaces at
once: for kube-scheduler (``default-scheduler``, which the demos leave implicit) and with
``schedulerName: gpufleet``. The demos' containers run
``ubuntu:22.04`` with ``export; sleep``; the real node reaches no registry, so every container
runs the local printenv image instead (tests/support/printenv_image.py: it prints its
environment and waits), and the pods tolerate the real node's taint. Every pod must run on the
real node, and each container must print one ``GPU_DEVICE_*`` variable per device its claim
(or its claim's request) was allocated, with the sharing strategy the claim's opaque config
asks for (time-slicing when none). A table per demo shows what each container printed.

Not run: the demos that need the driver started with other settings (partitionable devices,
multiple allocations, binding conditions, device taints, the CPU and network profiles, an
extended resource name on the class), the admin-access and pod-group ones, and the init
container one (the printenv image's container never exits, which an init container must).

Needs root and the real node's tools (as tests/lab/test_real_node_live.py), the image build's
tools, and Go (the demo files come from the driver's module in Go's module cache); skips
without them, except under CI where it fails.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import printenv_image
import pytest
import yaml
from kubernetes import client
from live_skip import need_real_node_and_image, skip_or_fail
from live_wait import wait_for

from gpufleet.lab import real_node
from gpufleet.lab.binaries import BUILD_SCRIPT, binary
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.real_node import NODE_NAME, TAINT_KEY
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "deploy" / "dra-example-driver"  # its go.mod pins the driver's release
MODULE = "sigs.k8s.io/dra-example-driver"
PLUGIN = "dra-example-kubeletplugin"
DRIVER = "gpu.example.com"
NUM_DEVICES = 8
DEMOS = (
    "basic-resourceclaimtemplate",
    "basic-multiple-requests",
    "basic-shared-claim-across-containers",
    "basic-shared-claim-across-pods",
    "basic-resourceclaim-opaque-config",
    "cel-selector",
    "prioritized-alternatives",
)
SCHEDULERS = ("default-scheduler", "gpufleet")


def _go() -> str | None:
    return shutil.which("go") or (
        "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)


def _module_dir() -> Path:
    """The driver module's source (the version the wrapper's go.mod names), from Go's module
    cache: the build downloaded it, so this reads the cache."""
    go = _go()
    if go is None:
        skip_or_fail("the example driver's demo files come from Go's module cache: needs go")
    out = subprocess.run([str(go), "mod", "download", "-json", MODULE], cwd=WRAPPER,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError(f"go mod download {MODULE} failed:\n{out.stdout}{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def demos() -> Path:
    """The driver module's demo/examples."""
    return _module_dir() / "demo" / "examples"


@pytest.fixture(scope="module")
def driver_lab(lab_binaries: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[LabSession]:
    need_real_node_and_image()
    plugin = binary(PLUGIN, lab_binaries)
    if not os.access(plugin, os.X_OK):
        skip_or_fail(f"{plugin} missing: run `bash {BUILD_SCRIPT}`")
    prebuilt = os.environ.get("GPUFLEET_IMAGE_ARCHIVE")
    # a short name: the driver's registration socket lies under the kubelet's root in this
    # directory, and a Unix socket's path has at most 107 bytes
    directory = tmp_path_factory.mktemp("exdrv")
    t0 = time.monotonic()
    try:
        info = up(LabOptions(directory=directory, controller=False, real_node=True,
                             image=Path(prebuilt) if prebuilt else None))
    except BaseException:
        down(directory)
        raise
    proc = None
    try:
        lab = LabSession(info)
        printenv_image.load_into_node(directory)
        kubelet_root = real_node.work_dir(directory) / "kubelet"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "KUBECONFIG": str(info.kubeconfig), "NODE_NAME": NODE_NAME,
               "CDI_ROOT": str(real_node.cdi_dir(directory)),
               "KUBELET_REGISTRAR_DIRECTORY_PATH": str(kubelet_root / "plugins_registry"),
               "KUBELET_PLUGINS_DIRECTORY_PATH": str(kubelet_root / "plugins"),
               "DEVICE_PROFILE": "gpu", "NUM_DEVICES": str(NUM_DEVICES)}
        log_path = directory / "logs" / f"{PLUGIN}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            proc = subprocess.Popen([str(plugin)], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        # the driver's DeviceClass, as its Helm chart (deployments/helm) creates it
        custom = client.CustomObjectsApi(lab.api)
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})

        def published() -> list[Any] | None:
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{PLUGIN} exited {proc.returncode}:\n"
                                     f"{log_path.read_text()}")
            got = custom.list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices",
                field_selector=f"spec.nodeName={NODE_NAME},spec.driver={DRIVER}")["items"]
            return [d for s in got for d in s["spec"].get("devices", [])] or None

        devices = wait_for(f"{PLUGIN}'s ResourceSlice for the real node", published, 120)
        assert sorted(d["name"] for d in devices) == sorted(
            f"gpu-{i}" for i in range(NUM_DEVICES)), devices
        print(f"lab with a real node, the chart and {PLUGIN} up in "
              f"{time.monotonic() - t0:.0f} s")
        yield lab
    finally:
        if proc is not None:
            _stop(proc)
        down(directory)


def _for_lab(docs: list[dict[str, Any]], ns: str, scheduler: str) -> list[dict[str, Any]]:
    """The demo's objects in ``ns`` (its own Namespace left out), its pods scheduled by
    ``scheduler``, tolerating the real node's taint and running the printenv image."""
    out = []
    for doc in copy.deepcopy(docs):
        kind = doc["kind"]
        if kind == "Namespace":
            continue
        assert kind in ("Pod", "ResourceClaim", "ResourceClaimTemplate"), doc
        doc["metadata"]["namespace"] = ns
        if kind == "Pod":
            spec = doc["spec"]
            spec["schedulerName"] = scheduler
            spec["terminationGracePeriodSeconds"] = 0
            spec.setdefault("tolerations", []).append(
                {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
            for c in spec["containers"]:
                c.pop("args", None)
                c.update(image=printenv_image.IMAGE, imagePullPolicy="Never",
                         command=["/printenv"])
        out.append(doc)
    return out


def _scheduled_message(pod: Any) -> str:
    for c in pod.status.conditions or ():
        if c.type == "PodScheduled":
            return f"PodScheduled={c.status} {c.reason or ''}: {c.message or ''}"
    return "no PodScheduled condition"


def _claim(custom: Any, ns: str, pod: Any, ref: str) -> dict[str, Any]:
    """The ResourceClaim behind the pod's claim reference ``ref``."""
    (entry,) = [c for c in pod.spec.resource_claims if c.name == ref]
    name = entry.resource_claim_name or next(
        s.resource_claim_name for s in pod.status.resource_claim_statuses if s.name == ref)
    return dict(custom.get_namespaced_custom_object("resource.k8s.io", "v1", ns,
                                                    "resourceclaims", name))


def _expected(claim: dict[str, Any], request: str | None) -> dict[str, str]:
    """The GPU_DEVICE_* variables the driver's CDI spec gives a container using ``request`` of
    the claim (all of it when None): per device its name, its sharing strategy and the claim's
    UID."""
    allocation = claim["status"]["allocation"]["devices"]
    configs = claim["spec"]["devices"].get("config", [])
    env = {}
    for r in allocation["results"]:
        top = r["request"].split("/")[0]  # a firstAvailable subrequest is "request/sub"
        if r["driver"] != DRIVER or request not in (None, top):
            continue
        sharing: dict[str, Any] = {"strategy": "TimeSlicing"}
        for cfg in configs:
            if top in cfg.get("requests", [top]) and cfg["opaque"]["driver"] == DRIVER:
                sharing = cfg["opaque"]["parameters"]["sharing"]
        var = "GPU_DEVICE_" + r["device"].removeprefix("gpu-").replace("-", "_")
        env[var] = r["device"]
        key = re.sub(r"\W", "_", r["device"]).upper()
        env[f"GPU_DEVICE_{key}_RESOURCE_CLAIM"] = claim["metadata"]["uid"]
        env[f"{var}_SHARING_STRATEGY"] = sharing["strategy"]
        if sharing["strategy"] == "SpacePartitioning":
            count = sharing.get("spacePartitioningConfig", {}).get("partitionCount", 1)
            env[f"{var}_PARTITION_COUNT"] = str(count)
        else:
            interval = sharing.get("timeSlicingConfig", {}).get("interval", "Default")
            env[f"{var}_TIMESLICE_INTERVAL"] = interval
    return env


@pytest.mark.parametrize("demo", DEMOS)
def test_a_demo_runs_under_kube_scheduler_and_gpufleet(driver_lab: LabSession, demos: Path,
                                                       demo: str) -> None:
    lab = driver_lab
    docs = [d for d in yaml.safe_load_all((demos / demo / f"{demo}.yaml").read_text()) if d]
    spaces = {s: lab.namespace(f"{demo[:40]}-{'ks' if s == 'default-scheduler' else 'gf'}")
              for s in SCHEDULERS}
    try:
        for scheduler, ns in spaces.items():
            lab.kubectl("apply", "-f", "-",
                        input=yaml.safe_dump_all(_for_lab(docs, ns, scheduler), sort_keys=False))
        _check(lab, demo, [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"], spaces)
    finally:
        for ns in spaces.values():
            lab.kubectl("delete", "namespace", ns, "--wait=false")
        # the next demo gets the GPUs back: every claim of these namespaces deallocated and gone
        wait_for(f"{demo}'s namespaces deleted",
                 lambda: not [n for n in lab.core.list_namespace().items
                              if n.metadata.name in spaces.values()], 180)


def _check(lab: LabSession, demo: str, names: list[str], spaces: dict[str, str]) -> None:
    """Every pod of the demo Running on the real node under each scheduler, each container
    having printed the env its claims' devices give it; a table of what each printed."""
    custom = client.CustomObjectsApi(lab.api)

    def pods(ns: str) -> list[Any]:
        return list(lab.core.list_namespaced_pod(ns).items)

    def printed(ns: str) -> dict[tuple[str, str], dict[str, str]] | None:
        got = {}
        for p in pods(ns):
            if p.status.phase != "Running":
                return None
            for c in p.spec.containers:
                env = printenv_image.printed_env(lab.core, ns, p.metadata.name, c.name)
                if env is None:
                    return None
                got[(p.metadata.name, c.name)] = env
        return got

    printed_by: dict[str, dict[tuple[str, str], dict[str, str]]] = {}
    refused: dict[str, dict[str, str]] = {}  # per scheduler, per pod not running: why
    t0 = time.monotonic()
    for scheduler, ns in spaces.items():
        try:
            printed_by[scheduler] = wait_for(f"{demo}'s pods Running under {scheduler}",
                                             functools.partial(printed, ns), 120)
        except AssertionError:
            printed_by[scheduler] = {}
            refused[scheduler] = {p.metadata.name: f"{p.status.phase}; {_scheduled_message(p)}"
                                  for p in pods(ns)}
    print(f"\n{demo}: both runs settled in {time.monotonic() - t0:.1f} s")
    print(f"{'scheduler':18} {'pod':5} {'container':10} printed GPU_DEVICE_* env")
    for scheduler in SCHEDULERS:
        for pod_name, why in sorted(refused.get(scheduler, {}).items()):
            print(f"{scheduler:18} {pod_name:5} {'-':10} NOT RUNNING: {why}")
        for (pod_name, ctr), env in sorted(printed_by[scheduler].items()):
            line = " ".join(f"{k}={v}" for k, v in sorted(env.items())
                            if k.startswith("GPU_DEVICE_"))
            print(f"{scheduler:18} {pod_name:5} {ctr:10} {line}")

    for scheduler, ns in spaces.items():
        assert scheduler not in refused, f"{demo} under {scheduler}: {refused[scheduler]}"
        got = printed_by[scheduler]
        running = {p.metadata.name: p for p in pods(ns)}
        assert sorted(running) == sorted(names)
        for name, p in running.items():
            assert p.spec.node_name == NODE_NAME and p.spec.scheduler_name == scheduler
            for c in p.spec.containers:
                want: dict[str, str] = {}
                for ref in c.resources.claims or ():
                    want |= _expected(_claim(custom, ns, p, ref.name), ref.request)
                shown = {k: v for k, v in got[(name, c.name)].items()
                         if k.startswith("GPU_DEVICE_")}
                assert want and shown == want, (demo, scheduler, name, c.name, shown, want)
