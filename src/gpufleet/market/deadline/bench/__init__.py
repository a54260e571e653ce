"""The NSDI'24 "Can't Be Late" benchmark: tick simulator, offline optimum, protocol harness.

Benchmark-only code, kept next to the policies it measures (as ``placement/bench`` is for
packing): ``ticksim`` steps jobs through the protocol's tick model, ``optimal`` is the omniscient
dynamic programme, ``protocol`` runs the settings and renders the tables for
``gpufleet bench spot-deadline`` and ``benchmarks/bench_spot_deadline.py``.
"""
