"""gpufleet: make rented GPU compute cheap and busy.

One pure policy core (placement, queueing, provisioning, market, recovery) read by two drivers:
the discrete-event simulator (`gpufleet.sim`) and the live controller. See ../shared/DESIGN.md.
"""

__version__ = "0.1.0"
