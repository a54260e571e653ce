"""API objects → the driver-neutral model: pods → requests, Nodes → FleetState rows, snapshot."""
