"""Random clusters for the vector-vs-scalar agreement tests."""

from __future__ import annotations

import numpy as np

from gpufleet.decisions import Bind
from gpufleet.state import FleetState, ResourceRequest

MODELS = [
    ("T4", 2, 104000),
    ("V100-16GB", 8, 96000),
    ("G2", 8, 96000),
    ("P100", 2, 64000),
    ("A10", 1, 128000),
]


def random_cluster(seed: int, nodes: int = 40, fill: int = 120) -> FleetState:
    """A fleet part-filled with random shared and whole-GPU pods (applied through allocate)."""
    rng = np.random.default_rng(seed)
    s = FleetState(max_gpus=8, capacity=nodes)
    for i in range(nodes):
        model, gpus, cpu = MODELS[rng.integers(len(MODELS))]
        doms = [g // 4 for g in range(gpus)] if model == "V100-16GB" else None
        s.add_node(
            f"n{i}",
            gpu_model=model,
            num_gpus=gpus,
            cpu_milli=cpu,
            memory_mib=1 << 19,
            nvlink_domains=doms,
        )
    for j in range(fill):
        row = int(rng.integers(nodes))
        free = s.free_milli[row]
        if rng.random() < 0.6:
            g = int(rng.integers(s.num_gpus[row]))
            milli = int(rng.choice([100, 250, 460, 500, 810]))
            if free[g] >= milli and s.cpu_free[row] >= 2000:
                req = ResourceRequest(cpu_milli=2000, num_gpu=1, gpu_milli=milli)
                s.allocate(req, Bind(f"j{j}", f"n{row}", (g,), milli))
        else:
            idle = np.flatnonzero(free == 1000)[: int(rng.choice([1, 2, 4]))]
            if len(idle) and s.cpu_free[row] >= 4000:
                req = ResourceRequest(cpu_milli=4000, num_gpu=len(idle))
                s.allocate(req, Bind(f"j{j}", f"n{row}", tuple(int(g) for g in idle)))
    return s


REQUESTS = [
    ResourceRequest(cpu_milli=0),
    ResourceRequest(cpu_milli=6000, memory_mib=1024),
    ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_milli=250),
    ResourceRequest(cpu_milli=8000, num_gpu=1, gpu_milli=810),
    ResourceRequest(cpu_milli=12000, num_gpu=1),
    ResourceRequest(cpu_milli=16000, num_gpu=2),
    ResourceRequest(cpu_milli=32000, num_gpu=4, gpu_models=frozenset({"V100-16GB", "G2"})),
    ResourceRequest(cpu_milli=64000, num_gpu=8),
]
