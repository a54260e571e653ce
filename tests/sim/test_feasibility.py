"""Jobs no node could ever run are refused before simulating; CPU-only and lone jobs run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.config import Scenario, builtin_scenarios
from gpufleet.errors import InputError
from gpufleet.sim.feasibility import PHILLY_FIELDS, check_runnable
from gpufleet.sim.runner import Simulation, scenario_types
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec, load_jobs
from gpufleet.traces.synthetic import generate


def job(line: int = 7, replicas: int = 1, **req: object) -> JobSpec:
    base: dict[str, object] = {"cpu_milli": 4000, "memory_mib": 8192, "num_gpu": 1}
    base.update(req)
    return JobSpec("j", 0.0, 3600.0, ResourceRequest(**base), replicas=replicas,  # type: ignore[arg-type]
                   line=line)


def types(*names: str) -> list:
    cat = default_instance_catalog()
    return [cat[n] for n in names] if names else [t for t in cat if t.provider == "aws"]


AWS = Scenario(name="s")


@pytest.mark.parametrize(
    ("request_", "field", "words"),
    [
        ({"cpu_milli": 999_999}, "cpu_milli", "999,999 milli-CPU"),
        ({"memory_mib": 16 * 1024 * 1024}, "memory_mib", "MiB per replica"),
        ({"gpu_memory_mib": 200_000}, "gpu_memory_mib", "200,000 MiB per GPU"),
        ({"min_cuda": 99_000}, "min_cuda", "CUDA 99.0"),
    ],
)
def test_never_runnable_names_line_and_field(
    request_: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(InputError) as ei:
        check_runnable([job(**request_)], AWS, types(), "w.csv")
    err = ei.value
    assert (err.path, err.line, err.field) == ("w.csv", 7, field)
    assert "job 'j' can never run in scenario 's'" in str(err) and words in str(err)


def test_gpus_beyond_the_allowed_types() -> None:
    sc = Scenario(name="small", instance_types=("p3.2xlarge",))
    why = "asks 8 GPUs per replica; the largest instance type has 1"
    with pytest.raises(InputError, match=why) as ei:
        check_runnable([job(num_gpu=8)], sc, types("p3.2xlarge"), "p.csv", PHILLY_FIELDS)
    assert ei.value.field == "num_gpus"  # the Philly column name


def test_model_and_mig_constraints() -> None:
    with pytest.raises(InputError) as ei:
        check_runnable([job(gpu_models=frozenset({"T4"}))], AWS, types("p3.2xlarge"))
    assert ei.value.field == "gpu_models"
    mig = job(num_gpu=1, mig_profile="1g.5gb", gpu_models=frozenset({"A100-40GB"}))
    with pytest.raises(InputError) as ei:
        check_runnable([mig], AWS, types("p3.2xlarge"))
    assert ei.value.field == "mig_profile"
    check_runnable([mig], AWS, types())  # p4d offers it


def test_without_sharing_a_mig_job_needs_a_whole_gpu_of_its_model() -> None:
    mig = job(num_gpu=1, mig_profile="1g.5gb", gpu_models=frozenset({"A100-40GB"}))
    check_runnable([mig], Scenario(name="x", sharing=False), types())


def test_every_builtin_scenario_accepts_the_default_workload() -> None:
    jobs = generate(seed=0)
    for sc in builtin_scenarios():
        check_runnable(jobs, sc, scenario_types(sc, jobs))


def test_gang_replicas_are_checked_one_by_one() -> None:
    check_runnable([job(num_gpu=8, replicas=64, cpu_milli=32_000)], AWS, types())


def write(tmp_path: Path, text: str) -> list[JobSpec]:
    p = tmp_path / "w.csv"
    p.write_text(text)
    return load_jobs(p)


def test_cpu_only_workload_runs_in_every_builtin_scenario(tmp_path: Path) -> None:
    jobs = write(tmp_path, "job_id,submit_s,duration_s,num_gpu\nc1,0,3600,0\nc2,10,600,0\n")
    for sc in builtin_scenarios():
        check_runnable(jobs, sc, scenario_types(sc, jobs))
        s = Simulation(sc, 0, jobs).run()
        assert (s["jobs_finished"], s["jobs_lost"]) == (2, 0), sc.name
        assert s["cost_usd"] > 0, sc.name


def test_a_lone_job_below_the_gpu_threshold_is_not_stranded(tmp_path: Path) -> None:
    """Below ``pending_gpu_threshold`` the autoscaler waits ``max_pending_wait_s``; with nothing
    else going on no scan came back, and the job was reported lost."""
    jobs = write(tmp_path, "job_id,submit_s,duration_s,num_gpu\nj1,0,3600,1\n")
    by = {s.name: s for s in builtin_scenarios()}
    for name in ("autoscaling", "gpufleet"):
        sc = by[name].model_copy(update={"gpu_mtbf_hours": None})
        sim = Simulation(sc, 0, jobs)
        s = sim.run()
        assert s["jobs_lost"] == 0, name
        assert s["queue_p95_s"] >= sc.max_pending_wait_s, name  # it waited for the trigger


def test_an_unrunnable_job_ends_the_simulation_instead_of_looping(tmp_path: Path) -> None:
    """Simulation (the library API, no CLI check) still terminates, reporting the job lost."""
    jobs = write(tmp_path, "job_id,submit_s,duration_s,num_gpu,cpu_milli\nj1,0,3600,1,999999\n")
    sc = next(s for s in builtin_scenarios() if s.name == "autoscaling")
    assert Simulation(sc, 0, jobs).run()["jobs_lost"] == 1


def test_fixed_fleet_picks_a_type_every_replica_fits(tmp_path: Path) -> None:
    jobs = write(tmp_path, "job_id,submit_s,duration_s,num_gpu,cpu_milli\n"
                 "j1,0,3600,1,4000\nj2,0,3600,1,64000\n")
    static = next(s for s in builtin_scenarios() if s.name == "static")
    s = Simulation(static.model_copy(update={"gpu_mtbf_hours": None}), 0, jobs).run()
    assert (s["jobs_finished"], s["jobs_lost"]) == (2, 0)


def test_a_mig_profile_no_gpu_offers_names_file_line_and_field() -> None:
    """The request rewrite is control.admission's; its refusal of an unknown MIG profile still
    says which file and line asked for it."""
    with pytest.raises(InputError, match=r"no catalogued GPU offers MIG profile '9g\.99gb'") as ei:
        check_runnable([job(line=12, mig_profile="9g.99gb", num_gpu=0)], AWS, types(), "m.csv")
    assert (ei.value.path, ei.value.line, ei.value.field) == ("m.csv", 12, "mig_profile")
