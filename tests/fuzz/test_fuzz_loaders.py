"""Fuzz every file loader a command reads: a clean result or an InputError, nothing else.

Each loader gets three kinds of input: random bytes, a valid sample with random byte edits (which
reaches deep into the parsers), and well-formed files whose field values are drawn from hostile
ones (inf, nan, 1e400, huge integers, negative numbers, odd text). Any exception other than
:class:`InputError` fails the test, and so does an example slower than the deadline (a hang).
The budget is about 30 s for the whole file on a CI runner.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.catalog.gpus import load_gpu_catalog
from gpufleet.catalog.instances import load_instance_catalog
from gpufleet.catalog.spot_prices import load_spot_prices
from gpufleet.config import Scenario, load_scenarios
from gpufleet.errors import InputError
from gpufleet.traces.jobs import load_jobs
from gpufleet.traces.openb import load_nodes, load_pods
from gpufleet.traces.spot_availability import load_availability

FUZZ = settings(
    max_examples=100,
    deadline=2000,  # ms per example: a loader that loops on some input fails here
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

PHILLY_SAMPLE = (
    b"timestamp,duration,num_gpus,gpu_time,cluster\n"
    b"2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.0,16,2951.0,6214e9\n"
)
CSV_SAMPLE = (
    b"job_id,submit_s,duration_s,num_gpu,gpu_milli,replicas,deadline_s,gpu_models,mig_profile\n"
    b"a,0,3600,1,500,1,,T4,\nb,60,600,8,1000,2,9000,,\nc,5,60,0,1000,1,,,\n"
    b"d,9,60,1,1000,1,,A100-40GB,1g.5gb\n"
)
YAML_JOBS_SAMPLE = (
    b"jobs:\n  - {job_id: a, submit_s: 0, duration_s: 60, num_gpu: 1, gpu_milli: 400}\n"
    b"  - job_id: b\n    submit_s: 10\n    duration_s: 7200\n    num_gpu: 8\n    replicas: 2\n"
)
SCENARIO_SAMPLE = (
    b"defaults: &d {spot: false, scan_interval_s: 20}\nscenarios:\n"
    b"  - {name: a, <<: *d}\n  - name: b\n    instance_types: [p3.2xlarge]\n"
    b"    price_tick_s: 600\n    gpu_mtbf_hours: 5000\n"
)
GPUS_SAMPLE = (
    b"T4:\n  memory_gib: 16\n  compute_capability: '7.5'\n  interconnect: pcie\n"
    b"  fp16_tflops: 65\n  max_cuda: '12.4'\n"
)
INSTANCES_SAMPLE = (
    b"aws:\n  currency: USD\n  zones: [us-east-1a]\n  notice_seconds: 120\n  types:\n"
    b"    g4dn.xlarge: {gpu: T4, gpus: 1, vcpu: 4, memory_gib: 16, price: 0.526}\n"
)
NODES_SAMPLE = b"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,32000,1024,0,\n"
PODS_SAMPLE = (
    b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    b"p0,12000,16384,1,1000,,LS\np1,6000,12288,1,460,V100M16|G2,BE\np2,100,10,0,0,,LS\n"
)
TRACE_SAMPLE = b'{"metadata": {"gap_seconds": 195},\n "data": [0, 1, 1, 0, 1]}\n'
PRICES_SAMPLE = (
    b"az_id\tinstance_type\tproduct\tprice_usd_per_hour\ttimestamp\n"
    b"use1-az1\tp3.2xlarge\tLinux/UNIX\t0.9\t2022-05-31T18:20:41+00:00\n"
)

HOSTILE_TEXT = st.sampled_from([
    "", "0", "-1", "1", "2.7", "8", "16.0", "1e400", "-1e400", "inf", "-inf", "nan", "NaN",
    "Infinity", "1e300", "1e9", "1e-7", "99999999999999999999999999", "0x10", "1_000", " 1 ",
    "true", "null", "~", "[]", "{}", "'", '"', "\\", "\x00", "é", "💥", "1970-01-01 00:00:00",
    "2017-10-09 07:01:55", "9999-12-31 23:59:59", "2017-13-45", "T4", "V100M16|G2", "1g.5gb",
    "12.4", "x" * 300,
])
HOSTILE_YAML_SCALAR = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
    HOSTILE_TEXT,
)
HOSTILE_YAML_VALUE = st.recursive(
    HOSTILE_YAML_SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


def mutated(sample: bytes) -> st.SearchStrategy[bytes]:
    """``sample`` with a few bytes replaced, inserted or deleted."""
    edit = st.tuples(st.sampled_from(["set", "insert", "delete"]),
                     st.integers(min_value=0, max_value=len(sample) - 1),
                     st.binary(min_size=1, max_size=4))

    def apply(edits: list[tuple[str, int, bytes]]) -> bytes:
        buf = bytearray(sample)
        for op, pos, blob in edits:
            pos = min(pos, max(len(buf) - 1, 0))
            if op == "set" and buf:
                buf[pos:pos + len(blob)] = blob
            elif op == "insert":
                buf[pos:pos] = blob
            elif buf:
                del buf[pos:pos + len(blob)]
        return bytes(buf)

    return st.lists(edit, min_size=1, max_size=6).map(apply)


def any_bytes(sample: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=600), mutated(sample))


def attempt(load: Callable[[Path], Any], data: bytes, suffix: str) -> None:
    """Write ``data`` to a file and load it: any outcome but an InputError or a result fails."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(data)
        try:
            load(path)
        except InputError as exc:
            assert (exc.path or "").startswith(str(path)), f"no file named: {exc}"
            assert "\n" not in str(exc), f"not one line: {exc!r}"


def csv_text(header: list[str], rows: list[list[str]], sep: str = ",") -> bytes:
    lines = [sep.join(header)] + [sep.join(r) for r in rows]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def hostile_rows(n_cols: int) -> st.SearchStrategy[list[list[str]]]:
    return st.lists(st.lists(HOSTILE_TEXT, min_size=n_cols, max_size=n_cols), min_size=1,
                    max_size=4)


# -- workloads (gpufleet simulate --trace) --------------------------------------------------------
@FUZZ
@given(any_bytes(PHILLY_SAMPLE))
def test_philly_bytes(data: bytes) -> None:
    attempt(load_jobs, data, ".csv")


@FUZZ
@given(hostile_rows(5))
def test_philly_values(rows: list[list[str]]) -> None:
    attempt(load_jobs, csv_text(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"],
                                rows), ".csv")


JOB_COLUMNS = ["gpu_milli", "replicas", "cpu_milli", "memory_mib", "gpu_models", "gpu_memory_mib",
               "mig_profile", "min_cuda", "tenant", "priority", "checkpointable", "interruptible",
               "deadline_s", "checkpoint_cost_s", "restart_overhead_s", "utilization"]


@FUZZ
@given(any_bytes(CSV_SAMPLE))
def test_job_csv_bytes(data: bytes) -> None:
    attempt(load_jobs, data, ".csv")


@FUZZ
@given(st.lists(st.sampled_from(JOB_COLUMNS), unique=True, max_size=6).flatmap(
    lambda extra: st.tuples(st.just(extra), hostile_rows(4 + len(extra)))))
def test_job_csv_values(case: tuple[list[str], list[list[str]]]) -> None:
    extra, rows = case
    attempt(load_jobs, csv_text(["job_id", "submit_s", "duration_s", "num_gpu", *extra], rows),
            ".csv")


@FUZZ
@given(any_bytes(YAML_JOBS_SAMPLE))
def test_job_yaml_bytes(data: bytes) -> None:
    attempt(load_jobs, data, ".yaml")


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(["job_id", "submit_s", "duration_s", "num_gpu",
                                                 *JOB_COLUMNS, "bogus"]),
                                HOSTILE_YAML_VALUE, max_size=8), max_size=3))
def test_job_yaml_values(jobs: list[dict[str, Any]]) -> None:
    attempt(load_jobs, yaml.safe_dump({"jobs": jobs}, allow_unicode=True).encode(), ".yaml")


# -- scenarios (gpufleet simulate --scenario) -----------------------------------------------------
@FUZZ
@given(any_bytes(SCENARIO_SAMPLE))
def test_scenario_bytes(data: bytes) -> None:
    attempt(load_scenarios, data, ".yaml")


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(sorted(Scenario.model_fields)),
                                HOSTILE_YAML_VALUE, max_size=6), min_size=1, max_size=3))
def test_scenario_values(items: list[dict[str, Any]]) -> None:
    attempt(load_scenarios, yaml.safe_dump({"scenarios": items}).encode(), ".yaml")


# -- catalogs (user-supplied catalog files through the library API) --------------------------------
@FUZZ
@given(any_bytes(GPUS_SAMPLE))
def test_gpu_catalog_bytes(data: bytes) -> None:
    def load(path: Path) -> Any:
        aliases = path.with_name("aliases.yaml")  # no aliases: the fuzzed file is the subject
        aliases.write_text("{}\n")
        return load_gpu_catalog(path, aliases)

    attempt(load, data, ".yaml")


@FUZZ
@given(any_bytes(INSTANCES_SAMPLE))
def test_instance_catalog_bytes(data: bytes) -> None:
    attempt(load_instance_catalog, data, ".yaml")


# -- openb (gpufleet bench packing --nodes/--pods) ---------------------------------------------
@FUZZ
@given(any_bytes(NODES_SAMPLE))
def test_openb_nodes_bytes(data: bytes) -> None:
    attempt(load_nodes, data, ".csv")


@FUZZ
@given(any_bytes(PODS_SAMPLE))
def test_openb_pods_bytes(data: bytes) -> None:
    attempt(load_pods, data, ".csv")


@FUZZ
@given(hostile_rows(5), hostile_rows(6))
def test_openb_values(nodes: list[list[str]], pods: list[list[str]]) -> None:
    attempt(load_nodes, csv_text(["sn", "cpu_milli", "memory_mib", "gpu", "model"], nodes), ".csv")
    attempt(load_pods, csv_text(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
                                 "gpu_spec"], pods), ".csv")


# -- spot traces and prices (bench spot-deadline --trace; the simulator's shared data) -------------
@FUZZ
@given(any_bytes(TRACE_SAMPLE))
def test_spot_trace_bytes(data: bytes) -> None:
    attempt(load_availability, data, ".json")


@FUZZ
@given(HOSTILE_YAML_VALUE, st.lists(HOSTILE_YAML_VALUE, max_size=6))
def test_spot_trace_values(gap: Any, ticks: list[Any]) -> None:
    try:
        text = json.dumps({"metadata": {"gap_seconds": gap}, "data": ticks})
    except (TypeError, ValueError):
        return
    attempt(load_availability, text.encode(), ".json")


@FUZZ
@given(any_bytes(PRICES_SAMPLE), hostile_rows(5))
def test_spot_prices(data: bytes, rows: list[list[str]]) -> None:
    attempt(load_spot_prices, data, ".tsv")
    attempt(load_spot_prices, csv_text(["az_id", "instance_type", "product",
                                        "price_usd_per_hour", "timestamp"], rows, "\t"), ".tsv")
