"""Hostile input files through the real ``gpufleet`` command: exit 2, one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from gpufleet.cli import main; sys.argv[0] = 'gpufleet'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300)


JOBS = "job_id,submit_s,duration_s,num_gpu\nj1,0,600,1\n"
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def philly_fraction(tmp: Path) -> tuple[list[str], str]:
    p = tmp / "philly.csv"
    p.write_text(PHILLY + "2017-10-09 07:01:55,66.0,1,66,c\n2017-10-09 07:02:00,60,2.7,1,c\n")
    return ["simulate", "--trace", str(p)], f"{p}:3: field 'num_gpus'"


def latin1_scenario(tmp: Path) -> tuple[list[str], str]:
    (tmp / "w.csv").write_text(JOBS)
    s = tmp / "s.yaml"
    s.write_bytes(b"name: caf\xe9\n")
    return ["simulate", "--trace", str(tmp / "w.csv"), "--scenario", str(s)], f"{s}:1: not UTF-8"


def directory_trace(tmp: Path) -> tuple[list[str], str]:
    return ["simulate", "--trace", str(tmp)], f"{tmp}: is a directory"


def alias_bomb(tmp: Path) -> tuple[list[str], str]:
    (tmp / "w.csv").write_text(JOBS)
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdef", "bcdefg",
                                                                         strict=True)]
    s = tmp / "bomb.yaml"
    s.write_text("\n".join([*lines, "name: [*g, *g, *g, *g, *g, *g, *g, *g, *g]"]) + "\n")
    return (["simulate", "--trace", str(tmp / "w.csv"), "--scenario", str(s)],
            "aliases expand the document")


def never_runnable(tmp: Path) -> tuple[list[str], str]:
    p = tmp / "w.csv"
    p.write_text("job_id,submit_s,duration_s,num_gpu,gpu_memory_mib\nj1,0,600,1,0\nj2,0,60,1,"
                 "200000\n")
    return ["simulate", "--trace", str(p)], f"{p}:3: field 'gpu_memory_mib': job 'j2' can never run"


def infinite_scenario(tmp: Path) -> tuple[list[str], str]:
    (tmp / "w.csv").write_text(JOBS)
    s = tmp / "s.yaml"
    s.write_text("name: a\nscan_interval_s: .inf\n")
    return (["simulate", "--trace", str(tmp / "w.csv"), "--scenario", str(s)],
            f"{s}:1: field 'scan_interval_s'")


def packing_cpu_only_pods(tmp: Path) -> tuple[list[str], str]:
    n = tmp / "n.csv"
    n.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,8,T4\n")
    p = tmp / "p.csv"
    p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1000,0,0\n")
    return (["bench", "packing", "-p", "fgd", "--seeds", "1", "--nodes", str(n), "--pods", str(p)],
            f"{p}: field 'num_gpu': no pod asks for a GPU")


def spot_trace_gap(tmp: Path) -> tuple[list[str], str]:
    t = tmp / "z.json"
    t.write_text('{"metadata": {"gap_seconds": 1e18}, "data": [1, 0, 1]}')
    return ["bench", "spot-deadline", "--trace", str(t)], f"{t}:1: field 'metadata.gap_seconds'"


CASES: list[Callable[[Path], tuple[list[str], str]]] = [
    philly_fraction, latin1_scenario, directory_trace, alias_bomb, never_runnable,
    infinite_scenario, packing_cpu_only_pods, spot_trace_gap,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_bad_file_is_one_line_exit_2(
    tmp_path: Path, case: Callable[[Path], tuple[list[str], str]]
) -> None:
    args, needle = case(tmp_path)
    proc = gpufleet(*args, *(["--out", str(tmp_path / "out")] if args[0] == "simulate" else []))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert proc.stderr.startswith("error: ") and needle in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
