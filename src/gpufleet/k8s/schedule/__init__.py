"""The scheduler: the controller loop, one cycle, decisions → API writes, its own telemetry."""
