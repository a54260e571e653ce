"""Every label, annotation and extended-resource name the driver reads or writes, in one place.

What each annotation and label read from a pod means, and which values it takes, is the table
in :mod:`.pod_fields`; what gpufleet writes, and what it reads from other objects, the tables in
:mod:`.api_keys`.

Reads follow the conventions other components already publish: NVIDIA's device plugin
(``nvidia.com/gpu``, ``nvidia.com/mig-<profile>`` in the "mixed" strategy), GPU Feature Discovery
(``nvidia.com/gpu.product`` …), Karpenter's capacity type, the coscheduling plugin's pod-group
label, and KAI scheduler's ``gpu-fraction`` annotation for fractional GPUs. Writes live under
``gpufleet.io/`` so nothing we publish can be mistaken for another component's.
"""

from __future__ import annotations

from gpufleet.control.admission import SPOT_TAINT_KEY

SCHEDULER_NAME = "gpufleet"

# extended resources (device plugin)
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# GPU Feature Discovery node labels
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_MEMORY = "nvidia.com/gpu.memory"  # MiB per GPU
MIG_STRATEGY = "nvidia.com/mig.strategy"
MIG_CONFIG = "nvidia.com/mig.config"
# CUDA the driver supports: GFD >= 0.15 publishes cuda.runtime-version.*, older cuda.runtime.*;
# cuda.driver(-version).* is the *driver* version (535, 550 …), mapped to CUDA by NVIDIA's table.
CUDA_RUNTIME_MAJOR = ("nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime.major")
CUDA_RUNTIME_MINOR = ("nvidia.com/cuda.runtime-version.minor", "nvidia.com/cuda.runtime.minor")
CUDA_DRIVER_MAJOR = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major")

ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# Karpenter's capacity-type label; the spot taint has the same key (control.admission)
CAPACITY_TYPE = SPOT_TAINT_KEY
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"

# fractional GPUs: KAI scheduler's convention (a share of one GPU, "0.5"; optional GPU memory MiB)
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY_REQUEST = "gpu-memory"

# gangs: the coscheduling plugin's pod-group label (new and legacy spelling) and min-available
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io",
                    "pod-group.scheduling.sigs.k8s.io/name")
MIN_AVAILABLE_KEYS = ("scheduling.x-k8s.io/min-available",
                      "pod-group.scheduling.sigs.k8s.io/min-available")

# Karpenter's mark on a pod that must not be moved: consolidation leaves its node alone
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"

# the Job controller's marks on the pods it creates (k8s.translate.pods.requeued_keys)
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_INDEX_IGNORED_FAILURES = "batch.kubernetes.io/job-index-ignored-failure-count"

# what gpufleet's binding writes on a pod with its node (docs/kubernetes.md)
ANN_NODE = "gpufleet.io/node"  # the node the GPU assignment below belongs to
ANN_GPUS = "gpufleet.io/gpus"  # GPU indices on that node, "0,1"
ANN_GPU_MILLI = "gpufleet.io/gpu-milli"  # milli-GPU taken on each of them (1000 = whole)
ANN_MIG = "gpufleet.io/mig"  # MIG instance: "<gpu>:<profile>@<start slice>"

# spot/maintenance interruptions: whoever learns of one first — the node agent from the
# metadata service, or the controller from the provider's event queue — marks the Node with this
# annotation (JSON: kind, deadline, noticed_at, source) and taint; the drain acts on marked Nodes.
ANN_INTERRUPTION = "gpufleet.io/interruption"
INTERRUPTED_TAINT_KEY = "gpufleet.io/interrupted"
INTERRUPTED_TAINT_EFFECT = "NoSchedule"

# live consolidation (k8s.consolidation): the capacity loop marks the Nodes a validated command
# removes with this annotation (JSON: method, started_at) and cordons them; the drain empties
# and terminates them, or the capacity loop removes mark and cordon when the pods cannot move.
ANN_CONSOLIDATION = "gpufleet.io/consolidation"

# live deadlines: a pod's deadline (RFC 3339, with a UTC offset) and, optionally, how long it runs
# (seconds of work, e.g. "3600"); the control layer's deadline guard moves a pod whose slack ran
# out from spot to on-demand (k8s.translate.deadlines, control.deadline.pending_pin)
ANN_DEADLINE = "gpufleet.io/deadline"
ANN_DURATION = "gpufleet.io/duration"
ANN_VALUE_OF_TIME = "gpufleet.io/value-of-time"
ANN_LATENCY_SENSITIVE = "gpufleet.io/latency-sensitive"

# the capacity loop's record of a launch, written before the cloud is asked: a ConfigMap with
# this label set to "true" (k8s.capacity.launch_records)
LAUNCH_RECORD_LABEL = "gpufleet.io/launch-record"

# team queues: a Namespace joins the GpuQueue this label names (k8s.queues)
QUEUE_LABEL = "gpufleet.io/queue"
