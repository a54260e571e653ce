"""Spot, on-demand or wait: the per-tick capacity choice of a checkpointed job with a deadline.

This is the NSDI'24 "Can't Be Late" setting (see ``docs/spot-deadline.md``). Every tick of the
zone's availability process the job's controller picks :class:`Choice` ``IDLE``, ``SPOT`` or
``ON_DEMAND``. A controller reads only what the job has seen — time, work done, what it holds,
overhead still to pay, spot availability now and before — never the future and never a clock,
so the same controller drives the benchmark and the fleet simulator's deadline lever.

Layout: ``controller`` (the job, the choice, the safety net, batch rules), ``registry`` (policies
by name; an unknown name fails listing the valid ones), one module per policy family
(``policies``: on-demand, greedy, Uniform Progress; ``ours``: markov; ``mdp``: smdp, the
default), and ``bench/`` — the NSDI'24 benchmark (tick simulator, offline optimum, protocol),
which nothing outside benchmarks and tests needs. Each decision ends with the shared
:func:`safety_net`, which is what makes a deadline miss impossible whatever the policy's
heuristic proposed.

Example (main setting, gap 195 s, C 48 h, D 60 h, d 0.2 h): an idle job at t = 50 h with
rem = 9.5 h of work left has R = floor(10 h / 195 s)·195 s = 9.967 h and
T2 = ceil((9.5 h + 0.4 h)/195 s)·195 s = 9.913 h < R: an idle job may still wait. One idle
tick later R = 9.913 h = T2 and the net moves it to on-demand, with T1 = 9.75 h still < R:
the room for one more switch is what lets it return to spot if the policy asks.
"""

from gpufleet.market.deadline import mdp, ours, policies  # noqa: F401  (fill the registry)
from gpufleet.market.deadline.controller import (
    DONE_EPS_S,
    ON_DEMAND_PRICE_PER_HOUR,
    SPOT_PRICE_PER_HOUR,
    BatchRule,
    Choice,
    DeadlineController,
    DeadlineJob,
    DeadlinePolicy,
    RuleController,
    RuleFactory,
    RulePolicy,
    safety_net,
)
from gpufleet.market.deadline.registry import (
    DEFAULT_DEADLINE_POLICY,
    POLICIES,
    get_deadline_policy,
    list_deadline_policies,
    register,
)

__all__ = [
    "DEFAULT_DEADLINE_POLICY",
    "DONE_EPS_S",
    "ON_DEMAND_PRICE_PER_HOUR",
    "POLICIES",
    "SPOT_PRICE_PER_HOUR",
    "BatchRule",
    "Choice",
    "DeadlineController",
    "DeadlineJob",
    "DeadlinePolicy",
    "RuleController",
    "RuleFactory",
    "RulePolicy",
    "get_deadline_policy",
    "list_deadline_policies",
    "register",
    "safety_net",
]
