"""The lab's DRA inventory against the real API server: NVIDIA's DeviceClasses installed, every
GPU node's ResourceSlices accepted as published (the v1 schema and its validation are the real
ones), read back into the same inventory as the node's labels, and garbage-collected with the
Node. ``--classic`` publishes none of it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.dra.slices import (
    device_classes,
    inventory_from_slices,
    inventory_of_node_spec,
    nvlink_domains_for,
    resource_slices,
)
from gpufleet.k8s.translate.node_objects import spec_from_instance
from gpufleet.k8s.translate.nodes import node_spec
from gpufleet.lab.binaries import binary
from gpufleet.lab.fleet import default_fleet
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live
G, V = "resource.k8s.io", "v1"


def slices_of(lab: LabSession, node: str) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(lab.api)
    resp = custom.list_cluster_custom_object(
        G, V, "resourceslices", field_selector=f"spec.nodeName={node}", _preload_content=False)
    return json.loads(resp.data)["items"]


def _devices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices") or ()]


def test_device_classes_installed(lab: LabSession) -> None:
    custom = client.CustomObjectsApi(lab.api)
    for want in device_classes():
        got = custom.get_cluster_custom_object(G, V, "deviceclasses", want["metadata"]["name"])
        assert got["spec"]["selectors"] == want["spec"]["selectors"]
        assert got["spec"].get("extendedResourceName") == want["spec"].get("extendedResourceName")


def test_every_default_gpu_node_has_its_slices_as_published(lab: LabSession) -> None:
    for spec in default_fleet():
        node = lab.core.read_node(spec.name, _preload_content=False)
        node = json.loads(node.data)
        served = slices_of(lab, spec.name)
        want = resource_slices(spec, node_uid=node["metadata"]["uid"],
                               nvlink_domains=nvlink_domains_for(spec))
        assert sorted(s["metadata"]["name"] for s in served) == sorted(
            s["metadata"]["name"] for s in want)
        # the API server kept every field: counters, capacities, attributes (no gate dropped one)
        by_name = {s["metadata"]["name"]: s for s in served}
        for w in want:
            got = by_name[w["metadata"]["name"]]
            assert got["spec"] == w["spec"], w["metadata"]["name"]
            assert got["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        n_mig = sum(1 for d in _devices(served) if d["attributes"]["type"]["string"] == "mig")
        if spec.mig_config:
            assert n_mig == 32 and len(_devices(served)) == 32  # 8 × (2×1g + 2g + 3g)
        else:
            assert n_mig == 0 and len(_devices(served)) == spec.gpus
        got = inventory_from_slices(served)
        assert got.problems == ()
        assert got.inventory is not None
        assert replace(got.inventory, nvlink_domains=()) == inventory_of_node_spec(
            node_spec(node))


def test_api_server_validates_slices(lab: LabSession) -> None:
    """The schema is the real one: a slice with devices and counter sets together, or nine
    counter sets, is refused."""
    spec = spec_from_instance(default_instance_catalog()["p4d.24xlarge"], "not-a-node",
                              mig_config="all-enabled")
    counters, devices = resource_slices(spec)[:2]
    both = dict(counters, spec={**counters["spec"], "devices": devices["spec"]["devices"][:2]})
    nine = dict(counters, spec={**counters["spec"], "sharedCounters": [
        {**counters["spec"]["sharedCounters"][0], "name": f"set-{i}"} for i in range(9)]})
    custom = client.CustomObjectsApi(lab.api)
    for body in (both, nine):
        with pytest.raises(ApiException) as err:
            custom.create_cluster_custom_object(G, V, "resourceslices", body, dry_run="All")
        assert err.value.status == 422


def test_added_node_gets_slices_and_they_go_with_it(lab: LabSession) -> None:
    (name,) = lab.add_instance_nodes("p4d.24xlarge", 1, prefix="dra-gc", mig_config="all-enabled")
    served = slices_of(lab, name)
    # dynamic MIG: one counter slice, 152 devices (8 whole GPUs + 8 × 18 placements) in 64/64/24
    assert sorted(len(s["spec"].get("devices") or ()) for s in served) == [0, 24, 64, 64]
    inv = inventory_from_slices(served).inventory
    assert inv is not None and inv.num_gpus == 8 and inv.nvlink_domains == (0,) * 8
    lab.core.delete_node(name)
    wait_for(f"the garbage collector to delete {name}'s slices",
             lambda: not slices_of(lab, name))


def test_classic_lab_publishes_no_slices(lab_binaries: Path, tmp_path: Path) -> None:
    d = tmp_path / "classic"
    up = subprocess.run(
        [sys.executable, "-m", "gpufleet", "lab", "up", "--dir", str(d), "--classic",
         "--no-controller", "--nodes", "1"],
        capture_output=True, text=True, timeout=300,
    )
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert "DRA inventory: off (--classic)" in up.stdout
        kc = up.stdout.strip().splitlines()[-1]
        out = subprocess.run(
            [str(binary("kubectl")), f"--kubeconfig={kc}", "get", "resourceslices,deviceclasses",
             "-o", "json"], capture_output=True, text=True, check=True, timeout=60,
        ).stdout
        assert json.loads(out)["items"] == []
    finally:
        subprocess.run([sys.executable, "-m", "gpufleet", "lab", "down", "--dir", str(d)],
                       capture_output=True, timeout=120)
