"""The same workload gives the same summary in every process, whatever its hash seed.

Python salts ``hash(str)`` per process (``PYTHONHASHSEED``), so the iteration order of a set of
GPU model names — and the ``repr`` of a frozenset of them — differs between processes. Any
decision ordered by such an order (which pending group scale-up serves first, which offer wins a
tie) would give a different fleet, bill and JCT in each process, and so a different summary from
a parallel (worker-process) run than from a serial one. Multi-model requests (a MIG profile
several GPU models offer; ``gpu_models: A|B|C``) are what put several names in one frozenset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpufleet.sim.summary import TIMING


def write_jobs(path: Path) -> None:
    """MIG jobs on several models, multi-model whole-GPU jobs and gangs, competing at once."""
    rows = ["jobs:"]
    for i in range(48):
        submit = 60 * (i // 6)
        dur = 1800 + 131 * i
        kind = i % 6
        if kind == 0:
            spec = "num_gpu: 1, mig_profile: 1g.10gb"
        elif kind == 1:
            spec = "num_gpu: 1, mig_profile: 2g.20gb"
        elif kind == 2:
            spec = "num_gpu: 1, gpu_models: V100-16GB|T4|A10G|L4"
        elif kind == 3:
            spec = "num_gpu: 4, gpu_models: A100-40GB|A100-80GB|H100-80GB"
        elif kind == 4:
            spec = "num_gpu: 8, replicas: 2, gpu_models: A100-80GB|H100-80GB"
        else:
            spec = "num_gpu: 2, gpu_models: L4|T4"
        rows.append(f"  - {{job_id: j{i}, submit_s: {submit}, duration_s: {dur}, {spec}, "
                    "cpu_milli: 2000, memory_mib: 8192}")
    path.write_text("\n".join(rows) + "\n")


def run(trace: Path, scenarios: Path, out: Path, hash_seed: str) -> dict:
    # no shared data (an empty folder): the spot market is the seeded price process, so the
    # test is self-contained and quick; hash order is what it is about, not the market
    empty = out.parent / "no-data"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "GPUFLEET_DATA": str(empty)}
    proc = subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli import main; main()", "simulate",
         "--trace", str(trace), "--scenario", str(scenarios), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "summary.json").read_text())
    return {name: {k: v for k, v in s.items() if k not in TIMING}
            for name, s in data["scenarios"].items()}


def test_summary_is_independent_of_the_hash_seed(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    scenarios = tmp_path / "scenarios.yaml"
    # a node cap makes the groups compete: the ones served first take the last nodes (hash
    # seeds 4 and 5 ordered them differently before groups were sorted by sorted model names)
    scenarios.write_text("scenarios:\n  - {name: capped, max_nodes: 3}\n")
    a = run(trace, scenarios, tmp_path / "a", "4")
    b = run(trace, scenarios, tmp_path / "b", "5")
    assert set(a) == {"static", "capped"}
    assert all(s["jobs_lost"] == 0 for s in a.values())
    assert a == b
