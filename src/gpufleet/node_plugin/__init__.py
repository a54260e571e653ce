"""gpufleet's DRA kubelet plugin (``gpufleet node-plugin``), driver ``gpu.gpufleet.io``.

It makes a GPU share real on the node the share was allocated on:

- :mod:`.inventory` reads the node's GPUs (NVML on a GPU node, a device file in the lab);
- :mod:`.slices` publishes them as one ResourceSlice (one multi-allocatable device per GPU, with
  consumable ``memory`` and ``cores`` capacity);
- :mod:`.prepare` turns a claim's allocation into MPS limits, refuses shares that would
  overcommit a GPU, and remembers what it prepared in a checkpoint file;
- :mod:`.cdi` writes the CDI spec the container runtime applies (the env the share runs with);
- :mod:`.grpc_services` and :mod:`.registration` serve the kubelet's two gRPC APIs on their Unix
  sockets, from stubs :mod:`.protos` generates from the kubelet's own ``.proto`` files.

Structured after kubernetes-sigs/dra-example-driver (cmd/dra-example-kubeletplugin). Not done
yet: starting the MPS control daemon, health (XID) taints, and the chart's DaemonSet
(docs/node-plugin.md).
"""

DRIVER = "gpu.gpufleet.io"
