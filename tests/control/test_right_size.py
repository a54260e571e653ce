"""``control.right_size``: which pods are capped and at what node size (hand-worked cases),
and the simulator keeping a long job without checkpoints off a node it would strand."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.control.right_size import node_gpu_cap, pins_node, replica_gpus, rows_within
from gpufleet.state import FleetState, ResourceRequest

H = 3600.0


@pytest.mark.parametrize(("checkpoints", "replicas", "left_s", "unneeded_s", "want"), [
    (False, 1, 72 * H, 600.0, True),  # the docstring's job: no checkpoints, 72 h left
    (True, 1, 72 * H, 600.0, False),  # consolidation can move it
    (True, 4, 72 * H, 600.0, True),  # a gang's replica is never moved
    (False, 1, 600.0, 600.0, False),  # ends by the time an idle node would be removed
    (False, 1, 601.0, 600.0, True),
])
def test_pins_node(checkpoints: bool, replicas: int, left_s: float, unneeded_s: float,
                   want: bool) -> None:
    assert pins_node(checkpoints, replicas, left_s, unneeded_s) is want


def req(num_gpu: int, milli: int = 1000, mig: str | None = None) -> ResourceRequest:
    return ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=num_gpu, gpu_milli=milli,
                           mig_profile=mig)


@pytest.mark.parametrize(("r", "sizes", "want"), [
    (req(1), (1, 4, 8), 2),  # max(2 × 1, 1): p3.2xlarge only
    (req(2), (4, 8), 4),  # max(4, 4)
    (req(4), (4, 8), 8),  # max(8, 4): half a p3.16xlarge may sit behind it
    (req(1), (8,), 8),  # only 8-GPU nodes fit (an A100 job): not refused everything
    (req(1, milli=400), (1, 8), 2),  # a fraction occupies one GPU
    (req(1, mig="1g.5gb"), (8,), 8),
    (req(0), (1, 8), None),  # a CPU pod strands no GPU
    (req(1), (), None),  # nothing fits: feasibility's business, not this rule's
])
def test_node_gpu_cap(r: ResourceRequest, sizes: tuple[int, ...], want: int | None) -> None:
    assert node_gpu_cap(r, sizes) == want


def test_replica_gpus_and_rows_within() -> None:
    assert [replica_gpus(req(n)) for n in (0, 1, 3)] == [0, 1, 3]
    s = FleetState()
    for name, g in (("a", 8), ("b", 1), ("c", 4)):
        s.add_node(name, gpu_model="V100-16GB", num_gpus=g, cpu_milli=8000, memory_mib=65536,
                   gpu_memory_mib=16384)
    assert rows_within(s, 2).tolist() == [False, True, False]
    assert rows_within(s, 4).tolist() == [False, True, True]
    assert np.all(rows_within(s, 8))


def test_simulator_gives_a_long_job_without_checkpoints_a_node_of_its_size() -> None:
    """Two 4-GPU jobs share a fresh p3.16xlarge (cheaper per GPU than two p3.8xlarge at a
    tie, fewer nodes); when one ends, a 1-GPU 10-hour job without checkpoints arrives. Placed
    in the free room it would keep the p3.16xlarge (24.48 $/h) for 10 h; capped at 2 GPUs it
    waits for a p3.2xlarge (3.06 $/h) and the big node goes once the other 4-GPU job ends:
    about 1.2 h × 24.48 + 10 h × 3.06 ≈ $60 instead of ≈ $250."""
    from gpufleet.config import scenarios_named
    from gpufleet.sim.runner import Simulation
    from gpufleet.traces.jobs import JobSpec

    v100 = frozenset({"V100-16GB"})
    four = ResourceRequest(cpu_milli=4000, memory_mib=16384, num_gpu=4, gpu_models=v100)
    one = ResourceRequest(cpu_milli=1000, memory_mib=4096, num_gpu=1, gpu_models=v100)
    jobs = [JobSpec("a", 0.0, H, four, checkpointable=True),
            JobSpec("b", 0.0, 600.0, four, checkpointable=True),
            JobSpec("long", 900.0, 10 * H, one, checkpointable=False)]
    [gf] = scenarios_named(["gpufleet-no-spot"])
    sim = Simulation(gf, seed=0, jobs=jobs)
    seen: dict[str, str] = {}
    bind = sim.sim.life.bind

    def spy(d):  # type: ignore[no-untyped-def]
        seen[d.job_id] = sim.sim.cloud.nodes[d.node].itype.name
        return bind(d)

    sim.sim.life.bind = spy  # type: ignore[method-assign]
    summary = sim.run()
    assert summary["jobs_finished"] == 3
    assert seen["a#0"] == seen["b#0"] == "p3.16xlarge"
    assert seen["long#0"] == "p3.2xlarge"
    assert summary["cost_usd"] < 100
