"""``docs/reference/metrics.md``: every metric each gpufleet process serves, from its collectors.

Each part of a process's ``/metrics`` is built as that process builds it — the controller's
scheduler metrics, its capacity-loop metrics, its fleet and cost collector, its queue collector;
the node agent's probe gauge; the exporter's fleet metrics and DCGM GPU series — on a fresh
:class:`~prometheus_client.CollectorRegistry`, and the registry is walked: each family's name,
type and help are what a scrape serves. Collectors that render only what they are given (the
fleet, queue and DCGM collectors) get a small world — one GPU and one MIG instance, one node, one
tenant — so their series carry their labels; a labelled metric with no series yet names its
labels on the metric object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

from gpufleet.k8s.capacity.cost import LiveFleet, LiveFleetCollector
from gpufleet.k8s.capacity.metrics import CapacityMetrics
from gpufleet.k8s.disruption.agent import AgentProbes
from gpufleet.k8s.queues.metrics import QueueCollector
from gpufleet.k8s.schedule.telemetry import ControllerMetrics
from gpufleet.metrics.fleet import FleetMetrics
from gpufleet.metrics.snapshot import FleetSnapshot, GpuSample, NodeSample
from gpufleet.reference.markdown import cell, table

HEADER = """# Metrics reference

Generated from the collectors by `python -m gpufleet.reference` (`make reference`); do not edit
by hand. Names follow Prometheus' conventions (`gpufleet_*`, base units: seconds, dollars,
ratios 0..1); the DCGM series keep dcgm-exporter's names, units and labels so its dashboards and
alerts work unchanged. `dashboards/gpufleet.json` reads them; docs/monitoring.md explains them.
"""


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a process's ``/metrics``: when it is served, and how to build it (the
    registry to walk, and the metric objects made for it)."""

    process: str
    when: str
    build: Callable[[], tuple[CollectorRegistry, Iterable[object]]]


def _scheduler() -> tuple[CollectorRegistry, Iterable[object]]:
    m = ControllerMetrics()  # the controller's registry: the capacity and fleet parts join it
    return m.registry, vars(m).values()


def _capacity() -> tuple[CollectorRegistry, Iterable[object]]:
    r = CollectorRegistry()
    return r, vars(CapacityMetrics(r)).values()


def _live_fleet() -> tuple[CollectorRegistry, Iterable[object]]:
    r = CollectorRegistry()
    r.register(LiveFleetCollector(LiveFleet(), lambda: [], lambda: [], lambda: True,
                                  lambda: 0.0))
    return r, ()


def _queues() -> tuple[CollectorRegistry, Iterable[object]]:
    r = CollectorRegistry()
    r.register(QueueCollector(lambda: [], lambda: True))
    return r, ()


def _agent() -> tuple[CollectorRegistry, Iterable[object]]:
    return AgentProbes().registry, ()


def _node_plugin() -> tuple[CollectorRegistry, Iterable[object]]:
    from gpufleet.node_plugin.metrics import Metrics

    m = Metrics()
    return m.registry, vars(m).values()


def _sample_world() -> FleetSnapshot:
    """One whole GPU and one MIG instance on one spot node, one tenant with one job of each
    kind: enough for every family to carry every label it has."""
    gpu = GpuSample("node-a", 0, "GPU-0", "NVIDIA A100-SXM4-40GB", 50.0, 10.0, 1024.0, 39936.0,
                    40.0, 100.0, 1410.0, 0)
    mig = GpuSample("node-a", 1, "MIG-1", "NVIDIA A100-SXM4-40GB", 50.0, 10.0, 1024.0, 8704.0,
                    40.0, 100.0, 1410.0, 0, mig_profile="1g.5gb", mig_id=7)
    node = NodeSample("node-a", "p4d.24xlarge", "us-east-1a", "spot", "ready", "A100-40GB", 2,
                      1500)
    return FleetSnapshot(0.0, (gpu, mig), (node,), {("team", "1xA100"): 1},
                         {("team", "1xA100"): 1}, 0, (), {"team": 1.0}, {"team": 1.0}, 0.0)


def _exporter() -> tuple[CollectorRegistry, Iterable[object]]:
    r = CollectorRegistry()
    FleetMetrics(r).update(_sample_world())
    return r, ()


PARTS: tuple[Part, ...] = (
    Part("gpufleet controller", "always (every replica)", _scheduler),
    Part("gpufleet controller", "with a cloud (`cloud:` or `--cloud`): the capacity loop",
         _capacity),
    Part("gpufleet controller", "on the leading replica, once its informers listed: the fleet "
         "and its cost, under the simulator's names", _live_fleet),
    Part("gpufleet controller", "on the leading replica: one series per GpuQueue", _queues),
    Part("gpufleet agent", "with `--port`", _agent),
    Part("gpufleet node-plugin", "with `--metrics-port` (9402 unless 0): the node's GPUs' health "
         "and its claims", _node_plugin),
    Part("gpufleet exporter --source sim, gpufleet simulate --serve-metrics",
         "always: the simulated fleet, and its GPUs under dcgm-exporter's names", _exporter),
)
NVML_NOTE = ("`gpufleet exporter --source nvml` serves the `DCGM_FI_*` series above alone, for "
             "this machine's GPUs.")

_SUFFIXES = {"counter": "_total", "gauge": "", "histogram": "", "summary": ""}


def _label_names(fam: Metric, declared: dict[str, tuple[str, ...]]) -> str:
    """The family's labels: those every series carries, then those only some do."""
    sets = [frozenset(s.labels) - {"le", "quantile"}
            for s in fam.samples if not s.name.endswith("_created")]
    named = set(getattr(fam, "_labelnames", ())) | set(declared.get(fam.name, ()))
    every = set.intersection(*map(set, sets)) | named if sets else named
    some = set().union(*sets) - every if sets else set()
    text = ", ".join(f"`{n}`" for n in sorted(every))
    if some:
        text += ("; " if text else "") + "on some series: " + ", ".join(
            f"`{n}`" for n in sorted(some))
    return text


def _name(fam: Metric) -> str:
    if fam.type == "histogram":
        return f"`{fam.name}` (`_bucket`, `_sum`, `_count`)"
    return f"`{fam.name}{_SUFFIXES.get(fam.type, '')}`"


def walk(part: Part) -> list[tuple[str, str, str, str]]:
    """(name, type, labels, help) of every family ``part`` serves, by name."""
    registry, made = part.build()
    # a labelled metric with no series yet serves an empty family; its label names are on
    # the metric object (prometheus_client keeps them there, as ``_labelnames``)
    declared = {m._name: tuple(m._labelnames) for m in made if isinstance(m, MetricWrapperBase)}
    rows = [(_name(f), f.type, _label_names(f, declared), " ".join(f.documentation.split()))
            for f in registry.collect()]
    return sorted(rows)


def render() -> str:
    out = [HEADER]
    process = None
    for part in PARTS:
        if part.process != process:
            process = part.process
            out.append(f"\n## `{process}`\n")
        out.append(f"Served {part.when}.\n")
        out.append(table(("metric", "type", "labels", "help"),
                         [(n, t, cell(lab), cell(h)) for n, t, lab, h in walk(part)]))
    out.append(NVML_NOTE + "\n")
    return "\n".join(out)
