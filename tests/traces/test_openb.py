"""openb loader: the real trace, and every kind of malformed row named by file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.traces.openb import build_fleet, load_nodes, load_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def test_real_trace_matches_protocol_totals(shared_data: Path) -> None:
    nodes = load_nodes(shared_data / "openb" / "openb_node_list_gpu_node.csv")
    pods = load_pods(shared_data / "openb" / "openb_pod_list_default.csv")
    assert len(nodes) == 1213 and len(pods) == 8152
    state = build_fleet(nodes)
    assert state.gpu_capacity_milli() == 6_212_000
    by_model: dict[str, int] = {}
    for n in nodes:
        assert n.model is not None
        by_model[n.model] = by_model.get(n.model, 0) + n.num_gpu
    assert by_model == {
        "G2": 4392,
        "T4": 842,
        "P100": 265,
        "G3": 312,
        "V100-16GB": 195,
        "V100-32GB": 204,
        "A10": 2,
    }
    requested = sum(p.request.total_gpu_milli for p in pods)
    assert round(100 * requested / 6_212_000, 2) == 97.98
    assert sum(1 for p in pods if p.request.num_gpu == 0) == 1088


def _write(tmp_path: Path, header: str, row: str, name: str = "f.csv") -> Path:
    f = tmp_path / name
    f.write_text(header + row)
    return f


@pytest.mark.parametrize(
    ("row", "field", "why"),
    [
        ("p1,1000,100,1,-5,,LS\n", "gpu_milli", "non-negative"),
        ("p1,1000,100,1,1500,,LS\n", "gpu_milli", "at most 1000"),
        ("p1,-1,100,1,500,,LS\n", "cpu_milli", "non-negative"),
        ("p1,1000,100,two,500,,LS\n", "num_gpu", "integer"),
        ("p1,1000,100,1,500,G9,LS\n", "gpu_spec", "unknown GPU model 'G9'"),
        ("p1,1000,100,2,500,,LS\n", "gpu_milli", "whole GPUs"),
        ("p1,1000,100,1,0,,LS\n", "gpu_milli", "1..1000"),
    ],
)
def test_bad_pod_rows(tmp_path: Path, row: str, field: str, why: str) -> None:
    f = _write(tmp_path, POD_HEADER, "ok,1000,100,1,500,T4|V100M16,LS\n" + row)
    with pytest.raises(InputError, match=why) as exc:
        load_pods(f)
    assert exc.value.line == 3 and exc.value.field == field and exc.value.path == str(f)


def test_missing_pod_column(tmp_path: Path) -> None:
    f = _write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_spec\n", "p,1,1,0,\n")
    with pytest.raises(InputError, match="missing column") as exc:
        load_pods(f)
    assert exc.value.line == 1 and exc.value.field == "gpu_milli"


def test_short_row(tmp_path: Path) -> None:
    f = _write(tmp_path, POD_HEADER, "p1,1000,100\n")
    with pytest.raises(InputError, match="expected 7 columns") as exc:
        load_pods(f)
    assert exc.value.line == 2


def test_aliases_resolve_in_spec_and_nodes(tmp_path: Path) -> None:
    pods = load_pods(_write(tmp_path, POD_HEADER, "p1,1000,100,1,500,V100M32|G1,LS\n"))
    assert pods[0].request.gpu_models == frozenset({"V100-32GB", "G1"})
    nodes = load_nodes(
        _write(tmp_path, NODE_HEADER, "n1,8000,1000,2,V100M16\nn2,8000,1000,0,\n", "n.csv")
    )
    assert [n.model for n in nodes] == ["V100-16GB", None]


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("n1,8000,1000,2,X100\n", "model"),
        ("n1,8000,-1,2,T4\n", "memory_mib"),
        (",8000,1,2,T4\n", "sn"),
    ],
)
def test_bad_node_rows(tmp_path: Path, row: str, field: str) -> None:
    with pytest.raises(InputError) as exc:
        load_nodes(_write(tmp_path, NODE_HEADER, row))
    assert exc.value.line == 2 and exc.value.field == field


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_nodes(tmp_path / "absent.csv")
    with pytest.raises(InputError, match="empty file"):
        load_pods(_write(tmp_path, "", ""))


UPSTREAM_MULTIGPU_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
)


def test_gpu_spec_column_is_optional_as_upstream(tmp_path: Path) -> None:
    """openb_pod_list_multigpu*.csv and other upstream variants have no gpu_spec column."""
    p = tmp_path / "openb_pod_list_multigpu50.csv"
    p.write_text(
        UPSTREAM_MULTIGPU_HEADER
        + "openb-pod-0000,12000,16384,1,1000,LS,Running,0,12537496,0\n"
        + "openb-pod-0001,6000,12288,4,1000,BE,Running,427061,12902960,427061\n"
        + "openb-pod-0002,4000,8192,0,0,LS,Running,5,9,5\n"
    )
    pods = load_pods(p)
    assert [q.request.num_gpu for q in pods] == [1, 4, 0]
    assert all(q.request.gpu_models is None for q in pods)


@pytest.mark.parametrize(
    ("header", "row", "field"),
    [
        (NODE_HEADER, "n1,99999999999999999999999999,262144,8,V100M16", "cpu_milli"),
        (NODE_HEADER, "n1,32000,99999999999999999999,8,V100M16", "memory_mib"),
        (POD_HEADER, "p1,99999999999999999999999,1000,1,1000,,LS", "cpu_milli"),
        (POD_HEADER, "p1,1000,1e30,1,1000,,LS", "memory_mib"),
    ],
)
def test_huge_values_are_bounded(tmp_path: Path, header: str, row: str, field: str) -> None:
    p = _write(tmp_path, header, row)
    loader = load_nodes if header == NODE_HEADER else load_pods
    with pytest.raises(InputError) as ei:
        loader(p)
    assert (ei.value.path, ei.value.line, ei.value.field) == (str(p), 2, field)


def test_non_utf8_and_directory(tmp_path: Path) -> None:
    p = tmp_path / "n.csv"
    p.write_bytes(NODE_HEADER.encode() + b"n\xff,1,1,0,\n")
    with pytest.raises(InputError, match="not UTF-8") as ei:
        load_nodes(p)
    assert ei.value.line == 2
    with pytest.raises(InputError, match="is a directory"):
        load_pods(tmp_path)
