"""DRA CEL selectors evaluated as Kubernetes evaluates them: the expressions of
``k8s.io/dynamic-resource-allocation/cel/compile_test.go`` (v0.36.3, scalar attributes, the
stored-expressions environment) with the results that test expects, then the selectors
NVIDIA's and the DRA drivers' examples use against a device as the lab publishes it."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.dra.cel import (
    DeviceInput,
    SelectorError,
    compile_cache_info,
    compile_selector,
    matches,
)
from gpufleet.k8s.dra.slices import DRIVER, resource_slices
from gpufleet.k8s.translate.node_objects import spec_from_instance

EX = "dra.example.com"


def dev(attributes: dict[str, Any] | None = None, capacity: dict[str, str] | None = None,
        multi: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "d0", "attributes": attributes or {},
                           "capacity": {k: {"value": v} for k, v in (capacity or {}).items()}}
    if multi is not None:
        out["allowMultipleAllocations"] = multi
    return out


ALL = """
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
"""

# (upstream case name, expression, driver, device, expected: True/False, or the error text as
# ("compile"|"runtime", fragment))
UPSTREAM: list[tuple[str, str, str, dict[str, Any], Any]] = [
    ("true", "true", "", dev(), True),
    ("false", "false", "", dev(), False),
    ("syntax-error", "?!", "", dev(), ("compile", "Syntax error")),
    # Kubernetes' type checker refuses it when compiling; here it fails when evaluated
    ("type-error", "1", "", dev(), ("runtime", "must evaluate to bool")),
    ("runtime-error-lookup-identifier",
     'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', "", dev(),
     ("runtime", "no such key: noSuchAttr")),
    ("runtime-error-lookup-map",
     'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', "",
     dev(), ("runtime", "no such key: noSuchAttr")),
    ("domain-check-negative", '"no-such-domain" in device.attributes', "", dev(), False),
    ("domain-check-positive", f'"{EX}" in device.attributes', "",
     dev({f"{EX}/something": {"bool": True}}), True),
    ("empty-driver-name", 'device.driver == ""', "", dev(), True),
    ("real-driver-name", f'device.driver == "{EX}"', EX, dev(), True),
    ("driver-name-qualifier", f'device.attributes["{EX}"].name', EX,
     dev({"name": {"bool": True}}), True),
    ("driver-name-qualifier-map-lookup", f'device.attributes["{EX}"]["name"]', EX,
     dev({"name": {"bool": True}}), True),
    ("qualified-attribute-name", 'device.attributes["other.example.com"].name', EX,
     dev({"other.example.com/name": {"bool": True}}), True),
    ("int", f'device.attributes["{EX}"].name > 0', EX, dev({"name": {"int": 1}}), True),
    ("string", f'device.attributes["{EX}"].name == "fish"', EX,
     dev({"name": {"string": "fish"}}), True),
    # a list attribute without the list-type feature
    ("attribute-access-causes-match-error", f'device.attributes["{EX}"].names', EX,
     dev({"names": {"strings": ["fish", "bird"]}}),
     ("runtime", "attribute names: unsupported attribute value")),
    ("version", f'device.attributes["{EX}"].name.isGreaterThan(semver("0.0.1"))', EX,
     dev({"name": {"version": "1.0.0"}}), True),
    ("version_v", f'device.attributes["{EX}"].name.isGreaterThan(semver("v0.0.1", true)) && '
     'isSemver("v1.0.0", true)', EX, dev({"name": {"version": "1.0.0"}}), True),
    ("quantity", f'device.capacity["{EX}"].name.isGreaterThan(quantity("1Ki"))', EX,
     dev(capacity={"name": "1Mi"}), True),
    ("check-positive", f'"name" in device.capacity["{EX}"] && '
     f'device.capacity["{EX}"].name.isGreaterThan(quantity("1Ki"))', EX,
     dev(capacity={"name": "1Mi"}), True),
    # no capacity at all: the domain reads as an empty map, "name" is not in it
    ("check-negative", f'!("name" in device.capacity["{EX}"]) || '
     f'device.capacity["{EX}"].name.isGreaterThan(quantity("1Ki"))', "", dev(), True),
    ("all", ALL, EX, dev({"bool": {"bool": True}, "int": {"int": 1},
                          "string": {"string": "fish"}, "version": {"version": "1.0.0"}},
                         {"quantity": "1Mi"}), True),
    ("many", f'device.attributes["{EX}"].a && device.attributes["{EX}"].b && '
     f'device.attributes["{EX}"].c', EX,
     dev({"a": {"bool": True}, "b": {"bool": True}, "c": {"bool": True}}), True),
    ("check_attribute_domains", f'device.attributes.exists_one(x, x == "{EX}")', EX,
     dev({"services": {"string": "some_example_value"}}), True),
    ("check_attribute_ids", f'device.attributes["{EX}"].exists_one(x, x == "services")', EX,
     dev({"services": {"string": "some_example_value"}}), True),
    ("split_attribute", f'device.attributes["{EX}"].services.split("example").size() >= 2', EX,
     dev({"services": {"string": "some_example_value"}}), True),
    ("regexp_attribute", f'device.attributes["{EX}"].services.matches("[^a]?sym")', EX,
     dev({"services": {"string": "asymetric"}}), True),
    ("check_capacity_domains", f'device.capacity.exists_one(x, x == "{EX}")', EX,
     dev(capacity={"memory": "1Mi"}), True),
    ("check_capacity_ids", f'device.capacity["{EX}"].exists_one(x, x == "memory")', EX,
     dev(capacity={"memory": "1Mi"}), True),
    ("allow_multiple_allocations", "device.allowMultipleAllocations == true", EX,
     dev(multi=True), True),
    ("allow_multiple_allocations_default", "device.allowMultipleAllocations == false", EX,
     dev(), True),
    ("allow_multiple_allocations_false", "device.allowMultipleAllocations == false", EX,
     dev(multi=False), True),
    # upstream "bind" matches; cel.bind is not in this evaluator and says so
    ("bind", f'cel.bind(dra, device.attributes["{EX}"], dra.name)', EX,
     dev({"name": {"bool": True}}), ("compile", "cel.bind is not supported")),
]


def _check(expr: str, device: DeviceInput, want: Any) -> None:
    if isinstance(want, tuple):
        kind, fragment = want
        with pytest.raises(SelectorError) as err:
            matches(expr, device)
        assert err.value.compile == (kind == "compile")
        assert fragment in str(err.value), str(err.value)
        assert str(err.value).startswith(f"CEL {kind} error: ")
        return
    assert matches(expr, device) is want


@pytest.mark.parametrize(("name", "expr", "driver", "device", "want"), UPSTREAM,
                         ids=[c[0] for c in UPSTREAM])
def test_kubernetes_compile_test_cases(name: str, expr: str, driver: str,
                                       device: dict[str, Any], want: Any) -> None:
    _check(expr, DeviceInput(device, driver), want)


def _lab_gpu() -> dict[str, Any]:
    """gpu-0 of a p4d.24xlarge (8 × A100-SXM4-40GB) as the lab publishes it."""
    spec = spec_from_instance(default_instance_catalog()["p4d.24xlarge"], "n0")
    return next(d for s in resource_slices(spec) for d in s["spec"].get("devices") or ()
                if d["name"] == "gpu-0")


NV = f"device.attributes['{DRIVER}']"
CAP = f"device.capacity['{DRIVER}']"
# the lab's gpu-0: productName 'NVIDIA A100-SXM4-40GB', index/minor 0, memory 40Gi,
# driverVersion 550.0.0 (CUDA 12.4), cudaComputeCapability 8.0.0, pcieRoot pci0000:00,
# allowMultipleAllocations true
NVIDIA = [
    (f"{NV}.productName.lowerAscii().matches('^.*a100.*$')", True),
    (f"{NV}.productName.lowerAscii().matches('^.*h100.*$')", False),
    (f"{NV}.productName.upperAscii().contains('SXM4')", True),
    (f"{CAP}.memory.compareTo(quantity('40Gi')) >= 0", True),
    (f"{CAP}.memory.compareTo(quantity('80Gi')) >= 0", False),
    (f"{CAP}.memory == quantity('40960Mi')", True),  # quantities equal by value
    (f"{CAP}.memory.isLessThan(quantity('41Gi'))", True),
    (f"{NV}.driverVersion.isGreaterThan(semver('535.0.0'))", True),
    (f"{NV}.driverVersion.isGreaterThan(semver('560.0.0'))", False),
    (f"{NV}.cudaComputeCapability.compareTo(semver('8.0.0')) == 0", True),
    (f"{NV}.cudaComputeCapability.major() >= 8", True),
    (f"'{DRIVER}' in device.attributes", True),
    (f"{NV}.index == 0", True),
    (f"{NV}.index == 1", False),
    (f"{NV}['minor'] < 4", True),
    ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'", True),
    (f"device.driver == '{DRIVER}' && {NV}.type == 'gpu' && device.allowMultipleAllocations",
     True),
    (f"{NV}.productName.split(' ')[1].startsWith('A100')", True),
    (f"{NV}.architecture in ['Ampere', 'Hopper']", True),
    (f"{NV}.productName.find('[0-9]+GB') == '40GB'", True),
    ("quantity('1Gi').add(quantity('1Gi')).compareTo(quantity('2Gi')) == 0", True),
    # errors: an attribute the device does not have, an undeclared function, comparing a
    # quantity with a version
    (f"{NV}.nvlinkDomain == 0", ("runtime", "no such key: nvlinkDomain")),
    (f"{NV}.productName.toLower() == 'x'", ("compile", "undeclared reference to 'toLower'")),
    (f"{NV}.productName == x", ("compile", "undeclared reference to 'x'")),
    (f"{CAP}.memory.isGreaterThan(semver('1.0.0'))", ("runtime", "no such overload")),
    (f"{NV}.productName.matches('(')", ("runtime", "regex")),
]


@pytest.mark.parametrize(("expr", "want"), NVIDIA)
def test_nvidia_selectors_on_a_lab_device(expr: str, want: Any) -> None:
    _check(expr, DeviceInput(_lab_gpu(), DRIVER), want)


def test_each_expression_compiles_once() -> None:
    expr = f"{NV}.index >= 0 && {NV}.productName.startsWith('NVIDIA') /* once */"
    expr = expr.replace(" /* once */", " && true")
    before = compile_cache_info()
    devices = [DeviceInput(_lab_gpu(), DRIVER) for _ in range(3)]
    for d in devices * 2:
        assert matches(expr, d)
    after = compile_cache_info()
    assert after.misses - before.misses == 1
    assert after.hits - before.hits == 5
    assert compile_selector(expr) is compile_selector(expr)


def test_a_bad_version_attribute_fails_every_expression_on_that_device() -> None:
    d = DeviceInput(dev({"v": {"version": "1.0"}}), EX)
    with pytest.raises(SelectorError, match="parse semantic version"):
        matches("true", d)
