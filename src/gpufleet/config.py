"""Scenarios: which levers are on, and the knobs of each, validated from YAML.

The default run (``default_scenarios``) is the report's columns:

* baselines — ``static`` (a fixed on-demand cluster sized for the workload's peak, whole GPUs,
  spread placement, no autoscaling, spot or checkpoints: the field report's situation),
  ``static-p99`` (the same, right-sized at the p99 of concurrent demand: jobs queue when it is
  full) and ``static-reserved`` (``static-p99`` billed at the provider's 1-year commitment
  rate, ``gpufleet.catalog.commitments``);
* ``gpufleet`` (every lever, with the capacity rules headroom and the on-demand → spot swap;
  ``gpufleet-no-swap``, ``gpufleet-no-headroom`` and ``gpufleet-plain`` leave them out and run
  only when named);
* leave-one-out: ``gpufleet-no-<lever>`` for each lever (what that lever adds to the others);
* the additive chain ``static`` → ``chain-autoscaling-packing`` → ``chain-sharing`` →
  ``gpufleet-no-checkpointing`` (+spot) → ``gpufleet`` (+checkpointing), ``CHAIN``;
* ``gpufleet-bid-agent``: ``gpufleet`` with the seed's ``SpotBidAgent`` as the spot bidder (on
  flat spot prices it never bids; the column shows what that costs).

The old "static + one lever" scenarios (named after the lever) stay available by name
(``builtin_scenarios``, ``gpufleet simulate --only packing``) but are not run by default: one
lever alone over a peak-sized static cluster is a straw man (autoscaling with spread placement
and no checkpointing grows the fleet).

A scenario file is either one mapping or ``{scenarios: [ ... ]}``; unknown keys are errors, and
each error names the file, the line of the scenario and the field.

Hardware failures: every built-in scenario runs with unexpected node failures at the rate Meta
reports for Llama 3 pre-training (Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.4:
419 unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs, 78 % of them hardware):
16,384 × 54 × 24 = 21,233,664 GPU-hours / 419 = one failure per 50,677 GPU-hours, so a node of
g GPUs fails after an exponential time of mean 50,677 / g hours (8 GPUs: 6,335 h ≈ 264 days).
Every unexpected interruption is counted, not only the hardware share, because each one ends
the running job the same way. A scenario file leaves them off unless it sets
``gpu_mtbf_hours``, so replays of a trace stay exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.catalog.yamlfile import read_yaml_document, validation_to_input_error
from gpufleet.errors import InputError
from gpufleet.queueing.teams.settings import TeamsSettings

LEVERS = ("packing", "sharing", "autoscaling", "spot", "checkpointing")

LLAMA3_GPU_HOURS = 16_384 * 54 * 24
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_GPU_MTBF_HOURS = LLAMA3_GPU_HOURS / LLAMA3_UNEXPECTED_INTERRUPTIONS  # 50,677 GPU-hours

# $ per GPU-hour of delay for jobs that state none (control.value_of_time): no v meets the targets
# (late > 5 min <= 5 %, cost <= 1.05 x v = 0's) on Philly or the embedded default, so the knee of
# their worst case (sim.frontier.choose over sim.frontier.worst_case; docs/simulator.md)
DEFAULT_VALUE_OF_TIME = 3.0


DAY_S = 86_400.0
MAX_NODES = 10_000  # fixed_nodes / max_nodes
NAME = r"^[A-Za-z0-9_.-]+$"


class KwokSettings(BaseModel):
    """The lab's cloud (``gpufleet.cloud.kwok``): its market clock and reclaim notice.

    The market clock is ``market_start_s + (now - origin) × speedup`` seconds into the spot
    availability traces, so a lab run replays hours of trace in minutes when ``speedup`` > 1."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    speedup: float = Field(default=1.0, gt=0, le=1e6, description=(
        "Market seconds per wall-clock second: > 1 replays hours of spot trace in minutes."))
    market_start_s: float = Field(default=0.0, ge=0, le=365 * DAY_S, description=(
        "Where in the spot availability traces the market clock starts, seconds."))
    notice_s: float = Field(default=120.0, ge=0, le=3600, description=(
        "Seconds between a reclaim notice and the node's removal (AWS gives two minutes)."))
    namespace: str = Field(default="kube-system", min_length=1, max_length=63, description=(
        "Namespace of the lab cloud's own objects (its pending launches)."))
    # A real cloud's API answers to cloud credentials, not to the controller's RBAC: so may the
    # lab's (the chart's RBAC grants no Node creation).
    kubeconfig: str | None = Field(default=None, min_length=1, description=(
        "The lab cloud's own credentials: a kubeconfig for its calls (creating Nodes and their "
        "ResourceSlices, its pending launches, the market clock); default the controller's."))


class CloudSettings(BaseModel):
    """The live capacity controller's cloud (``gpufleet controller``; the simulator ignores it).

    ``registration_timeout_s``: a launched instance whose Node has not registered by then is
    deleted (Karpenter's registration TTL, 15 min; the lab's nodes register in seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Literal["kwok", "aws", "aliyun"] = Field(default="kwok", description=(
        "The provider: kwok (the lab's fake nodes), aws (EC2 Fleet) or aliyun (ECS)."))
    registration_timeout_s: float = Field(default=900.0, gt=0, le=DAY_S, description=(
        "A launched instance whose Node has not registered after this many seconds is deleted."))
    kwok: KwokSettings = Field(default=KwokSettings(), description="The lab cloud's settings.")
    # The provider's own settings, required for that cloud: a mapping with the keys of its config
    # file (gpufleet.cloud.aws_config.AwsConfig / gpufleet.cloud.aliyun.AliyunConfig), or the
    # path of that file. Validated when the controller builds the provider (one line naming the
    # field, exit 2), so the simulator never imports a cloud SDK.
    aws: dict[str, Any] | str | None = Field(default=None, description=(
        "The AWS provider's settings (needed with name: aws): its config keys, or that file's "
        "path."))
    aliyun: dict[str, Any] | str | None = Field(default=None, description=(
        "The Aliyun provider's settings (needed with name: aliyun): its config keys, or that "
        "file's path."))

    @model_validator(mode="after")
    def _provider_settings(self) -> CloudSettings:
        if self.name in ("aws", "aliyun") and getattr(self, self.name) is None:
            raise ValueError(f"cloud {self.name!r} needs its {self.name!r} settings: a mapping "
                             "or the path of its config file (docs/cloud.md)")
        return self


class Scenario(BaseModel):
    """One scenario; every number bounded (docs/simulator.md lists the ranges and why).

    The bounds keep a simulation finite and its numbers meaningful: an event every 1e-6 s
    (``scan_interval_s``, ``sample_interval_s``, ``price_tick_s``, ``checkpoint_interval_s``) or a
    node failing every 0.4 ms (``gpu_mtbf_hours`` 1e-7) never finishes, and ``inf`` / ``nan`` is
    never a meaningful setting (``allow_inf_nan=False``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=64, pattern=NAME, description=(
        "The scenario's name: its column in the report, what --only selects."))
    packing: bool = Field(default=True, description=(
        "Lever: place jobs with the packing policy; false: spread placement."))
    sharing: bool = Field(default=True, description=(
        "Lever: fractional and MIG jobs share GPUs; false: each takes whole GPUs."))
    autoscaling: bool = Field(default=True, description=(
        "Lever: grow and shrink the fleet from pending demand; false: a fixed fleet "
        "(fixed_nodes, or sized by fixed_size_quantile)."))
    spot: bool = Field(default=True, description=(
        "Lever: run work on spot capacity where its expected cost is lower."))
    checkpointing: bool = Field(default=True, description=(
        "Lever: interrupted jobs resume from their last checkpoint (recovery); false: they "
        "start over."))

    provider: Literal["aws", "aliyun"] = Field(default="aws", description=(
        "The cloud whose instance catalog and prices are used."))
    instance_types: tuple[str, ...] | None = Field(default=None, max_length=256, description=(
        "Restrict the catalog to these instance types of the provider; null: all of them."))
    placement: str | None = Field(default=None, max_length=64, description=(
        "A placement policy by name (e.g. spread), overriding the one packing chooses."))
    fixed_nodes: int | None = Field(default=None, ge=1, le=MAX_NODES, description=(
        "Nodes of a fleet without autoscaling; null: sized from the workload "
        "(fixed_size_quantile)."))
    fixed_size_quantile: float = Field(default=1.0, gt=0, le=1, description=(
        "A fleet without autoscaling is sized at this time-weighted quantile of concurrent "
        "demand: 1 = the peak; 0.99 = static-p99, where jobs queue when it is full."))
    pricing: Literal["on-demand", "reserved"] = Field(default="on-demand", description=(
        "On-demand nodes billed at the list price, or at the provider's 1-year commitment rate "
        "(reserved instances / savings plans, gpufleet.catalog.commitments)."))
    provisioning_delay_s: float = Field(default=180.0, ge=0, le=DAY_S, description=(
        "Seconds from a launch to the node being ready."))
    scan_interval_s: float = Field(default=10.0, ge=1, le=3600, description=(
        "Seconds between the capacity loop's scans of pending pods and idle nodes."))
    scale_down_unneeded_s: float = Field(default=600.0, ge=0, le=7 * DAY_S, description=(
        "A node empty or under utilization_threshold for this many seconds may be removed or "
        "consolidated."))
    utilization_threshold: float = Field(default=0.5, ge=0, le=1, description=(
        "A node with less than this share of its GPUs allocated is under-used (a "
        "consolidation candidate)."))
    consolidation: bool = Field(default=True, description=(
        "Move the work of under-used nodes elsewhere and remove them (or replace them with "
        "cheaper ones)."))
    multi_node_consolidation: bool = Field(default=True, description=(
        "After single-node consolidation, consolidate several nodes at once; may launch one "
        "cheaper node."))
    consolidation_recheck_s: float = Field(default=300.0, ge=1, le=DAY_S, description=(
        "The least seconds between two consolidation searches (control.scan)."))
    pending_gpu_threshold: float = Field(default=2.0, ge=0, le=100_000, description=(
        "Scale up once the pending pods ask at least this many GPUs (or the oldest waited "
        "max_pending_wait_s)."))
    max_pending_wait_s: float = Field(default=60.0, ge=0, le=DAY_S, description=(
        "Scale up for a pending pod that waited this many seconds, below the GPU threshold "
        "too."))
    max_nodes: int = Field(default=5000, ge=1, le=MAX_NODES, description=(
        "The most nodes the fleet may have."))

    spot_strategy: str = Field(default="capacity-aware", max_length=64, description=(
        "How spot offers are chosen and bid (gpufleet.market), e.g. capacity-aware, "
        "bid-agent."))
    spot_market: Literal["trace", "price"] = Field(default="trace", description=(
        "trace: spot availability replayed from traces (availability_dir); price: a "
        "simulated price process (price_volatility, price_reversion, price_tick_s)."))
    availability_dir: str | None = Field(default=None, min_length=1, max_length=4096,
                                         description=(
        "Folder of spot availability traces (<zone>_<gpu>_<n>.json); null: "
        "<data>/spot-traces/availability."))
    price_volatility: float = Field(default=0.08, ge=0, le=1, description=(
        "The spot price process's volatility: the log-Ornstein-Uhlenbeck sigma per tick."))
    price_reversion: float = Field(default=0.05, gt=0, le=1, description=(
        "The spot price process's mean reversion per tick."))
    price_tick_s: float = Field(default=300.0, ge=60, le=DAY_S, description=(
        "Seconds between the price process's spot price changes."))
    spot_discount: float = Field(default=0.3, gt=0, le=1, description=(
        "Spot over on-demand price where there is no price data."))

    recovery: str = Field(default="checkpoint-requeue", max_length=64, description=(
        "What an interrupted job does (gpufleet.recovery), e.g. checkpoint-requeue, "
        "restart-from-zero."))
    checkpoint_interval_s: float | None = Field(default=None, ge=60, le=7 * DAY_S, description=(
        "Seconds between a job's checkpoints; null: Young/Daly's interval."))
    deadline_policy: str | None = Field(default="default", max_length=64, description=(
        "Deadline-aware spot fallback: \"default\" is "
        "gpufleet.market.deadline.DEFAULT_DEADLINE_POLICY; null: deadline jobs are treated "
        "like any other."))

    gpu_mtbf_hours: float | None = Field(default=None, ge=10, le=1e9, description=(
        "Unexpected node failures: a node of g GPUs fails at rate g / gpu_mtbf_hours "
        "(exponential, seeded); null: none, so a replay is exact."))

    sample_interval_s: float = Field(default=600.0, ge=60, le=DAY_S, description=(
        "Seconds between the simulator's samples of the fleet (the report's time series)."))
    starvation_s: float | None = Field(default=None, ge=1, le=30 * DAY_S, description=(
        "A queue head that waited longer than this stops backfill, so small jobs cannot "
        "starve a big gang; null: never."))
    gang_room: bool = Field(default=True, description=(
        "A pending gang waits, scales up or evicts movable pods, whichever costs least "
        "(control.gang_room); false: scale-up launches for every pending gang."))
    spot_swap: bool = Field(default=False, description=(
        "Move a running on-demand node's work to spot when the move pays (control.spot_swap); "
        "needs autoscaling, spot and checkpointing. Off unless set: it drains running work."))
    headroom: bool = Field(default=False, description=(
        "Keep spare GPUs for the arrivals expected while a node boots (control.headroom); "
        "needs autoscaling. Off unless set: it is capacity paid before any pod asks."))
    value_of_time_usd_per_gpu_hour: float = Field(
        default=DEFAULT_VALUE_OF_TIME, ge=0, le=1e6, description=(
            "What a GPU-hour of a job's delay costs its owner, $: added to the on-demand rate "
            "wherever the spot, swap and gang-room rules price delay (control.value_of_time). "
            "The value for jobs whose trace entry, pod annotation or team sets none. Default 3: "
            "the knee of the cost-lateness frontier on Philly and the embedded default "
            "workload (sim.frontier.choose); 0: delay is priced at the on-demand rate only."))

    cloud: CloudSettings | None = Field(default=None, description=(
        "The live capacity controller's cloud; null: the controller only schedules. The "
        "simulator ignores it."))

    teams: TeamsSettings | None = Field(default=None, description=(
        "Team queues: quotas, cohorts, fair-share weights, budgets; null: no quotas."))

    @property
    def levers(self) -> dict[str, bool]:
        return {k: getattr(self, k) for k in LEVERS}


def _static(**kw: Any) -> Scenario:
    base: dict[str, Any] = dict(
        packing=False, sharing=False, autoscaling=False, spot=False, checkpointing=False,
        recovery="restart-from-zero", deadline_policy=None, gpu_mtbf_hours=LLAMA3_GPU_MTBF_HOURS,
        gang_room=False,
    )
    base.update(kw)
    return Scenario(**base)


# the additive chain: each step adds levers to the one before (the last step is gpufleet)
CHAIN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("static", ()),
    ("chain-autoscaling-packing", ("autoscaling", "packing")),
    ("chain-sharing", ("sharing",)),
    ("gpufleet-no-checkpointing", ("spot",)),
    ("gpufleet", ("checkpointing",)),
)
BASELINES = ("static", "static-p99", "static-reserved")


def _with_levers(name: str, on: set[str]) -> Scenario:
    """gpufleet's knobs with only the levers in ``on``: what a lever needs comes with it
    (checkpoint recovery with checkpointing, the deadline policy with spot)."""
    if not on:
        return _static(name=name)
    kw: dict[str, Any] = {lever: lever in on for lever in LEVERS}
    if "checkpointing" not in on:
        kw["recovery"] = "restart-from-zero"
    if "spot" not in on:
        kw["deadline_policy"] = None
    return default_scenario().model_copy(update={"name": name, **kw})


def leave_one_out() -> list[Scenario]:
    """``gpufleet-no-<lever>``: every lever but one."""
    return [_with_levers(f"gpufleet-no-{lever}", set(LEVERS) - {lever}) for lever in LEVERS]


def chain_scenarios() -> list[Scenario]:
    """The additive chain's steps past ``static``, each with the levers of all steps so far."""
    out = []
    on: set[str] = set()
    for name, add in CHAIN[1:]:
        on |= set(add)
        out.append(_with_levers(name, set(on)))
    return out


def single_lever_scenarios() -> list[Scenario]:
    """The old columns: static + one lever alone (available by name, not run by default)."""
    out = []
    for lever in LEVERS:
        kw: dict[str, Any] = {lever: True}
        if lever == "checkpointing":
            kw["recovery"] = "checkpoint-requeue"
        if lever == "spot":
            kw["deadline_policy"] = "default"
        out.append(_static(name=lever, **kw))
    return out


def default_scenarios() -> list[Scenario]:
    """What ``gpufleet simulate`` runs: the baselines, gpufleet, leave-one-out, the chain."""
    out = [
        _static(name="static"),
        _static(name="static-p99", fixed_size_quantile=0.99),
        _static(name="static-reserved", fixed_size_quantile=0.99, pricing="reserved"),
        default_scenario(),
    ]
    names = {s.name for s in out}
    for sc in [*leave_one_out(), *chain_scenarios()]:
        if sc.name not in names:
            out.append(sc)
            names.add(sc.name)
    out.append(default_scenario().model_copy(
        update={"name": "gpufleet-bid-agent", "spot_strategy": "bid-agent"}))
    return out


def rule_scenarios() -> list[Scenario]:
    """``gpufleet`` without one or both of its capacity rules, run only when named (``--only``):
    ``gpufleet-no-swap`` (no on-demand → spot swap, ``control.spot_swap``),
    ``gpufleet-no-headroom`` (no spare GPUs for arrivals, ``control.headroom``) and
    ``gpufleet-plain`` (neither: ``gpufleet`` before the two rules). They are rules, not levers:
    the leave-one-out and the chain keep them wherever their levers are on."""
    base = default_scenario()
    return [base.model_copy(update={"name": "gpufleet-no-swap", "spot_swap": False}),
            base.model_copy(update={"name": "gpufleet-no-headroom", "headroom": False}),
            base.model_copy(update={"name": "gpufleet-plain", "spot_swap": False,
                                    "headroom": False})]


def builtin_scenarios() -> list[Scenario]:
    """Every scenario known by name: the default run, the single-lever ones and ``gpufleet``
    without its capacity rules."""
    return [*default_scenarios(), *single_lever_scenarios(), *rule_scenarios()]


def scenarios_named(names: list[str]) -> list[Scenario]:
    """Built-in scenarios by name, in the order given; an unknown name lists the known ones."""
    by = {s.name: s for s in builtin_scenarios()}
    bad = [n for n in names if n not in by]
    if bad:
        raise InputError(f"unknown scenario {bad[0]!r}; known: {', '.join(by)}", field="only")
    return [by[n] for n in names]


def default_scenario() -> Scenario:
    """The embedded ``gpufleet`` scenario: every lever on, with headroom and the on-demand →
    spot swap (docs/simulator.md: together they make the spot lever pay on Philly and on the
    synthetic load shapes)."""
    return Scenario(name="gpufleet", gpu_mtbf_hours=LLAMA3_GPU_MTBF_HOURS, spot_swap=True,
                    headroom=True)


def static_scenario() -> Scenario:
    return _static(name="static")


MAX_SCENARIOS = 64  # per file; each one is a full simulation


def _item_node(node: Any, index: int | None) -> Any:
    """The YAML node of scenario ``index`` (None: the file is one scenario mapping)."""
    if node is None or index is None:
        return node
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == "scenarios" and isinstance(v, yaml.SequenceNode) and index < len(v.value):
                return v.value[index]
    return None


def _line_of(node: Any, index: int | None, field: str | None = None) -> int | None:
    """Line of scenario ``index`` in the file, or of its key ``field`` where there is one."""
    item = _item_node(node, index)
    if item is None:
        return None
    if field is not None and isinstance(item, yaml.MappingNode):
        top = field.split(".")[0]
        for k, _ in item.value:
            if isinstance(k, yaml.ScalarNode) and k.value == top:
                return k.start_mark.line + 1
    return item.start_mark.line + 1


def _check_world(sc: Scenario, path: Path, line: Any) -> None:
    """Names and folders a scenario refers to exist, checked now with the file and line.

    An unknown instance type used to fail later without the file; an ``availability_dir`` with
    no trace in it silently fell back to the price model.
    """
    from gpufleet.catalog.instances import default_instance_catalog
    from gpufleet.market.spot_model import TRACE_NAME

    if sc.instance_types is not None:
        known = {t.name for t in default_instance_catalog() if t.provider == sc.provider}
        bad = [n for n in sc.instance_types if n not in known]
        if bad:
            raise InputError(
                f"unknown {sc.provider} instance type(s) {bad}; known: {', '.join(sorted(known))}",
                path=path, line=line("instance_types"), field="instance_types",
            )
        if not sc.instance_types:
            raise InputError("empty list; name at least one instance type or leave it out",
                             path=path, line=line("instance_types"), field="instance_types")
    if sc.availability_dir is not None:
        folder = Path(sc.availability_dir)
        where = {"path": path, "line": line("availability_dir"), "field": "availability_dir"}
        if not folder.is_dir():
            raise InputError(f"{folder} is not a folder of spot availability traces", **where)
        if not any(TRACE_NAME.match(f.name) for f in folder.rglob("*.json")):
            raise InputError(
                f"{folder} holds no availability trace named <zone>_<gpu>_<n>.json "
                "(e.g. us-east-1a_v100_1.json)", **where,
            )


def load_scenarios(path: Path | str) -> list[Scenario]:
    path = Path(path)
    doc = read_yaml_document(path, "scenario file")
    node, raw = doc.node, doc.data
    if isinstance(raw, dict) and "scenarios" in raw:
        items = raw["scenarios"]
        if not isinstance(items, list) or not items:
            raise InputError("expected a non-empty list", path=path, field="scenarios")
        if len(items) > MAX_SCENARIOS:
            raise InputError(f"{len(items)} scenarios; at most {MAX_SCENARIOS} per file",
                             path=path, field="scenarios")
        indexed: list[tuple[int | None, Any]] = list(enumerate(items))
    elif isinstance(raw, dict):
        indexed = [(None, raw)]
    else:
        raise InputError("expected a scenario mapping or {scenarios: [...]}", path=path)
    out: list[Scenario] = []
    for i, item in indexed:
        line = _line_of(node, i)
        if not isinstance(item, dict):
            raise InputError("expected a mapping", path=path, line=line,
                             field=f"scenarios[{i}]" if i is not None else None)
        try:
            sc = Scenario.model_validate(item)
        except ValidationError as exc:
            raise validation_to_input_error(exc, path, line) from None
        _check_world(sc, path, lambda f, i=i: _line_of(node, i, f))
        out.append(sc)
    names = [s.name for s in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise InputError(f"duplicate scenario names {sorted(dup)}", path=path, field="name")
    return out
