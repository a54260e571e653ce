"""Deadline policies by name (``gpufleet.registry.Registry``): ``ours`` is the default.

Each policy module registers its BatchRule factory with :func:`register`; the package imports
every policy module, so the registry is full as soon as ``gpufleet.market.deadline`` is.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.market.deadline.controller import RuleFactory, RulePolicy
from gpufleet.registry import Registry

DEFAULT_DEADLINE_POLICY = "smdp"
POLICIES: Registry[RulePolicy] = Registry(
    "deadline policy", field="policy", default=DEFAULT_DEADLINE_POLICY
)


def register(
    name: str, summary: str, *, aliases: tuple[str, ...] = ()
) -> Callable[[RuleFactory], RuleFactory]:
    """Register a BatchRule factory under ``name`` (decorator, SkyPilot-style)."""

    def deco(factory: RuleFactory) -> RuleFactory:
        POLICIES.add(name, RulePolicy(name=name, factory=factory, summary=summary),
                     aliases=aliases)
        return factory

    return deco


def list_deadline_policies() -> list[str]:
    """Registered online policy names (the benchmark adds the offline ``optimal``)."""
    return POLICIES.names()


def get_deadline_policy(name: str) -> RulePolicy:
    """The policy called ``name`` (``ours`` is the default); unknown names list the valid ones."""
    return POLICIES.get(name)
