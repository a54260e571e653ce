"""The chart's CustomResourceDefinitions on the lab, as ``helm install`` creates them cluster-wide.

``charts/gpufleet/crds/`` is the one source: helm installs that folder before the chart's
templates, and ``deploy/kubernetes`` carries a copy of it. ``gpufleet lab up`` creates every CRD
there (GpuQueue today) and waits until the API server reports each one ``Established`` (its REST
endpoint served), so teams can be tried on the lab at once and a controller run against it lists
GpuQueues instead of logging a 404. A CRD already there (a lab started again in its directory)
is replaced by the chart's, so the lab serves the schema of this checkout.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from gpufleet.lab.errors import LabError
from gpufleet.lab.release import CHART

CRD_DIR = CHART / "crds"
KIND = "CustomResourceDefinition"


def chart_crds(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    """Every CRD in ``directory``'s YAML files, in file order; a document of another kind, or
    a folder without any CRD, is an error naming the file."""
    files = sorted(directory.glob("*.yaml")) if directory.is_dir() else []
    if not files:
        raise LabError(f"no CustomResourceDefinitions found in {directory}")
    out: list[dict[str, Any]] = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != KIND:
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                raise LabError(f"{path}: a {kind} among the chart's CRDs; only {KIND}s belong here")
            out.append(doc)
    return out


def _conditions(crd: Any) -> list[Any]:
    return list((crd.status.conditions if crd.status is not None else None) or ())


def _established(crd: Any) -> bool:
    return any(c.type == "Established" and c.status == "True" for c in _conditions(crd))


def install_crds(api_client: Any, crds: list[dict[str, Any]], *, timeout_s: float = 60.0,
                 interval_s: float = 0.05) -> list[str]:
    """Create (or replace) each CRD and wait until every one is Established; their names.

    Established is set by the API server's own apiextensions controllers, usually within a
    fraction of a second; ``timeout_s`` bounds a loaded machine, after which the error names
    the CRDs still waiting and their conditions."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api_client)
    names: list[str] = []
    for body in crds:
        name = body["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise LabError(f"creating CRD {name}: {exc.status} {exc.reason}: "
                               f"{(exc.body or '')[:300]}") from exc
            version = ext.read_custom_resource_definition(name).metadata.resource_version
            ext.replace_custom_resource_definition(
                name, {**body, "metadata": {**body["metadata"], "resourceVersion": version}})
        names.append(name)

    deadline = time.monotonic() + timeout_s
    waiting = list(names)
    while True:
        waiting = [n for n in waiting
                   if not _established(ext.read_custom_resource_definition(n))]
        if not waiting:
            return names
        if time.monotonic() >= deadline:
            shown = "; ".join(
                f"{n}: " + (", ".join(f"{c.type}={c.status} ({c.reason})" for c in
                                      _conditions(ext.read_custom_resource_definition(n)))
                            or "no conditions")
                for n in waiting)
            raise LabError(f"CRD(s) not Established after {timeout_s:.0f} s: {shown}; "
                           "see logs/kube-apiserver.log")
        time.sleep(interval_s)
