"""Workload files: out-of-range, non-finite and misread values are InputErrors naming the spot.

One regression test per class of hostile input found by fuzzing (tracebacks, hangs, silently
wrong numbers), for the Philly CSV, the gpufleet CSV and the YAML format.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.traces.jobs import MAX_DURATION_S, MAX_SUBMIT_S, load_jobs

PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GENERIC = "job_id,submit_s,duration_s,num_gpu"
OK_ROW = "2017-10-09 07:00:00,60,1,60,c\n"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def error_of(p: Path) -> InputError:
    with pytest.raises(InputError) as ei:
        load_jobs(p)
    assert ei.value.path == str(p)
    return ei.value


@pytest.mark.parametrize("gpus", ["2.7", "inf", "nan", "1e400", "100000", "-1", "0"])
def test_philly_num_gpus_must_be_a_whole_number_in_range(tmp_path: Path, gpus: str) -> None:
    p = write(tmp_path, "p.csv", PHILLY + OK_ROW + f"2017-10-09 07:01:55,66.0,{gpus},66,c1\n")
    err = error_of(p)
    assert (err.line, err.field) == (3, "num_gpus")
    assert "whole number in 1..512" in str(err)


def test_philly_whole_float_gpus_still_accepted(tmp_path: Path) -> None:
    p = write(tmp_path, "p.csv", PHILLY + "2017-10-09 07:01:55,66.0,16.0,66,c1\n")
    (job,) = load_jobs(p)
    assert (job.replicas, job.request.num_gpu) == (2, 8)


@pytest.mark.parametrize("duration", ["1e9", "inf", "nan", "1e300"])
def test_philly_duration_bounded(tmp_path: Path, duration: str) -> None:
    p = write(tmp_path, "p.csv", PHILLY + f"2017-10-09 07:01:55,{duration},1,66,c1\n")
    err = error_of(p)
    assert (err.line, err.field) == (2, "duration")


def test_philly_1970_timestamp_among_2017_rows_is_named(tmp_path: Path) -> None:
    rows = [f"2017-10-{d:02d} 07:00:00,60,1,60,c\n" for d in range(1, 20)]
    rows.insert(7, "1970-01-01 00:00:00,60,1,60,c\n")
    p = write(tmp_path, "p.csv", PHILLY + "".join(rows))
    err = error_of(p)
    assert (err.line, err.field) == (9, "timestamp")
    assert f"at most {MAX_SUBMIT_S / 86400:.0f} days" in str(err)


def test_philly_span_of_a_year_is_accepted(tmp_path: Path) -> None:
    p = write(tmp_path, "p.csv", PHILLY + OK_ROW + "2018-10-09 07:00:00,60,1,60,c\n")
    assert max(j.submit_s for j in load_jobs(p)) == 365 * 86400


def _submit_times(path: Path, tz: str) -> str:
    code = (
        "import sys, time\n"
        "from gpufleet.traces.jobs import load_jobs\n"
        "time.tzset()\n"
        "print([j.submit_s for j in load_jobs(sys.argv[1])])\n"
    )
    env = {**os.environ, "TZ": tz}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, env=env, timeout=120, check=True)
    return out.stdout.strip()


def test_philly_submit_times_do_not_depend_on_tz(tmp_path: Path) -> None:
    # 2017-11-05: US daylight saving time ends at 02:00 local; in local time the two rows were
    # 3 h + 1 h apart; as written (UTC) they are 3 h apart
    p = write(tmp_path, "p.csv", PHILLY + "2017-11-05 00:30:00,60,1,60,c\n"
              "2017-11-05 03:30:00,60,1,60,c\n")
    utc = _submit_times(p, "UTC")
    assert utc == "[0.0, 10800.0]"
    assert _submit_times(p, "America/Los_Angeles") == utc
    assert _submit_times(p, "Asia/Kolkata") == utc


def test_philly_explicit_zone_is_honoured(tmp_path: Path) -> None:
    p = write(tmp_path, "p.csv", PHILLY + "2017-10-09 07:00:00+00:00,60,1,60,c\n"
              "2017-10-09 09:00:00+02:00,60,1,60,c\n")
    assert [j.submit_s for j in load_jobs(p)] == [0.0, 0.0]


def test_philly_latin1_cluster_name(tmp_path: Path) -> None:
    p = write(tmp_path, "p.csv", PHILLY.encode() + b"2017-10-09 07:00:00,60,1,60,caf\xe9\n")
    err = error_of(p)
    assert err.line == 2 and "not UTF-8" in str(err)


def test_directory_as_trace(tmp_path: Path) -> None:
    (tmp_path / "d.csv").mkdir()
    err = error_of(tmp_path / "d.csv")
    assert "is a directory" in str(err)


@pytest.mark.parametrize(
    ("extra_cols", "values", "field"),
    [
        ("", "j,1e300,60,1", "submit_s"),
        ("", "j,inf,60,1", "submit_s"),
        ("", "j,0,1e9,1", "duration_s"),
        ("", "j,0,nan,1", "duration_s"),
        ("", "j,0,60,1e400", "num_gpu"),
        ("", "j,0,60,2.7", "num_gpu"),
        (",deadline_s", "j,0,60,1,inf", "deadline_s"),
        (",replicas", "j,0,60,8,100000", "replicas"),
        (",cpu_milli", "j,0,60,1,99999999999999999999", "cpu_milli"),
        (",memory_mib", "j,0,60,1,1e30", "memory_mib"),
        (",restart_overhead_s", "j,0,60,1,inf", "restart_overhead_s"),
        (",checkpoint_cost_s", "j,0,60,1,1e9", "checkpoint_cost_s"),
        (",utilization", "j,0,60,1,nan", "utilization"),
        (",priority", "j,0,60,1,10000000000", "priority"),
    ],
)
def test_generic_csv_values_bounded(
    tmp_path: Path, extra_cols: str, values: str, field: str
) -> None:
    p = write(tmp_path, "w.csv", f"{GENERIC}{extra_cols}\nok,0,60,1{',' if extra_cols else ''}"
              f"{'1' if extra_cols else ''}\n{values}\n")
    err = error_of(p)
    assert (err.line, err.field) == (3, field)


def test_generic_bounds_are_inclusive(tmp_path: Path) -> None:
    p = write(tmp_path, "w.csv", f"{GENERIC},replicas\nj,{MAX_SUBMIT_S},{MAX_DURATION_S},8,64\n")
    (job,) = load_jobs(p)
    assert job.gpu_milli_total == 512 * 1000 and job.line == 2


def test_csv_huge_field_is_an_input_error(tmp_path: Path) -> None:
    p = write(tmp_path, "w.csv", f"{GENERIC}\nj,0,60,1\n\"{'x' * 200_000}\",0,60,1\n")
    err = error_of(p)
    assert err.line == 3 and "not valid CSV" in str(err)


def test_yaml_workload_duplicate_key_and_bomb(tmp_path: Path) -> None:
    p = write(tmp_path, "w.yaml", "jobs:\n  - job_id: a\n    submit_s: 0\n    duration_s: 60\n"
              "    num_gpu: 1\n    num_gpu: 8\n")
    err = error_of(p)
    assert err.line == 6 and "duplicate key 'num_gpu'" in str(err)
    q = write(tmp_path, "d.yaml", "jobs: " + "[" * 1000 + "]" * 1000 + "\n")
    assert "nested deeper" in str(error_of(q))


def test_yaml_workload_infinite_values(tmp_path: Path) -> None:
    p = write(tmp_path, "w.yaml", "jobs:\n  - {job_id: a, submit_s: 0, duration_s: .inf, "
              "num_gpu: 1}\n")
    err = error_of(p)
    assert (err.line, err.field) == (2, "duration_s")


def test_yaml_jobs_keys_must_be_names(tmp_path: Path) -> None:
    p = write(tmp_path, "w.yaml", "jobs:\n  - {1: 2}\n")
    assert "field names" in str(error_of(p))


def test_cpu_only_jobs_load(tmp_path: Path) -> None:
    p = write(tmp_path, "w.csv", f"{GENERIC}\nc1,0,60,0\n")
    (job,) = load_jobs(p)
    assert job.request.num_gpu == 0 and job.gpu_seconds == 0
