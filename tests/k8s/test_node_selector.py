"""nodeSelector + required node affinity, Kubernetes' semantics."""

from __future__ import annotations

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.k8s.translate.node_selector import lift_gpu_constraints, matches, selector_of


def aff(*terms: list[dict]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def test_terms_are_ored_expressions_anded_and_node_selector_in_every_term() -> None:
    sel, why = selector_of({"nodeSelector": {"team": "a"}, "affinity": aff(
        [{"key": "zone", "operator": "In", "values": ["z1"]}],
        [{"key": "zone", "operator": "NotIn", "values": ["z1", "z2"]},
         {"key": "gpu", "operator": "Exists"}])})
    assert why is None and len(sel) == 2
    assert matches({"team": "a", "zone": "z1"}, sel)
    assert not matches({"team": "b", "zone": "z1"}, sel)
    assert matches({"team": "a", "zone": "z9", "gpu": "1"}, sel)
    assert not matches({"team": "a", "zone": "z2", "gpu": "1"}, sel)
    assert not matches({"team": "a"}, sel)


def test_numeric_and_absence_operators() -> None:
    sel, _ = selector_of({"affinity": aff([
        {"key": "cores", "operator": "Gt", "values": ["8"]},
        {"key": "cores", "operator": "Lt", "values": ["64"]},
        {"key": "spot", "operator": "DoesNotExist"}])})
    assert matches({"cores": "32"}, sel)
    assert not matches({"cores": "8"}, sel) and not matches({"cores": "x"}, sel)
    assert not matches({"cores": "32", "spot": ""}, sel)
    assert matches({}, selector_of({})[0])


def test_bad_operator_is_a_reason() -> None:
    _, why = selector_of({"affinity": aff([{"key": "a", "operator": "Near", "values": []}])})
    assert why is not None and "Near" in why


def test_gpu_constraints_lifted_only_from_a_single_term() -> None:
    cat = default_gpu_catalog()
    one, _ = selector_of({"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4", "z": "a"}})
    models, cuda, rest = lift_gpu_constraints(one, cat)
    assert models == {"T4"} and cuda == 0 and rest == ((("z", "In", ("a",)),),)
    two, _ = selector_of({"affinity": aff(
        [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]}],
        [{"key": "nvidia.com/cuda.runtime.major", "operator": "In", "values": ["12"]}])})
    assert lift_gpu_constraints(two, cat) == (None, 0, two)
