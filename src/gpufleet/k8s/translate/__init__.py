"""API objects → the driver-neutral model: pods → requests, Nodes → FleetState rows, snapshot.

The DRA objects (ResourceSlices, DeviceClasses, ResourceClaims) are :mod:`gpufleet.k8s.dra`'s;
the snapshot lays their view over the pods and nodes read here.
"""
