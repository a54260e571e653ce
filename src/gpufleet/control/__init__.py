"""The control layer: every rule a live controller needs as much as the simulator does.

Drivers (``gpufleet.sim.cluster`` and the Kubernetes driver ``gpufleet.k8s``) turn their
world's events into state and call in here; what comes back is data (a request, a queue order,
a Decision) that the driver applies. Nothing here reads a clock or touches the world: the time
is passed in.

* ``cycle``: one scheduling cycle, the pending units (``pending``) in queue order → binds,
  evictions and refusals (backfill, gangs, priority preemption, team quotas and budgets, gang
  room), each unit placed through ``placing``; ``reclaim``: quota reclaim, the room a team's
  work within its quota takes back from other teams' borrowing.
* ``admission``: how a submitted job's request is normalised (MIG, exclusive baseline, spot
  toleration) and what it asks for right now (a job pinned to on-demand drops the toleration).
* ``queue``: the pending queue, its order and the on-demand pin.
* ``deadline`` (with ``deadline_guard``): the deadline controller and its guards, as ``Pin`` and
  ``Preempt`` decisions.
* ``fleet`` (with ``sizing``): a fixed (non-autoscaled) fleet's node groups and sizes;
  ``replacement``: keeping them at size (node replacement, on-demand fallback, spot rebalance).
* ``scan``: when the autoscaler's scan runs and which of its steps (scale-up, disruption) are due;
  ``ConsolidationLook``, when consolidation is computed (both drivers).
* ``offers``: what the fleet could launch now (on-demand zone choice, cheapest spot zone);
  ``views``: what scale-up and disruption see of pending jobs and nodes; ``node_clocks``: which
  nodes are empty or underused and since when; ``limits``: the node cap and consolidation set.
* ``policies``: every policy, strategy and clock built from a scenario's settings, for both
  drivers.

Checkpoint-interval choice lives with the recovery strategies (``gpufleet.recovery.exposure``).
"""
