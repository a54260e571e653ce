"""A ``gpu-fraction`` pod's share of one GPU as a DRA claim, added at admission.

A pod asks a share of one GPU with KAI's annotation ``gpu-fraction: "0.25"``
(:mod:`gpufleet.k8s.translate.pods`). With Dynamic Resource Allocation the share must be a
ResourceClaim — a request on a device of gpufleet's node plugin (``gpu.gpufleet.io``, the
DeviceClass :data:`SHARE_CLASS` ``share.gpu.gpufleet.io``: one shareable device per GPU with
``memory`` and ``cores`` capacity, docs/node-plugin.md) asking fraction × the device's memory and
fraction × 100 % of its SMs, which the plugin makes MPS limits on the node — and
``spec.resourceClaims`` cannot
change after the pod is created. So a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA
in Kubernetes 1.36; CEL in the API server, no webhook server) adds it at creation:

* **Templates, one per shipped share.** A template cannot say "a quarter of whatever GPU you
  get", only absolute capacities; so each template is one request with a prioritized list
  (``firstAvailable``, GA) of one subrequest per GPU memory size in the catalog (12Gi … 141Gi,
  7 sizes; the API allows 8): the subrequest selects shareable devices of exactly that memory
  and asks ``memory: ceil(milli × size / 1000)`` MiB and ``cores: floor(milli / 10)`` percent
  (:func:`share_cores`). Whichever GPU the scheduler picks, exactly
  one subrequest fits it. Shipped shares (:data:`SHARE_MILLIS`): every 0.05 and every eighth,
  24 templates named ``gpu-share-<milli>`` (``gpu-share-250``). ResourceClaimTemplates are
  namespaced: install them in each namespace whose pods use fractions.
* **The policy** matches pods on CREATE with a ``gpu-fraction`` in (0, 1] and no claims yet,
  rounds the fraction up to the next shipped share (and writes that share back into the
  annotation, so gpufleet's placement and the claim agree on the amount), and adds
  ``spec.resourceClaims: [{name: gpu-share, resourceClaimTemplateName: gpu-share-<milli>}]``
  plus ``resources.claims: [{name: gpu-share}]`` to every container. Its binding selects the
  namespaces labelled :data:`NAMESPACE_LABEL` (``deploy/dra``) or named in the chart's values:
  a pod elsewhere, or without the annotation, is left as it was.

Shared-GPU nodes run gpufleet's node plugin; whole-GPU and MIG nodes keep NVIDIA's driver
(docs/install.md). The templates select the plugin's devices by the catalog's memory sizes.

``deploy/dra/gpu-share-*.yaml`` (the DeviceClass with the policy) and the chart's ``files/`` are
these functions' output (a unit
test keeps them equal).
"""

from __future__ import annotations

from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.k8s.dra.slices import API_VERSION, GPUFLEET_DRIVER
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.pod_fields import FRACTION_PATTERN

ADMISSION_API = "admissionregistration.k8s.io/v1"
POLICY_NAME = "gpufleet-gpu-fraction"
CLAIM_NAME = "gpu-share"  # the pod's name for its share claim
# the DeviceClass of shared GPUs: the devices gpufleet's node plugin publishes
SHARE_CLASS = "share.gpu.gpufleet.io"
CORES = 100  # the node plugin's ``cores`` capacity: percent of the GPU's SMs
TEMPLATE_PREFIX = "gpu-share-"
NAMESPACE_LABEL = ("gpufleet.io/gpu-shares", "enabled")
# every 0.05 and every eighth of a GPU
SHARE_MILLIS = tuple(sorted({*range(50, 1001, 50), 125, 375, 625, 875}))


def fraction_text(milli: int) -> str:
    """250 → ``0.25``, 1000 → ``1``: the annotation value of a shipped share."""
    return f"{milli / 1000:g}"


def _mib_text(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def memory_sizes(catalog: GpuCatalog | None = None) -> list[int]:
    """The catalog's distinct GPU memory sizes (MiB), smallest first."""
    catalog = catalog or default_gpu_catalog()
    return sorted({m.memory_mib for m in catalog.models.values()})


def share_cores(milli: int) -> int:
    """The SM percentage a share of ``milli``/1000 asks: rounded down (at least 1), so shares
    that sum to at most one GPU never ask more than 100 % between them (eight 0.125 shares ask
    12 % each)."""
    return max(1, milli * CORES // 1000)


def share_device_class() -> dict[str, Any]:
    """The DeviceClass :data:`SHARE_CLASS`: every device of gpufleet's node plugin
    (``gpu.gpufleet.io``), a GPU several claims may share. A claim on it without capacity
    requests takes a whole GPU (the plugin's request policy defaults to all of it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": SHARE_CLASS, "labels": {"app.kubernetes.io/part-of": "gpufleet"}},
        "spec": {"selectors": [{"cel": {"expression":
                                        f"device.driver == '{GPUFLEET_DRIVER}'"}}]},
    }


def share_claim_template(milli: int, catalog: GpuCatalog | None = None) -> dict[str, Any]:
    """The ResourceClaimTemplate for ``milli``/1000 of one GPU (no namespace: install it into
    each namespace that uses fractions)."""
    subrequests = []
    for mib in memory_sizes(catalog):
        size = _mib_text(mib)
        subrequests.append({
            "name": f"gpu-{size.lower()}",
            "deviceClassName": SHARE_CLASS,
            "selectors": [{"cel": {"expression": (
                "device.allowMultipleAllocations == true && "
                f"device.capacity['{GPUFLEET_DRIVER}'].memory.compareTo(quantity('{size}')) == 0"
            )}}],
            "capacity": {"requests": {"memory": _mib_text(-(-milli * mib // 1000)),
                                      "cores": str(share_cores(milli))}},
        })
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{TEMPLATE_PREFIX}{milli}",
                     "labels": {"app.kubernetes.io/part-of": "gpufleet"}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                                                     "firstAvailable": subrequests}]}}},
    }


def share_claim_templates(catalog: GpuCatalog | None = None) -> list[dict[str, Any]]:
    return [share_claim_template(m, catalog) for m in SHARE_MILLIS]


def fraction_policy() -> dict[str, Any]:
    """The MutatingAdmissionPolicy (without its binding: :func:`fraction_policy_binding`)."""
    ann = f"object.metadata.annotations['{names.GPU_FRACTION}']"
    millis = ", ".join(str(m) for m in SHARE_MILLIS)
    texts = ", ".join(f"'{fraction_text(m)}'" for m in SHARE_MILLIS)
    return {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"]}]},
            "matchConditions": [
                {"name": "asks-a-share-of-one-gpu", "expression": (
                    f"has(object.metadata.annotations) && '{names.GPU_FRACTION}' in "
                    f"object.metadata.annotations && {ann}.matches('{FRACTION_PATTERN}') && "
                    f"double({ann}) > 0.0 && double({ann}) <= 1.0")},
                {"name": "has-no-claims", "expression": (
                    "!has(object.spec.resourceClaims) || size(object.spec.resourceClaims) == 0")},
            ],
            "variables": [
                {"name": "shipped", "expression": f"[{millis}]"},
                {"name": "texts", "expression": f"[{texts}]"},
                # the smallest shipped share >= the fraction (a hair of slack for 0.1 * 1000)
                {"name": "milli", "expression": (
                    f"variables.shipped.filter(m, double(m) >= double({ann}) * 1000.0 - 0.001)"
                    "[0]")},
            ],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": (
                    "Object{metadata: Object.metadata{annotations: "
                    f"{{'{names.GPU_FRACTION}': "
                    "variables.texts[variables.shipped.indexOf(variables.milli)]}}, "
                    "spec: Object.spec{"
                    f"resourceClaims: [Object.spec.resourceClaims{{name: '{CLAIM_NAME}', "
                    f"resourceClaimTemplateName: '{TEMPLATE_PREFIX}' + "
                    "string(variables.milli)}], "
                    "containers: object.spec.containers.map(c, Object.spec.containers{"
                    "name: c.name, resources: Object.spec.containers.resources{claims: "
                    f"[Object.spec.containers.resources.claims{{name: '{CLAIM_NAME}'}}]}}}})}}}}"
                )}}],
        },
    }


def fraction_policy_binding(namespace_selector: dict[str, Any] | None = None) -> dict[str, Any]:
    """The policy's binding; by default for the namespaces labelled :data:`NAMESPACE_LABEL`."""
    key, value = NAMESPACE_LABEL
    return {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME, "matchResources": {
            "namespaceSelector": namespace_selector or {"matchLabels": {key: value}}}},
    }


_HEADER = ("# Generated by `python -m gpufleet.k8s.dra.shares` from "
           "gpufleet/k8s/dra/shares.py\n# (a unit test fails when this file and the "
           "code differ). docs/kubernetes.md: \"GPU fractions as claims\".\n")


def manifest_files(catalog: GpuCatalog | None = None) -> dict[str, str]:
    """Repository path → YAML text of every shipped manifest: ``deploy/dra`` (policy with its
    label-selected binding; the templates to apply per namespace) and the chart's ``files/``
    (the policy alone: the chart renders its binding from values)."""
    import yaml

    def dump(docs: list[dict[str, Any]], what: str) -> str:
        return _HEADER + f"# {what}\n" + yaml.safe_dump_all(docs, sort_keys=False)

    key, value = NAMESPACE_LABEL
    templates = dump(share_claim_templates(catalog),
                     "ResourceClaimTemplates for GPU shares, per namespace: "
                     "kubectl apply -n <namespace> -f deploy/dra/gpu-share-templates.yaml")
    return {
        "deploy/dra/gpu-share-policy.yaml": dump(
            [share_device_class(), fraction_policy(), fraction_policy_binding()],
            f"acts in the namespaces labelled {key}={value} (kubectl label namespace <ns> "
            f"{key}={value})"),
        "deploy/dra/gpu-share-templates.yaml": templates,
        "charts/gpufleet/files/gpu-share-policy.yaml": dump(
            [share_device_class(), fraction_policy()], "rendered by templates/80-gpu-shares.yaml"),
        "charts/gpufleet/files/gpu-share-templates.yaml": templates,
    }


if __name__ == "__main__":  # regenerate the files above, from the repository root
    from pathlib import Path

    for path, text in manifest_files().items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        print(path)
