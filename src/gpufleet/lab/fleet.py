"""Which fake GPU nodes the lab starts with, and creating them through the API.

The default fleet is small and mixed so that every example under ``examples/`` schedules at
once: an 8×A100 node in MIG mode (``all-balanced``: 1g.5gb, 2g.10gb and 3g.20gb devices), two
V100 nodes (one spot) for whole-GPU and gang jobs, and a 4×T4 node for fractional inference. On
the default DRA-only lab the A100 node is in dynamic MIG and the T4 node in the shared-GPU pool
(:func:`default_fleet`).
``--nodes N`` gives N nodes of one default type; ``--nodes FILE`` an openb-style node CSV.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpufleet.catalog.instances import InstanceCatalog, default_instance_catalog
from gpufleet.errors import InputError
from gpufleet.k8s.translate.node_objects import (
    GpuNodeSpec,
    node_object,
    spec_from_instance,
    spec_from_openb,
)
from gpufleet.k8s.watch.connections import release
from gpufleet.k8s.watch.informer import list_all
from gpufleet.lab.errors import LabError
from gpufleet.node_plugin import POOL_LABEL, SHARED_POOL
from gpufleet.traces.openb import load_nodes

# (name, instance type, zone, capacity type, MIG config)
DEFAULT_FLEET: tuple[tuple[str, str, str, str, str | None], ...] = (
    ("a100-mig-0", "p4d.24xlarge", "us-east-1a", "on-demand", "all-balanced"),
    ("v100-0", "p3.8xlarge", "us-east-1b", "spot", None),
    ("v100-1", "p3.16xlarge", "us-east-1b", "on-demand", None),
    ("t4-0", "g4dn.12xlarge", "us-east-1c", "on-demand", None),
)
DEFAULT_NODE_TYPE = "p3.8xlarge"
MAX_COUNT = 5000


def default_fleet(catalog: InstanceCatalog | None = None, dra_only: bool = False
                  ) -> list[GpuNodeSpec]:
    """The default fleet; ``dra_only``: as a cluster running NVIDIA's DRA driver and gpufleet's
    node plugin instead of the device plugin — the A100 node in dynamic MIG (``all-enabled``:
    the driver creates the instance a claim is given) and the T4 node in the shared-GPU pool
    (gpufleet's node plugin publishes its GPUs, so ``gpu-fraction`` pods get shares)."""
    catalog = catalog or default_instance_catalog()
    out = []
    for name, itype, zone, ct, mig in DEFAULT_FLEET:
        if dra_only and mig is not None:
            mig = "all-enabled"
        spec = spec_from_instance(catalog[itype], name, zone=zone, capacity_type=ct,
                                  mig_config=mig)
        if dra_only and name.startswith("t4-"):
            spec = replace(spec, extra_labels={**spec.extra_labels, POOL_LABEL: SHARED_POOL})
        out.append(spec)
    return out


def uniform_fleet(
    count: int, instance_type: str = DEFAULT_NODE_TYPE, catalog: InstanceCatalog | None = None
) -> list[GpuNodeSpec]:
    catalog = catalog or default_instance_catalog()
    it = catalog[instance_type]
    width = max(3, len(str(count - 1)))
    return [spec_from_instance(it, f"node-{i:0{width}d}") for i in range(count)]


def parse_nodes_option(value: str | None) -> list[GpuNodeSpec]:
    """``--nodes``: empty → default fleet, an integer → that many nodes, else an openb CSV."""
    if value is None or value == "":
        return default_fleet()
    if value.isdigit():
        count = int(value)
        if not 0 <= count <= MAX_COUNT:
            raise InputError(f"expected a node count 0..{MAX_COUNT}, got {count}", field="--nodes")
        return uniform_fleet(count)
    path = Path(value)
    if not path.exists():
        raise InputError(
            "not a node count and no such file (expected N or an openb-style node CSV "
            "sn,cpu_milli,memory_mib,gpu,model)",
            path=path,
        )
    return [spec_from_openb(n) for n in load_nodes(path)]


def create_nodes(api_client: Any, specs: Iterable[GpuNodeSpec], workers: int = 8,
                 device_plugin: bool = True) -> list[str]:
    """Create the Node objects (KWOK then marks them Ready); returns their names.
    ``device_plugin=False``: nodes whose GPUs are DRA devices only (no ``nvidia.com/gpu``).

    ``workers`` creates run at once (a fleet of a thousand nodes would otherwise spend tens of
    seconds in round trips); responses are not deserialised into models.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    specs = list(specs)

    def create(spec: GpuNodeSpec) -> str:
        try:
            release(core.create_node(body=node_object(spec, device_plugin=device_plugin),
                                     _preload_content=False))
        except ApiException as exc:
            if exc.status != 409:  # already there: a restarted lab keeps its nodes
                raise LabError(f"creating node {spec.name}: {exc.status} {exc.reason}") from exc
        return spec.name

    if workers <= 1 or len(specs) <= 1:
        return [create(s) for s in specs]
    with ThreadPoolExecutor(workers, thread_name_prefix="lab-create-node") as pool:
        return list(pool.map(create, specs))


# The node lifecycle controller's taints: it puts them on a new Node and lifts them only after it
# has seen the Node Ready, so a Node can be Ready and still refuse pods for a moment.
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def ready_node_names(api_client: Any, page: int = 500) -> set[str]:
    """Names of the nodes ready for pods: Ready condition True and none of the node lifecycle
    controller's taints left (paged list, raw JSON)."""
    from kubernetes import client

    nodes, _ = list_all(client.CoreV1Api(api_client).list_node, page)
    ready: set[str] = set()
    for n in nodes:
        conds = (n.get("status") or {}).get("conditions") or ()
        taints = (n.get("spec") or {}).get("taints") or ()
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds) and \
                not any(t.get("key") in LIFECYCLE_TAINTS for t in taints):
            ready.add(n["metadata"]["name"])
    return ready


def wait_nodes_ready(api_client: Any, names: Sequence[str], timeout_s: float = 120.0) -> None:
    """Wait until KWOK has marked every named node Ready and the node lifecycle controller has
    lifted its not-ready taint (bounded; names the laggards).

    Polls every 0.25 s, or every second for a fleet of hundreds (each poll lists them all).
    """
    want = set(names)
    poll_s = 0.25 if len(want) < 200 else 1.0
    deadline = time.monotonic() + timeout_s
    while True:
        missing = want - ready_node_names(api_client)
        if not missing:
            return
        if time.monotonic() >= deadline:
            shown = ", ".join(sorted(missing)[:5])
            raise LabError(
                f"kwok: {len(missing)} node(s) not Ready after {timeout_s:.0f} s ({shown}); "
                "see logs/kwok.log"
            )
        time.sleep(poll_s)
