"""The one registry type: default, aliases, duplicates, and the error that lists valid names."""

from __future__ import annotations

import pytest

from gpufleet.errors import InputError
from gpufleet.market.bidding import STRATEGIES as SPOT_STRATEGIES
from gpufleet.market.deadline import POLICIES as DEADLINE_POLICIES
from gpufleet.placement.registry import POLICIES as PLACEMENT_POLICIES
from gpufleet.recovery.strategies import STRATEGIES as RECOVERY_STRATEGIES
from gpufleet.registry import Registry


def _fruit() -> Registry[int]:
    reg: Registry[int] = Registry("fruit", field="fruit", default="pear")
    reg.add("pear", 1, aliases=("poire",))
    reg.register("apple")(2)
    return reg


def test_lookup_default_and_alias() -> None:
    reg = _fruit()
    assert reg.get("apple") == 2
    assert reg.get() == 1  # the default
    assert reg.get("poire") == 1 and reg.resolve("poire") == "pear"
    assert reg.names() == ["apple", "pear"]
    assert reg.valid() == ["apple", "pear", "poire"]
    assert "poire" in reg and "plum" not in reg


def test_unknown_name_lists_the_valid_ones_on_the_field() -> None:
    with pytest.raises(InputError) as exc:
        _fruit().get("plum")
    assert exc.value.field == "fruit"
    assert str(exc.value) == "field 'fruit': unknown fruit 'plum'; valid: apple, pear, poire"


def test_no_default_and_no_name() -> None:
    reg: Registry[int] = Registry("thing", field="thing")
    reg.add("a", 1)
    with pytest.raises(InputError, match="no thing given; valid: a"):
        reg.get()


@pytest.mark.parametrize("clash", ["pear", "poire"])
def test_a_name_or_alias_registered_twice_is_a_bug(clash: str) -> None:
    reg = _fruit()
    with pytest.raises(ValueError, match="registered twice"):
        reg.add(clash, 3)
    with pytest.raises(ValueError, match="registered twice"):
        reg.alias(clash, "apple")
    with pytest.raises(ValueError, match="unknown"):
        reg.alias("plum", "cherry")


def test_registration_order_kept_when_asked() -> None:
    reg: Registry[int] = Registry("x", field="x", sort=False)
    reg.add("b", 1)
    reg.add("a", 2)
    assert reg.names() == ["b", "a"]


@pytest.mark.parametrize(
    ("registry", "default", "field"),
    [
        (PLACEMENT_POLICIES, "fgd-strand", "policy"),
        (RECOVERY_STRATEGIES, "checkpoint-requeue", "recovery"),
        (SPOT_STRATEGIES, "capacity-aware", "spot_strategy"),
        (DEADLINE_POLICIES, "smdp", "policy"),
    ],
    ids=["placement", "recovery", "spot", "deadline"],
)
def test_every_policy_kind_uses_it(registry: Registry[object], default: str, field: str) -> None:
    assert registry.default == default and default in registry.names()
    with pytest.raises(InputError) as exc:
        registry.get("no-such-name")
    assert exc.value.field == field and default in str(exc.value)


def test_ours_is_the_default_deadline_policy() -> None:
    assert DEADLINE_POLICIES.resolve("ours") == DEADLINE_POLICIES.default
