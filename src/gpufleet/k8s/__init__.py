"""gpufleet on Kubernetes: Node objects as NVIDIA's device plugin and GFD publish them, and the
scheduler/controller that places GPU pods through the real API server."""
