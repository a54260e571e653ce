from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.traces.jobs import load_jobs, sniff_format

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_philly_rows_become_jobs_with_gangs(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "t.csv",
        PHILLY
        + "2017-10-09 07:01:55,66.0,1,66.0,c1\n"
        + "2017-10-09 07:00:00,100,16,1600,c2\n"
        + "2017-10-09 07:00:10,100,12,1200,c2\n",
    )
    jobs = load_jobs(p)
    assert [j.submit_s for j in jobs] == [0.0, 10.0, 115.0]
    big = jobs[0]
    assert (big.replicas, big.request.num_gpu, big.tenant) == (2, 8, "c2")
    assert (jobs[1].replicas, jobs[1].request.num_gpu) == (2, 6)
    assert jobs[2].request.gpu_models == frozenset({"V100-16GB"})
    assert jobs[2].gpu_seconds == 66.0


@pytest.mark.parametrize(
    ("row", "line", "field"),
    [
        ("2017-10-09 07:01:55,66.0,0,66.0,c1", 3, "num_gpus"),
        ("2017-10-09 07:01:55,abc,1,66.0,c1", 3, "duration"),
        ("yesterday,66.0,1,66.0,c1", 3, "timestamp"),
        ("2017-10-09 07:01:55,-5,1,66.0,c1", 3, "duration"),
    ],
)
def test_philly_bad_rows_name_line_and_field(
    tmp_path: Path, row: str, line: int, field: str
) -> None:
    p = write(tmp_path, "t.csv", PHILLY + "2017-10-09 07:00:00,1,1,1,c\n" + row + "\n")
    with pytest.raises(InputError) as ei:
        load_jobs(p)
    assert (ei.value.path, ei.value.line, ei.value.field) == (str(p), line, field)


def test_philly_short_row(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", PHILLY + "2017-10-09 07:00:00,1,1\n")
    with pytest.raises(InputError, match=r"t\.csv:2: expected 5 columns"):
        load_jobs(p)


GENERIC = "job_id,submit_s,duration_s,num_gpu,gpu_milli,gpu_models,mig_profile,deadline_s,tenant\n"


def test_generic_csv(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "jobs.csv",
        GENERIC
        + "a,10,100,1,500,T4|V100M16,,,ml\n"
        + "b,0,50,0,1000,,1g.5gb,500,ml\n"
        + "c,5,50,4,1000,,,,\n",
    )
    jobs = load_jobs(p)
    assert [j.job_id for j in jobs] == ["b", "c", "a"]
    a = jobs[2]
    assert a.request.is_shared and a.request.gpu_models == frozenset({"T4", "V100-16GB"})
    b = jobs[0]
    assert b.request.mig_profile == "1g.5gb" and b.request.gpu_models == frozenset({"A100-40GB"})
    assert b.deadline_s == 500
    assert jobs[1].tenant == "default"


@pytest.mark.parametrize(
    ("row", "field", "msg"),
    [
        ("a,10,100,2,500,,,,", None, "num_gpu == 1"),
        ("a,10,100,1,1000,Z99,,,", "gpu_models", "unknown GPU model 'Z99'"),
        ("a,10,-1,1,1000,,,,", "duration_s", "greater than 0"),
        ("a,10,100,1,1000,,9g.99gb,,", "mig_profile", "9g.99gb"),
        ("a,10,100,1,1000,,,5,", None, "deadline_s must be after submit_s"),
        ("a,10,100,1,1500,,,,", "gpu_milli", "less than or equal to 1000"),
    ],
)
def test_generic_bad_rows(tmp_path: Path, row: str, field: str | None, msg: str) -> None:
    p = write(tmp_path, "jobs.csv", GENERIC + row + "\n")
    with pytest.raises(InputError, match=msg) as ei:
        load_jobs(p)
    assert ei.value.line == 2
    assert ei.value.field == field


def test_generic_duplicate_id(tmp_path: Path) -> None:
    p = write(tmp_path, "jobs.csv", GENERIC + "a,1,1,1,1000,,,,\na,2,1,1,1000,,,,\n")
    with pytest.raises(InputError, match="duplicate job_id 'a'") as ei:
        load_jobs(p)
    assert ei.value.line == 3


def test_yaml_jobs_and_error_line(tmp_path: Path) -> None:
    ok = write(
        tmp_path,
        "w.yaml",
        "jobs:\n  - {job_id: x, submit_s: 0, duration_s: 60, num_gpu: 2, replicas: 2}\n",
    )
    (job,) = load_jobs(ok)
    assert job.gpu_milli_total == 4000
    bad = write(
        tmp_path,
        "bad.yaml",
        "jobs:\n  - job_id: x\n    submit_s: 0\n    duration_s: 60\n    num_gpu: 1\n"
        "  - job_id: y\n    submit_s: 0\n    duration_s: 60\n    num_gpu: 1\n    colour: red\n",
    )
    with pytest.raises(InputError) as ei:
        load_jobs(bad)
    assert (ei.value.line, ei.value.field) == (6, "colour")


def test_unknown_header(tmp_path: Path) -> None:
    p = write(tmp_path, "x.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(InputError, match="unrecognised header"):
        sniff_format(p)


def test_real_philly_trace(shared_data: Path) -> None:
    jobs = load_jobs(shared_data / "philly" / "philly_jobs.csv")
    assert len(jobs) == 82247
    assert jobs[0].submit_s == 0.0
    assert all(a.submit_s <= b.submit_s for a, b in itertools.pairwise(jobs))
    total_gpus = sum(j.replicas * j.request.num_gpu for j in jobs)
    assert total_gpus >= 82247 + 1818 + 3 * 1870  # every GPU asked for is there
    assert max(j.replicas for j in jobs) == 16  # the 128-GPU jobs


def test_value_of_time_and_latency_sensitive_columns(tmp_path: Path) -> None:
    """Optional: an empty cell is "not stated" (the team's or the scenario's applies)."""
    p = write(tmp_path, "jobs.csv",
              "job_id,submit_s,duration_s,num_gpu,value_of_time_usd_per_gpu_hour,"
              "latency_sensitive\n"
              "a,0,60,1,12.5,true\nb,1,60,1,,\nc,2,60,1,0,false\n")
    a, b, c = load_jobs(p)
    assert (a.value_of_time_usd_per_gpu_hour, a.latency_sensitive) == (12.5, True)
    assert (b.value_of_time_usd_per_gpu_hour, b.latency_sensitive) == (None, None)
    assert (c.value_of_time_usd_per_gpu_hour, c.latency_sensitive) == (0.0, False)
    y = write(tmp_path, "w.yaml", "jobs:\n  - {job_id: x, submit_s: 0, duration_s: 60, "
              "num_gpu: 1, value_of_time_usd_per_gpu_hour: 3, latency_sensitive: true}\n")
    (x,) = load_jobs(y)
    assert (x.value_of_time_usd_per_gpu_hour, x.latency_sensitive) == (3.0, True)


@pytest.mark.parametrize(("cell", "msg"), [
    ("-1", "greater than or equal to 0"),
    ("inf", "finite number"),
    ("lots", "valid number"),
])
def test_a_bad_value_of_time_names_its_line_and_field(tmp_path: Path, cell: str,
                                                      msg: str) -> None:
    p = write(tmp_path, "jobs.csv", "job_id,submit_s,duration_s,num_gpu,"
              f"value_of_time_usd_per_gpu_hour\na,0,60,1,{cell}\n")
    with pytest.raises(InputError, match=msg) as ei:
        load_jobs(p)
    assert (ei.value.line, ei.value.field) == (2, "value_of_time_usd_per_gpu_hour")
