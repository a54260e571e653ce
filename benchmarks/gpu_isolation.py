"""Two MPS shares of one GPU, as ``gpufleet node-plugin`` prepares them, on a real GPU node.

What a pod on the shared pool gets is the environment of its claim's CDI spec: the GPU by UUID,
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``. This script
checks that those limits hold under an MPS control daemon:

1. GPU 0 from NVML (``gpufleet.node_plugin.inventory.nvml_gpus``, as the plugin reads it);
2. two claims of ``--fraction`` (default 0.5) of it, allocated as the scheduler writes them
   (``consumedCapacity``: fraction × its published memory, rounded down to whole MiB, and
   fraction × 100 cores), prepared by the plugin's own
   :class:`~gpufleet.node_plugin.prepare.Preparer` into a temporary CDI directory (its per-GPU
   sum check, its limit computation, its CDI spec); each client's environment is its claim's
   CDI spec's;
3. the GPU's MPS control daemon, started by the plugin's own
   :class:`~gpufleet.node_plugin.mps.MpsManager` when the first share is prepared (its pipe
   directory is in each claim's environment), under a temporary directory, so it does not meet
   a daemon the node already runs;
4. client A allocates ``--working-set`` (default 0.5) of its memory limit and runs a timed
   matrix-multiply loop; once A is running, client B allocates 256 MiB blocks until the
   allocation fails, which must be an out-of-memory error at or below its limit while A keeps
   running, then frees them and runs the same loop; both loops end ``--seconds`` (default 20)
   after A's started;
5. both claims are unprepared, which tells the daemon to quit (``echo quit``; killed if it is
   still there), also on error.

Reported: each share's limits as the plugin computed them, what each client saw (the device
memory the CUDA runtime reports under MPS, what it allocated, the error), and each client's
throughput (matmul iterations/s, TFLOP/s); ``--output`` writes the same as JSON. Exit status 0
when the isolation held (B refused past its limit, A unharmed), 1 when not, 2 when this machine
cannot run it (no NVIDIA GPU / NVML, no ``nvidia-cuda-mps-control``, no CUDA Python package):
one line says why.

Needs: the NVIDIA driver (NVML, ``nvidia-smi``), ``nvidia-cuda-mps-control`` (the driver's
compute utilities) and, in this Python, ``cupy`` or ``torch`` with CUDA. A Volta or later GPU
(MPS's per-client memory limit and thread percentage).

Usage::

    .venv/bin/python benchmarks/gpu_isolation.py [--fraction 0.5] [--seconds 20]
        [--working-set 0.5] [--matrix 4096] [--output isolation.json]
        [--format table|json|csv|markdown]

Not part of ``make bench`` (it needs a GPU node); tests/benchmarks/test_gpu_isolation.py runs it
where ``nvidia-smi -L`` works.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from gpufleet.node_plugin import DRIVER, cdi, mps
from gpufleet.node_plugin.inventory import Gpu, InventoryError, nvml_gpus
from gpufleet.node_plugin.mps import MpsManager
from gpufleet.node_plugin.prepare import Preparer
from gpufleet.tables import DataTable, OutputFormat, print_tables

BLOCK_MIB = 256  # client B's allocation step
NODE = "gpu-isolation"


class CannotRun(RuntimeError):
    """This machine cannot run the check (exit status 2); the message says why."""


@dataclass(frozen=True)
class ShareEnv:
    """One prepared share: the limits the plugin computed and its claim's CDI environment."""

    claim: str
    memory_mib: int
    cores: int
    env: dict[str, str]


def consumed(gpu: Gpu, fraction: float) -> dict[str, str]:
    """The ``consumedCapacity`` the scheduler writes for ``fraction`` of ``gpu``: of the memory
    its slice publishes (the catalog's size), whole MiB rounded down, and whole cores; the
    plugin scales the memory to the GPU's real total."""
    return {"memory": f"{math.floor(fraction * gpu.published_memory_mib)}Mi",
            "cores": str(math.floor(fraction * 100))}


def prepare_shares(gpu: Gpu, fraction: float, count: int, cdi_dir: Path,
                   mps: MpsManager | None = None) -> tuple[Preparer, list[ShareEnv]]:
    """``count`` claims of ``fraction`` of ``gpu``, prepared by the plugin's own Preparer (its
    over-commit check, limit computation and CDI spec; with ``mps``, the GPU's MPS control
    daemon started and its pipe directory in the environment): the preparer (to unprepare them)
    and each share's limits and environment."""
    preparer = Preparer(NODE, [gpu], cdi_dir, cdi_dir / "checkpoint.json", mps=mps)
    out = []
    for i in range(count):
        uid = f"share-{chr(ord('a') + i)}"
        result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": gpu.device_name,
                  "shareID": f"{uid}-id", "consumedCapacity": consumed(gpu, fraction)}
        shares, _ = preparer.prepare(uid, "default", uid, [result])
        spec = json.loads(cdi.spec_path(cdi_dir, uid).read_text())
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        (share,) = shares
        out.append(ShareEnv(uid, share.memory_mib, share.cores, env))
    return preparer, out


# The CUDA client, run as `python -c CLIENT <backend> <role> <alloc MiB> <seconds> <matrix>`:
# prints JSON lines, {"event": "ready"} once its allocation is done and its loop about to start.
CLIENT = r'''
import json, sys, time
backend, role, alloc_mib, seconds, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5])
MIB = 2 ** 20
out = {"role": role, "backend": backend, "allocated_mib": 0, "oom": False, "error": None}
def say(**kw):
    print(json.dumps(kw), flush=True)
if backend == "torch":
    import torch
    dev = torch.device("cuda")
    free, total = torch.cuda.mem_get_info()
    OOM = torch.cuda.OutOfMemoryError
    def block(mib):
        return torch.empty(mib * MIB, dtype=torch.uint8, device=dev)
    def release(blocks):
        blocks.clear(); torch.cuda.empty_cache()
    a = torch.randn(n, n, device=dev); b = torch.randn(n, n, device=dev)
    mm = lambda: torch.matmul(a, b)
    sync = torch.cuda.synchronize
else:
    import cupy
    cupy.cuda.set_allocator(None)  # straight cudaMalloc: no pool holding freed blocks
    free, total = cupy.cuda.runtime.memGetInfo()
    OOM = cupy.cuda.memory.OutOfMemoryError
    def block(mib):
        return cupy.empty(mib * MIB, dtype=cupy.uint8)
    def release(blocks):
        blocks.clear()
    a = cupy.random.rand(n, n, dtype=cupy.float32); b = cupy.random.rand(n, n, dtype=cupy.float32)
    mm = lambda: cupy.matmul(a, b)
    sync = cupy.cuda.Device().synchronize
out["mem_total_mib"] = total // MIB
blocks = []
if role == "hold":  # A: its working set, kept while it computes
    blocks.append(block(alloc_mib)); out["allocated_mib"] = alloc_mib
else:  # B: blocks until the limit refuses one (alloc_mib: give up above this)
    try:
        while out["allocated_mib"] + BLOCK <= alloc_mib:
            blocks.append(block(BLOCK)); out["allocated_mib"] += BLOCK
    except OOM as exc:
        out["oom"] = True; out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    except Exception as exc:  # another CUDA error is a finding too: report it
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    release(blocks)
say(event="ready", **out)
sync(); t0 = time.perf_counter(); iters = 0
while time.perf_counter() - t0 < seconds:
    for _ in range(4):
        mm()
    sync(); iters += 4
elapsed = time.perf_counter() - t0
out.update(event="done", iters=iters, seconds=round(elapsed, 3),
           iters_per_s=round(iters / elapsed, 2),
           tflops=round(2 * n ** 3 * iters / elapsed / 1e12, 3))
say(**out)
'''.replace("BLOCK", str(BLOCK_MIB))


@dataclass
class Report:
    gpu: dict[str, Any]
    fraction: float
    shares: list[dict[str, Any]]
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    a_running_when_b_refused: bool | None = None
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return bool(self.checks) and all(self.checks.values())


def verdict(report: Report) -> dict[str, bool]:
    """The isolation checks, from what the clients reported."""
    a, b = report.clients.get("A", {}), report.clients.get("B", {})
    limit_b = report.shares[1]["memory_mib"]
    return {
        "A allocated its working set": a.get("allocated_mib", 0) > 0 and a.get("error") is None,
        "B refused with out-of-memory": bool(b.get("oom")),
        "B refused at or below its limit": bool(b.get("oom"))
        and b.get("allocated_mib", limit_b + 1) <= limit_b,
        "A running when B was refused": bool(report.a_running_when_b_refused),
        "A finished its loop": a.get("event") == "done" and a.get("iters", 0) > 0,
        "B finished its loop": b.get("event") == "done" and b.get("iters", 0) > 0,
    }


def tables(report: Report) -> list[DataTable]:
    t = DataTable(
        f"MPS shares of {report.gpu['product']} ({report.gpu['uuid']}, "
        f"{report.gpu['memoryMiB']:,} MiB): {len(report.shares)} × {report.fraction:g}",
        ["client", "memory limit MiB", "cores %", "device memory seen MiB", "allocated MiB",
         "refused with", "iterations/s", "TFLOP/s"],
        numeric=[False, True, True, True, True, False, True, True],
        caption="limits: as gpufleet node-plugin prepared them (its CDI spec's "
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); "
                "A holds its working set and computes; B allocates "
                f"{BLOCK_MIB} MiB blocks until refused, then computes beside A")
    for name, share in zip("AB", report.shares, strict=True):
        c = report.clients.get(name, {})
        cells: list[Any] = [name, share["memory_mib"], share["cores"], c.get("mem_total_mib"),
                            c.get("allocated_mib"), c.get("error") or "",
                            c.get("iters_per_s"), c.get("tflops")]
        t.add_row(*("" if v is None else f"{v:,}" if isinstance(v, int) else str(v)
                    for v in cells), values=cells)
    v = DataTable("isolation checks", ["check", "held"], numeric=[False, False])
    for check, ok in report.checks.items():
        v.add_row(check, "yes" if ok else "NO", values=[check, ok])
    return [t, v]


def _need_gpu() -> Gpu:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise CannotRun("no NVIDIA GPU on this machine: nvidia-smi not found")
    res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0 or "GPU 0" not in res.stdout:
        why = (res.stderr or res.stdout).strip().splitlines()
        raise CannotRun(f"no NVIDIA GPU on this machine: nvidia-smi -L: "
                        f"{why[0] if why else f'exit {res.returncode}'}")
    try:
        gpus = nvml_gpus()
    except InventoryError as exc:
        raise CannotRun(str(exc)) from None
    for g in gpus:
        if g.index == 0:
            return g
    raise CannotRun("NVML lists no GPU 0")


def _backend() -> str:
    for name in ("cupy", "torch"):
        if importlib.util.find_spec(name) is not None:
            probe = {"cupy": "import cupy; cupy.cuda.runtime.getDeviceCount()",
                     "torch": "import torch; assert torch.cuda.is_available()"}[name]
            if subprocess.run([sys.executable, "-c", probe], capture_output=True,
                              timeout=120, check=False).returncode == 0:
                return name
    raise CannotRun("needs cupy or torch with CUDA in this Python "
                    "(pip install cupy-cuda12x, or torch with CUDA)")


def _client(backend: str, role: str, alloc_mib: int, seconds: float, matrix: int,
            env: dict[str, str], stderr: Path) -> subprocess.Popen[str]:
    """A client process; its stderr goes to a file (a pipe nobody reads could fill and stall
    it)."""
    with stderr.open("w") as err:
        return subprocess.Popen([sys.executable, "-c", CLIENT, backend, role, str(alloc_mib),
                                 str(seconds), str(matrix)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=err)


def _line(proc: subprocess.Popen[str], stderr: Path, timeout_s: float) -> dict[str, Any]:
    """The client's next JSON line; RuntimeError with its stderr's tail when it ends first or
    says nothing for ``timeout_s``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            break
        line = proc.stdout.readline()  # the client writes whole lines, flushed
        if line:
            return dict(json.loads(line))
        proc.wait(timeout=30)
        raise RuntimeError(f"{stderr.stem}: exited {proc.returncode}: "
                           f"{stderr.read_text().strip()[-1500:]}")
    raise RuntimeError(f"{stderr.stem}: no line in {timeout_s:.0f} s: "
                       f"{stderr.read_text().strip()[-1500:]}")


def run(fraction: float, seconds: float, working_set: float, matrix: int) -> Report:
    gpu = _need_gpu()
    control = mps.find_control(mps.DEFAULT_CONTROL)
    if control is None:
        raise CannotRun(f"{mps.DEFAULT_CONTROL} not found (the NVIDIA driver's compute "
                        "utilities)")
    backend = _backend()
    with tempfile.TemporaryDirectory(prefix="gpufleet-isolation-") as tmp:
        root = Path(tmp)
        manager = mps.MpsManager(control, root / "mps", timeout_s=30.0)
        preparer: Preparer | None = None
        procs: list[subprocess.Popen[str]] = []
        try:
            preparer, shares = prepare_shares(gpu, fraction, 2, root / "cdi", manager)
            report = Report(gpu=gpu.model_dump(by_alias=True), fraction=fraction,
                            shares=[asdict(s) for s in shares])
            env_a = {**os.environ, **shares[0].env}
            env_b = {**os.environ, **shares[1].env}
            err_a, err_b = root / "client-A.stderr", root / "client-B.stderr"
            a = _client(backend, "hold", max(1, int(working_set * shares[0].memory_mib)),
                        seconds, matrix, env_a, err_a)
            procs.append(a)
            report.clients["A"] = _line(a, err_a, 120)
            b = _client(backend, "overflow", int(1.5 * shares[1].memory_mib) + BLOCK_MIB,
                        max(1.0, seconds / 2), matrix, env_b, err_b)
            procs.append(b)
            report.clients["B"] = _line(b, err_b, 300)
            report.a_running_when_b_refused = a.poll() is None
            report.clients["B"] = _line(b, err_b, seconds + 120)
            report.clients["A"] = _line(a, err_a, seconds + 120)
        except RuntimeError as exc:
            log = manager.log_dir(gpu.uuid) / "control.log"
            tail = log.read_text()[-2000:] if log.exists() else "(none)"
            raise RuntimeError(f"{exc}\nMPS control log:\n{tail}") from None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=30)
            _stop_mps(preparer, manager, gpu.uuid)
    report.checks = verdict(report)
    return report


def _stop_mps(preparer: Preparer | None, manager: mps.MpsManager, uuid: str) -> None:
    """Unprepare the shares (the plugin tells the GPU's daemon to quit with the last one); a
    daemon still there after that is killed."""
    if preparer is not None:
        for uid in list(preparer.claims):
            preparer.unprepare(uid)
    pid = manager.pid(uuid)
    if pid is not None:
        with contextlib.suppress(mps.MpsError):
            manager.quit(uuid)
    pid = manager.pid(uuid)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--fraction", type=float, default=0.5,
                    help="each of the two shares, of GPU 0 (default 0.5)")
    ap.add_argument("--seconds", type=float, default=20.0, help="A's compute loop (default 20)")
    ap.add_argument("--working-set", type=float, default=0.5,
                    help="what A allocates, as a fraction of its memory limit (default 0.5)")
    ap.add_argument("--matrix", type=int, default=4096, help="matmul size N (default 4096)")
    ap.add_argument("--output", type=Path, help="write the report as JSON here")
    ap.add_argument("--format", default="table", choices=[f.value for f in OutputFormat])
    a = ap.parse_args(argv)
    if not 0 < a.fraction <= 0.5:
        ap.error("--fraction: two shares must fit one GPU: 0 < fraction <= 0.5")
    if not 0 < a.working_set < 1:
        ap.error("--working-set: between 0 and 1")
    try:
        report = run(a.fraction, a.seconds, a.working_set, a.matrix)
    except CannotRun as exc:
        print(f"gpu_isolation: cannot run here: {exc}", file=sys.stderr)
        return 2
    print_tables(tables(report), OutputFormat(a.format), Console())
    if a.output is not None:
        a.output.write_text(json.dumps({**asdict(report), "held": report.held}, indent=2) + "\n")
    return 0 if report.held else 1


if __name__ == "__main__":
    sys.exit(main())
