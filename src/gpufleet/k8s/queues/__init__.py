"""Team queues on a live cluster: the ``GpuQueue`` custom resource and what the controller does
with it (docs/teams.md, "Live: GpuQueue")."""
