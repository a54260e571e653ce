"""Fixed-fleet sizing, hand-worked on the catalog's V100 and A100 types."""

from __future__ import annotations

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.control.admission import effective_request
from gpufleet.control.fleet import NodeGroup, fixed_fleet
from gpufleet.errors import InputError
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

V100 = frozenset({"V100-16GB"})
A100 = frozenset({"A100-40GB"})


def _types(*names: str) -> list:
    cat = default_instance_catalog()
    return [t for t in cat.types.values() if t.name in names]


def _job(i: int, gpus: int, models: frozenset[str] | None, start: float = 0.0,
         interruptible: bool = True) -> JobSpec:
    return JobSpec(f"j{i}", start, 100.0, ResourceRequest(num_gpu=gpus, gpu_models=models),
                   interruptible=interruptible)


def _plan(jobs: list[JobSpec], types: list, spot: bool = False, **kw: object) -> list[NodeGroup]:
    args: dict = dict(sharing=True, spot=spot, fixed_nodes=None, quantile=1.0)
    args.update(kw)
    return fixed_fleet([(j, effective_request(j, True, spot)) for j in jobs], types, **args)


def test_cheapest_per_gpu_type_sized_for_the_peak() -> None:
    # all three p3 types cost $3.06 per GPU-hour: the biggest wins the tie. Peak 12 GPUs → 2 × 8
    types = _types("p3.2xlarge", "p3.8xlarge", "p3.16xlarge")
    jobs = [_job(0, 4, V100), _job(1, 4, V100), _job(2, 4, V100, start=50.0),
            _job(3, 4, V100, start=500.0)]
    [g] = _plan(jobs, types)
    assert (g.instance_type.name, g.nodes, g.on_demand_nodes, g.mig) == ("p3.16xlarge", 2, 0,
                                                                         False)
    [fixed] = _plan(jobs, types, fixed_nodes=5)
    assert fixed.nodes == 5


def test_spot_fleet_keeps_on_demand_nodes_for_jobs_that_cannot_be_interrupted() -> None:
    types = _types("p3.16xlarge")
    jobs = [_job(0, 4, V100, interruptible=False), _job(1, 8, V100)]
    [g] = _plan(jobs, types, spot=True)
    assert (g.nodes, g.on_demand_nodes) == (2, 1)  # peak 12 GPUs; strict peak 4 GPUs → 1 node


def test_one_group_per_model_constraint_and_loose_jobs_join_the_biggest() -> None:
    types = _types("p3.16xlarge", "p4d.24xlarge")
    jobs = [_job(0, 1, V100), _job(1, 1, V100), _job(2, 1, A100), _job(3, 1, None)]
    groups = _plan(jobs, types)
    assert [g.instance_type.name for g in groups] == ["p4d.24xlarge", "p3.16xlarge"]
    assert all(g.nodes == 1 for g in groups)


def test_no_type_for_the_biggest_job_is_bad_input() -> None:
    with pytest.raises(InputError, match="no instance type offers 16 GPUs"):
        _plan([_job(0, 16, V100)], _types("p3.16xlarge"))
