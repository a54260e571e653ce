"""MIG jobs end to end: MIG-mode nodes, slice binding and release, compute-share accounting,
and what MIG packing saves against the exclusive baseline (which rounds each to a whole GPU)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpufleet.config import Scenario, builtin_scenarios
from gpufleet.datapaths import ENV_VAR, data_dir
from gpufleet.errors import InputError
from gpufleet.provisioning import MIG_CONFIG, MIG_CONFIG_LABEL
from gpufleet.sim.cloud import MICRO
from gpufleet.sim.invariants import check_accounting
from gpufleet.sim.jobrun import DONE, RUNNING
from gpufleet.sim.runner import Simulation
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec, load_jobs

DATA = Path(__file__).parent / "data"
P4D_USD_H = 32.7726  # p4d.24xlarge on-demand, 8 × A100-40GB (catalog)
ONE_G = 1000 // 7  # a 1g.5gb instance: 1 of the A100's 7 compute slices
AVAILABILITY = "spot-traces/availability"  # under the shared data folder (sim.runner reads it)


def scenario(name: str, **kw) -> Scenario:
    """A built-in scenario without hardware failures, so hand-worked figures are exact."""
    base = next(s for s in builtin_scenarios() if s.name == name)
    return base.model_copy(update={"gpu_mtbf_hours": None, **kw})


def yaml_jobs() -> list[JobSpec]:
    return load_jobs(DATA / "mig_workload.yaml")


def test_static_rounds_up_and_mig_sharing_halves_the_fixed_fleet() -> None:
    """Hand-worked (tests/sim/data/mig_workload.yaml): 28 × 1g.5gb + 4 whole A100s, 1 h.

    static: 28 + 4 = 32 whole GPUs at peak → 4 p4d (32 GPUs), every GPU busy for the hour.
    sharing (MIG kept, fixed fleet): MIG pool peak 28 × 142 milli = 3.98 GPUs → 1 MIG p4d;
    whole pool 4 GPUs → 1 p4d: 16 GPUs, half the bill, same JCT.
    """
    jobs = yaml_jobs()
    st_sim = Simulation(scenario("static"), 0, jobs)
    st = st_sim.run()
    sh_sim = Simulation(scenario("sharing"), 0, jobs)
    sh = sh_sim.run()
    for s in (st, sh):
        assert s["jobs_finished"] == 32 and s["jobs_lost"] == 0
        assert s["jct_p95_s"] == 3600.0
        assert s["useful_gpu_hours"] == pytest.approx((28 * ONE_G + 4 * GPU_MILLI) / GPU_MILLI)
    assert st["provisioned_gpu_hours"] == pytest.approx(32.0)
    assert sh["provisioned_gpu_hours"] == pytest.approx(16.0)
    assert st["cost_usd"] == pytest.approx(4 * P4D_USD_H, abs=1e-3)
    assert sh["cost_usd"] == pytest.approx(2 * P4D_USD_H, abs=1e-3)
    # static holds 32 whole GPUs; MIG holds 28 compute slices + 4 GPUs
    assert st["allocated_gpu_hours"] == pytest.approx(32.0)
    assert sh["allocated_gpu_hours"] == pytest.approx((28 * ONE_G + 4000) / 1000)
    assert check_accounting(st_sim.sim) == [] and check_accounting(sh_sim.sim) == []
    mig_nodes = [n for n in sh_sim.sim.cloud.nodes.values() if n.mig]
    assert len(mig_nodes) == 1 and not any(n.mig for n in st_sim.sim.cloud.nodes.values())


def test_autoscaled_mig_nodes_bind_and_release_slices() -> None:
    jobs = yaml_jobs()
    sim = Simulation(scenario("gpufleet"), 0, jobs)
    cs = sim.sim
    sim.run_until(1800.0)  # booted (180 s) and running
    running = [j for j in cs.jobs if j.state == RUNNING]
    assert len(running) == 32
    mig_nodes = [n for n in cs.cloud.live.values() if n.mig]
    assert mig_nodes
    st = cs.state
    for n in mig_nodes:
        row = st.index[n.name]
        info = st.nodes[row]
        assert info.labels[MIG_CONFIG_LABEL] == MIG_CONFIG
        assert st.mig_enabled[row, : n.gpus].all()
        assert (st.mig_compute_total[row, : n.gpus] == 7).all()
        assert (st.free_milli[row, : n.gpus] == 0).all()  # no milli-GPU on MIG GPUs
    # every MIG job holds one 1g.5gb slot on a MIG node; the node's books match the state
    slots = 0
    for j in running:
        if j.spec.request.mig_profile is None:
            continue
        ((bind, masks),) = j.binds
        assert cs.cloud.nodes[bind.node].mig and bind.mig[0].profile == "1g.5gb"
        assert masks[0][2] == 1 and bin(masks[0][1]).count("1") == 1
        slots += 1
    assert slots == 28
    used = sum(int(st.mig_compute_used[st.index[n.name]].sum()) for n in mig_nodes)
    assert used == 28
    assert sum(n.alloc_milli for n in mig_nodes) == 28 * ONE_G
    # the snapshot labels MIG jobs by profile and reports each instance
    snap = sim.snapshot()
    assert snap.jobs_running[("default", "mig-1g.5gb")] == 28
    inst = [g for g in snap.gpus if g.mig_profile is not None]
    assert len(inst) == 28 and all(g.mig_profile == "1g.5gb" for g in inst)
    parents = [g for g in snap.gpus if g.mig_profile is None and g.hostname == mig_nodes[0].name]
    assert all(math.isnan(g.fb_used_mib) for g in parents)
    # release: when the jobs end the slices are free again (until the node is scaled down)
    t = 3600.0
    while not all(j.state == DONE for j in cs.jobs):
        t += 30.0
        sim.run_until(t)
    assert t < 3600.0 + 600.0
    for n in mig_nodes:
        if n.name in st.index:
            assert int(st.mig_used[st.index[n.name]].sum()) == 0
            assert n.alloc_milli == 0 and not n.jobs
    s = sim.run()
    assert s["jobs_lost"] == 0
    assert s["useful_gpu_hours"] == pytest.approx((28 * ONE_G + 4000) / 1000)
    assert 0 < s["allocated_gpu_hours"] <= s["provisioned_gpu_hours"]
    bill = 0  # flat per-second bills on demand, the price path for price-model spot
    for n in cs.cloud.nodes.values():
        if n.spot and cs.market is not None and cs.market.mode == "price":
            bill += round(cs.market.cost_usd(n.itype.name, n.zone, n.launched_s, n.ended_s)
                          * MICRO)
        else:
            bill += round(n.usd_per_hour * MICRO) * math.ceil(n.ended_s - n.launched_s) // 3600
    assert s["cost_usd"] == pytest.approx(bill / MICRO)


def test_mig_queueing_waits_for_a_slice_not_a_gpu() -> None:
    """Eight 3g.20gb on one fixed MIG node of 8 A100s fit (2 per GPU) — 17 do not: the 17th
    waits for a slot and starts when the first finishes."""
    req = ResourceRequest(cpu_milli=1000, memory_mib=4096, num_gpu=1, mig_profile="3g.20gb",
                          gpu_models=frozenset({"A100-40GB"}))
    jobs = [JobSpec(f"m{i}", 0.0, 3600.0 + i, req) for i in range(17)]
    sim = Simulation(scenario("sharing", fixed_nodes=1), 0, jobs)
    s = sim.run()
    assert s["jobs_lost"] == 0 and s["nodes_launched"] == 1
    late = sorted(sim.sim.jobs, key=lambda j: j.first_start_s)[-1]
    assert late.first_start_s == 3600.0  # m0 frees its slice at 3600
    assert late.finish_s == pytest.approx(3600.0 + 3600.0 + 16)


def test_unknown_profile_is_an_input_error() -> None:
    jobs = [JobSpec("a", 0.0, 600.0, ResourceRequest(num_gpu=1, mig_profile="9g.99gb"))]
    with pytest.raises(InputError, match=r"9g\.99gb"):
        Simulation(scenario("gpufleet"), 0, jobs)


def test_csv_mig_workload(tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    rows = ["job_id,submit_s,duration_s,num_gpu,mig_profile,cpu_milli,memory_mib"]
    rows += [f"j{i},{i * 60},1800,1,2g.20gb,2000,8192" for i in range(9)]
    csv.write_text("\n".join(rows) + "\n")
    jobs = load_jobs(csv)
    sim = Simulation(scenario("gpufleet"), 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 9 and s["jobs_lost"] == 0
    # 2g.20gb exists on A100-80GB / H100 / H200 only: the MIG nodes are of those models
    models = {n.itype.gpu_model for n in sim.sim.cloud.nodes.values() if n.mig}
    assert models and models <= {"A100-80GB", "H100-80GB", "H200-141GB"}
    assert s["useful_gpu_hours"] == pytest.approx(9 * 0.5 * (2 * 1000 // 7) / 1000)


def test_compaction_keeps_mig_layout() -> None:
    sim = Simulation(scenario("gpufleet"), 0, yaml_jobs())
    sim.run_until(1800.0)
    cs = sim.sim
    before = {n: (cs.state.mig_used[i].copy(), cs.state.mig_compute_total[i].copy())
              for n, i in cs.state.index.items()}
    cs._compact()
    for n, (used, total) in before.items():
        i = cs.state.index[n]
        assert np.array_equal(cs.state.mig_used[i], used)
        assert np.array_equal(cs.state.mig_compute_total[i], total)


@pytest.mark.parametrize("name", ["static", "gpufleet", "sharing"])
def test_unconstrained_mig_job_beside_v100_jobs(name: str) -> None:
    """A hand-made MIG request without a model constraint (num_gpu 0) among V100 jobs: the
    fleet includes a model offering the profile and every job finishes."""
    base = data_dir(required=False)
    if name == "gpufleet" and (base is None or not (base / AVAILABILITY).is_dir()):
        # The spot scenario's market is built from the shared availability traces; without them
        # the simulator falls back to the price-process market, where the MIG job runs 30 s
        # longer, so the ledger figure below (worked for the trace market) does not hold.
        pytest.skip(f"spot scenario needs the shared availability traces ({AVAILABILITY}): "
                    f"set {ENV_VAR} or lay out ../shared/data")
    v100 = ResourceRequest(cpu_milli=4000, memory_mib=12288, num_gpu=1,
                           gpu_models=frozenset({"V100-16GB"}))
    jobs = [JobSpec(f"v{i}", i * 60.0, 1800.0, v100) for i in range(4)]
    jobs.append(JobSpec("m", 30.0, 1800.0, ResourceRequest(cpu_milli=1000, mig_profile="1g.5gb")))
    sim = Simulation(scenario(name), 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 5 and s["jobs_lost"] == 0
    (m,) = [j for j in sim.sim.jobs if j.spec.job_id == "m"]
    assert m.req.gpu_models and "A100-40GB" in m.req.gpu_models
    assert (m.req.mig_profile is None) == (name == "static")
    assert s["useful_gpu_hours"] == pytest.approx((4 * 1800 + 1800 * ONE_G / 1000) / 3600)
    # the ledger holds the MIG instance's compute share (or the whole GPU it is rounded to)
    assert m.alloc_gpu_s == pytest.approx(1800 * (1.0 if name == "static" else ONE_G / 1000))
    assert check_accounting(sim.sim) == []
