"""gpufleet on Kubernetes: a second scheduler (``spec.schedulerName: gpufleet``).

Node objects as NVIDIA's device plugin and GFD publish them (``node_objects``), and the
scheduler/controller that list+watches Pods and Nodes, turns them into the same
:class:`~gpufleet.state.FleetState` the simulator builds, runs the shared policies and applies
their decisions through the real API server (``pods/binding``, the Eviction API, pod status and
Events). See ``docs/kubernetes.md``.
"""
