"""Dynamic Resource Allocation (``resource.k8s.io/v1``) for the driver: slices, claims, shares.

How the Kubernetes driver reads and writes GPUs given out through ResourceSlices, DeviceClasses
and ResourceClaims.

No API calls here, as in :mod:`gpufleet.k8s.translate` beside it: the API's JSON in, data out
(and the claim assume cache, fed the objects written). The writes themselves are
:mod:`gpufleet.k8s.schedule.claim_writes`; the informers, :mod:`gpufleet.k8s.schedule.controller`.

* :mod:`.slices` — a GPU node's ResourceSlices as NVIDIA's DRA driver publishes them (the lab
  and kwok nodes publish them from here), the DeviceClasses, and back: the node's GPU inventory
  read from its slices;
* :mod:`.devices` — each node's published devices against the FleetState row's GPU indices,
  both ways (device name → index and MIG slot; index → device to write into an allocation);
* :mod:`.claims` — ResourceClaims read as a pod's GPU request, an allocated claim read as the
  GPUs it holds, and a plan's ``Bind`` written back as ``status.allocation``;
* :mod:`.claim_view` — the allocator's view of one cycle: slices, classes and claims, and what
  they mean for each pod (its ask, the nodes its selectors admit, or the node it is pinned to);
* :mod:`.claim_assume` — this replica's own claim writes, held over the claims informer until
  it shows them (kube-scheduler's claim assume cache);
* :mod:`.extended_claims` — ``nvidia.com/gpu`` requests a DeviceClass maps (KEP-5004) and the
  claim kube-scheduler and gpufleet create for them;
* :mod:`.shares` — a ``gpu-fraction`` pod's share of one GPU as a claim: the templates and the
  MutatingAdmissionPolicy that adds it at admission;
* :mod:`.claim_devices` — devices allocated by claims judged against the slices (double
  booking, capacity, counters), the device half of the over-commit check;
* :mod:`.cel` — the CEL device selectors of DeviceClasses and claims, evaluated against a
  published device the way kube-scheduler's allocator does.
"""
