"""gpufleet's DRA kubelet plugin (``gpufleet node-plugin``), driver ``gpu.gpufleet.io``.

It makes a GPU share real on the node the share was allocated on:

- :mod:`.inventory` reads the node's GPUs (NVML on a GPU node, a device file in the lab);
- :mod:`.slices` publishes them as one ResourceSlice (one multi-allocatable device per GPU, with
  consumable ``memory`` and ``cores`` capacity and the attributes NVIDIA's driver publishes);
- :mod:`.health` follows the GPUs' health (NVML XID events, GPUs gone) and taints the devices of
  unhealthy ones; :mod:`.metrics` and :mod:`.events` report it;
- :mod:`.prepare` turns a claim's allocation into MPS limits, refuses shares that would
  overcommit a GPU, and remembers what it prepared in a checkpoint file;
- :mod:`.mps` runs one MPS control daemon per shared GPU; :mod:`.hami` is the alternative,
  HAMi-core's interception library preloaded into a share's containers (``--hami-core``);
- :mod:`.cdi` writes the CDI spec the container runtime applies (the env the share runs with);
- :mod:`.grpc_services` and :mod:`.registration` serve the kubelet's gRPC APIs (registration,
  DRA, resource health) on their Unix sockets, from stubs :mod:`.protos` generates from the
  kubelet's own ``.proto`` files.

Structured after kubernetes-sigs/dra-example-driver (cmd/dra-example-kubeletplugin). The chart
runs it as a DaemonSet on the nodes of the shared-GPU pool (docs/install.md).
"""

DRIVER = "gpu.gpufleet.io"
# a node's GPU pool: "shared" nodes run this plugin (GPU shares), the others NVIDIA's DRA driver
# (whole GPUs and MIG); the chart's DaemonSet selects the shared ones
POOL_LABEL = "gpufleet.io/gpu-pool"
SHARED_POOL = "shared"
