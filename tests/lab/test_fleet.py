"""Which nodes ``lab up`` creates: the default mixed fleet, N nodes, or an openb CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.k8s.translate.node_objects import node_object
from gpufleet.lab.fleet import DEFAULT_NODE_TYPE, parse_nodes_option


def test_default_fleet_is_mixed_with_a_mig_a100() -> None:
    specs = parse_nodes_option(None)
    models = {s.gpu_model for s in specs}
    assert {"A100-40GB", "V100-16GB", "T4"} <= models
    assert any(s.mig_config for s in specs if s.gpu_model == "A100-40GB")
    assert {s.capacity_type for s in specs} == {"spot", "on-demand"}
    nodes = [node_object(s) for s in specs]
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)


def test_a_count_gives_that_many_nodes_of_the_default_type() -> None:
    specs = parse_nodes_option("3")
    assert [s.name for s in specs] == ["node-000", "node-001", "node-002"]
    assert {s.instance_type for s in specs} == {DEFAULT_NODE_TYPE}
    assert parse_nodes_option("0") == []


def test_an_openb_csv_gives_its_nodes(tmp_path: Path) -> None:
    csv = tmp_path / "nodes.csv"
    csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\nn-1,32000,1024,0,\n"
    )
    specs = parse_nodes_option(str(csv))
    assert [(s.name, s.gpus, s.gpu_model) for s in specs] == [("n-0", 2, "P100"), ("n-1", 0, None)]


def test_openb_trace_nodes_load(shared_data: Path) -> None:
    specs = parse_nodes_option(str(shared_data / "openb" / "openb_node_list_gpu_node.csv"))
    assert len(specs) == 1213
    assert all(node_object(s)["status"]["capacity"] for s in specs[:50])


@pytest.mark.parametrize("value", ["nope.csv", "99999"])
def test_bad_nodes_option_is_an_input_error(value: str) -> None:
    with pytest.raises(InputError):
        parse_nodes_option(value)
