"""What gpufleet writes on API objects and cloud instances, and what it reads from objects other
than pods: two tables.

The annotations and labels read from a *pod* are :data:`.pod_fields.FIELDS` (with their parsers
and refusals); the names themselves are :mod:`.names`. This module lists, as data, every other
key the driver touches, so ``docs/reference/annotations.md`` is rendered from the code
(``python -m gpufleet.reference``) and a key added here is documented by that run:

* :data:`WRITTEN` — each label, annotation, taint, finalizer, status field and cloud tag gpufleet
  writes: on which object, what the value looks like, why, and who reads it back;
* :data:`READ` — each Node label, Namespace label, ResourceSlice attribute and claim field
  gpufleet reads: on which object, what it tells gpufleet, and what happens without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpufleet.cloud.provider import TAG_MANAGED, TAG_MIG_CONFIG, TAG_TOKEN
from gpufleet.k8s.dra.claims import FINALIZER
from gpufleet.k8s.dra.extended_claims import EXTENDED_CLAIM_ANNOTATION
from gpufleet.k8s.dra.shares import NAMESPACE_LABEL
from gpufleet.k8s.dra.slices import ATTR_NVLINK_DOMAIN
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.pods import MIRROR_ANNOTATION

Kind = Literal["annotation", "label", "taint", "finalizer", "field", "attribute", "tag"]


@dataclass(frozen=True, slots=True)
class Written:
    """One key gpufleet writes. ``on``: the object (``Pod``, ``Node``, ``ConfigMap``,
    ``ResourceClaim``, ``cloud instance``); ``value``: what it holds, with an example;
    ``means``: why it is written; ``read_by``: what reads it back."""

    kind: Kind
    key: str
    on: str
    value: str
    means: str
    read_by: str


@dataclass(frozen=True, slots=True)
class Read:
    """One key gpufleet reads from an object other than a pod. ``on``: the object; ``means``:
    what it tells gpufleet; ``absent``: what gpufleet does without it."""

    kind: Kind
    keys: tuple[str, ...]  # every spelling, in lookup order
    on: str
    means: str
    absent: str


WRITTEN: tuple[Written, ...] = (
    Written("annotation", names.ANN_NODE, "Pod",
            "the node's name, written with the binding",
            "the node the GPU assignment below belongs to",
            "the snapshot books a bound pod's GPUs from it (k8s.translate.pods); a pod whose "
            "value differs from its node is booked as one gpufleet did not annotate"),
    Written("annotation", names.ANN_GPUS, "Pod",
            "GPU indices on that node, e.g. \"0,1\" (for a MIG instance, its GPU)",
            "which GPUs of the node the pod holds",
            "the snapshot, the over-commit check (k8s.translate.overcommit)"),
    Written("annotation", names.ANN_GPU_MILLI, "Pod",
            "milli-GPU taken on each of those GPUs, e.g. \"1000\" (whole) or \"250\"; "
            "empty for a MIG instance",
            "how much of each GPU the pod holds: shares of one GPU are packed with others",
            "the snapshot, the over-commit check"),
    Written("annotation", names.ANN_MIG, "Pod",
            "\"<gpu>:<profile>@<start slice>\", e.g. \"0:3g.20gb@4\"; empty when not MIG",
            "the MIG instance the pod holds",
            "the snapshot, the over-commit check"),
    Written("annotation", names.ANN_INTERRUPTION, "Node",
            "JSON {\"kind\", \"deadline\", \"noticed_at\", \"source\"} (epoch seconds)",
            "a spot reclaim or maintenance notice, written by the node agent (metadata "
            "service) or the controller (the provider's event queue), whichever learns first",
            "the drain (k8s.disruption), scale-down (leaves marked Nodes to the drain)"),
    Written("taint", f"{names.INTERRUPTED_TAINT_KEY}:{names.INTERRUPTED_TAINT_EFFECT}", "Node",
            "value: the notice's source (\"agent\", \"aws-sqs\", \"aliyun\", \"kwok\")",
            "no scheduler places new work on a Node about to go",
            "every scheduler (kube-scheduler's taint filter; gpufleet's own)"),
    Written("annotation", names.ANN_CONSOLIDATION, "Node",
            "JSON {\"method\", \"started_at\"}; written with spec.unschedulable: true",
            "a validated consolidation command removes this Node: cordoned, then drained",
            "the drain and termination (k8s.disruption, k8s.capacity.termination); the "
            "capacity loop removes mark and cordon when the pods cannot move"),
    Written("label", names.LAUNCH_RECORD_LABEL, "ConfigMap",
            "\"true\", on gpufleet-launch-<token> in the controller's namespace",
            "a launch, recorded before the cloud is asked for it",
            "the capacity loop after a restart asks again with the same client token "
            "(k8s.capacity.launch_records)"),
    Written("label", TAG_TOKEN, "ConfigMap",
            "the launch's client token, e.g. \"gf-0123456789abcdef\"",
            "which launch record belongs to which instance",
            "the capacity loop (k8s.capacity.launch_records)"),
    Written("tag", TAG_MANAGED, "cloud instance",
            "\"true\"",
            "the instance was launched by gpufleet; the only instances it lists or deletes",
            "the providers' list and delete (gpufleet.cloud; IAM conditions may name it)"),
    Written("tag", TAG_TOKEN, "cloud instance",
            "the launch's client token",
            "a launch asked again after a restart finds the instance it already made",
            "the providers' launch (gpufleet.cloud)"),
    Written("tag", TAG_MIG_CONFIG, "cloud instance",
            "the mig-parted config the instance boots with, e.g. \"all-balanced\"",
            "a booting instance is known to be a MIG node before its Node registers",
            "scale-up (k8s.capacity.scale_up)"),
    Written("finalizer", FINALIZER, "ResourceClaim",
            "added before the allocation",
            "the claim is not deleted while allocated (kube-scheduler's PreBind does the same)",
            "the controller-manager's claim controller, which removes it when deallocating"),
    Written("field", "status.allocation", "ResourceClaim",
            "the devices chosen (request, driver, pool, device; shareID and consumedCapacity "
            "for a share), the configs, and the node as nodeSelector",
            "gpufleet's choice of devices, written before the pod is bound",
            "the kubelet's DRA driver; every scheduler's bookkeeping (k8s.dra.claims)"),
    Written("field", "status.reservedFor", "ResourceClaim",
            "the pod (resource, name, uid)",
            "the pod may use the claim's devices (the kubelet refuses it otherwise)",
            "the kubelet; the claim controller drops it when the pod is gone"),
    Written("annotation", EXTENDED_CLAIM_ANNOTATION, "ResourceClaim",
            "\"true\", on the claim gpufleet creates for a pod's nvidia.com/gpu served by a "
            "DeviceClass",
            "the claim stands for the pod's extended resources (KEP-5004)",
            "the kubelet, kube-scheduler, gpufleet's snapshot (k8s.dra.extended_claims)"),
    Written("field", "status.extendedResourceClaimStatus", "Pod",
            "the request mappings of that claim",
            "which container's extended resource each request of the claim serves",
            "the kubelet; the over-commit check"),
    Written("field", "status.conditions[PodScheduled]", "Pod",
            "status \"False\", reason \"Unschedulable\", the reason as message (with a "
            "FailedScheduling Warning Event when it changes)",
            "why a pending pod is not bound: a refusal of pod_fields, no room, a gang waiting",
            "users (kubectl describe pod); gpufleet, to write it only when it changes"),
)

READ: tuple[Read, ...] = (
    Read("label", (names.GPU_PRODUCT,), "Node",
         "the GPU model: GFD's product name, resolved through the catalog's aliases (an "
         "unknown one is kept as written, so a pod can still ask for it)",
         "no GPU model: only pods that name no model fit its GPUs"),
    Read("label", (names.GPU_COUNT,), "Node",
         "every physical GPU, MIG-enabled ones included: on a MIG node the MIG GPUs are the "
         "count less the whole-GPU resource",
         "on a MIG node, one MIG GPU"),
    Read("label", (names.GPU_MEMORY,), "Node",
         "MiB per GPU", "the catalog's memory for the model"),
    Read("label", (names.MIG_CONFIG,), "Node",
         "the mig-parted config applied: all-* puts every GPU in MIG mode",
         "the MIG GPUs are the count less the whole-GPU resource"),
    Read("label", names.CUDA_RUNTIME_MAJOR + names.CUDA_RUNTIME_MINOR, "Node",
         "the CUDA version the driver supports (a pod's minimum CUDA is matched against it)",
         "the driver version below, mapped to CUDA; without either, a current CUDA (12.4)"),
    Read("label", names.CUDA_DRIVER_MAJOR, "Node",
         "the kernel driver's major version, mapped to CUDA by NVIDIA's table",
         "a current CUDA (12.4)"),
    Read("label", (names.ZONE,), "Node", "the zone (prices, spread, node selection)",
         "no zone"),
    Read("label", (names.INSTANCE_TYPE,), "Node", "the instance type (prices, cost)",
         "no instance type: no price"),
    Read("label", (names.CAPACITY_TYPE,), "Node",
         "\"spot\" or \"on-demand\" (Karpenter's label; the spot taint has the same key)",
         "on-demand"),
    Read("label", (TAG_MANAGED,), "Node",
         "\"true\": gpufleet launched the Node's instance (the cloud's tag as a label)",
         "scale-down never removes the Node"),
    Read("annotation", (names.ANN_INTERRUPTION, names.ANN_CONSOLIDATION), "Node",
         "gpufleet's own marks, read back after a restart (see the written table)",
         "the Node is not being drained"),
    Read("annotation", (MIRROR_ANNOTATION,), "Pod",
         "present: a mirror pod of a static pod (the kubelet owns it): a drain neither "
         "evicts it nor waits for it",
         "an ordinary pod"),
    Read("label", (names.QUEUE_LABEL,), "Namespace",
         "the GpuQueue whose quota and budget the namespace's pods count against",
         "the pods belong to no queue: admitted without quota"),
    Read("label", (NAMESPACE_LABEL[0],), "Namespace",
         f"\"{NAMESPACE_LABEL[1]}\": the MutatingAdmissionPolicy gpufleet ships turns a pod's "
         f"{names.GPU_FRACTION} into a DRA claim (k8s.dra.shares)",
         "the pod's share stays an annotation"),
    Read("attribute", (ATTR_NVLINK_DOMAIN,), "ResourceSlice device",
         "the NVLink domain of a GPU (an int, the same on every GPU of one domain)",
         "PCIe only: no NVLink island among the node's GPUs"),
    Read("field", ("spec.resourceClaims", "status.resourceClaimStatuses"), "Pod",
         "the pod's claims, by name or through a template's generated claim",
         "the pod asks its GPUs as extended resources or annotations"),
    Read("field", ("spec.devices.requests",), "ResourceClaim",
         "exactly (class, count, capacity) or a firstAvailable list of shares; the class's "
         "and the request's CEL selectors: driver, type, profile and productName equality "
         "read by placement, any other CEL evaluated per device as kube-scheduler does",
         "a claim without a GPU request does not change the pod's GPUs"),
    Read("field", ("status.allocation", "status.reservedFor"), "ResourceClaim",
         "devices given out by any scheduler: booked on the GPUs they name",
         "the claim is unallocated: gpufleet may allocate it"),
)
