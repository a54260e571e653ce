"""Fleet simulator: discrete-event replay of a workload on a simulated cloud (docs/simulator.md).

``gpufleet.sim.runner.Simulation`` is the entry point other tools use; ``gpufleet simulate`` is
the command.
"""
