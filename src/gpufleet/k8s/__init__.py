"""The Kubernetes driver: gpufleet as a second scheduler (``spec.schedulerName: gpufleet``).

It list+watches Pods and Nodes, turns them into the same :class:`~gpufleet.state.FleetState` the
simulator builds, runs the shared policies and applies their decisions through the API server
(``pods/binding``, the Eviction API, pod status and Events). See ``docs/kubernetes.md``.
"""
