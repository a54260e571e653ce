"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the Kubernetes driver reads it.

:mod:`.cel` evaluates the CEL device selectors of DeviceClasses and ResourceClaims against a
published device the way kube-scheduler's allocator does.
"""
