"""Multi-node consolidation in the driver, hand-worked end to end."""

from __future__ import annotations

import pytest

from gpufleet.config import default_scenario
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec


def run(multi: bool) -> Simulation:
    # three 10-h jobs of 1 V100 + 20 vCPU, 400 s apart: each waits 60 s (below the 2-GPU
    # trigger) and gets its own p3.8xlarge (4 GPUs, 32 vCPU, 12.24 $/h) — the previous node has
    # only 12 vCPU left, which also rules out single-node consolidation
    req = ResourceRequest(cpu_milli=20000, memory_mib=12288, num_gpu=1,
                          gpu_models=frozenset({"V100-16GB"}))
    jobs = [JobSpec(f"h{i}", i * 400.0, 10 * 3600.0, req) for i in range(3)]
    sc = default_scenario().model_copy(
        update={"spot": False, "gpu_mtbf_hours": None, "multi_node_consolidation": multi})
    sim = Simulation(sc, 0, jobs)
    sim.run()
    return sim


def test_three_underused_nodes_become_one_cheaper_node() -> None:
    """Nodes ready at 240, 640, 1040 s; the third is under-used for 600 s at 1640 s: all three
    (36.72 $/h) are replaced by one p3.16xlarge (24.48 $/h, 64 vCPU fits 3 × 20). The pods
    checkpoint at the preemption (30 s), the node ends at 1670 s; the replacement is ready at
    1820 s and each job resumes with 120 s restart overhead: h0 did 1,400 s of work, so it
    finishes at 1820 + 120 + 34,600 = 36,540 s."""
    sim = run(True)
    s = sim.summary()
    nodes = sorted(sim.sim.cloud.nodes.values(), key=lambda n: n.launched_s)
    assert [n.itype.name for n in nodes] == ["p3.8xlarge"] * 3 + ["p3.16xlarge"]
    assert [n.ended_s for n in nodes[:3]] == [1670.0] * 3
    assert (nodes[3].launched_s, nodes[3].ready_s) == (1640.0, 1820.0)
    assert s["consolidation_replacements"] == 1 and s["consolidation_moves"] == 3
    finish = {j.spec.job_id: j.finish_s for j in sim.sim.jobs}
    assert finish == {"h0": 36540.0, "h1": 36940.0, "h2": 37340.0}
    assert all(j.lost_work_s == 0.0 for j in sim.sim.jobs)
    bill = (1610 + 1210 + 810) * 12.24 / 3600 + (37340 - 1640) * 24.48 / 3600
    assert s["cost_usd"] == pytest.approx(bill, abs=1e-3)
    # without it the three nodes run to the end: about 45 % more
    assert run(False).summary()["cost_usd"] > 1.4 * s["cost_usd"]
