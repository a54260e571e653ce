"""The simulated fleet's nodes: launch, ready, drain and end, and the snapshot rows they hold.

The world side of a node's life, as the simulated cloud and kubelet would report it: a launch
books a node that becomes ready after the provisioning delay (spot only where the market has
capacity now), a ready node gets its ``FleetState`` row with the labels and taints GPU Feature
Discovery and Karpenter would put on it, a drained node leaves the snapshot, an ended node stops
billing. It also keeps the indexes the control layer's timers read (empty, underused, booting
nodes) current, and tells the driver which transition happened; it decides nothing.

Snapshot rows are never reused, so when dead rows dominate the snapshot is rebuilt without them
(an autoscaled fleet launches tens of thousands of nodes over months, and every placement is a
pass over all rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from enum import Enum

from gpufleet.catalog.commitments import on_demand_rate
from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.control.admission import SPOT_TAINT, SPOT_TAINT_KEY
from gpufleet.control.node_clocks import Idle, idle_state
from gpufleet.control.offers import OfferBook
from gpufleet.decisions import Bind, CapacityType
from gpufleet.market.spot_cost import ReclaimHazard
from gpufleet.market.spot_model import SpotMarket
from gpufleet.provisioning import MIG_CONFIG, MIG_CONFIG_LABEL
from gpufleet.recovery import SpotExposure
from gpufleet.sim.cloud import MICRO, SimCloud, SimNode
from gpufleet.state import FleetState, NodeInfo, ResourceRequest

Allocation = tuple[ResourceRequest, Bind, tuple[tuple[int, int, int], ...]]


class Became(Enum):
    """A node's transition that the scan timers care about."""

    EMPTY = "empty"
    UNDERUSED = "underused"


class SimFleet:
    """The simulated nodes (``cloud``) and their rows in ``state``."""

    def __init__(self, market: SpotMarket | None, offers: OfferBook, pricing: str,
                 utilization_threshold: float, exposure: SpotExposure,
                 hazard: ReclaimHazard | None = None) -> None:
        self.cloud = SimCloud()
        self.state = FleetState()
        self.market = market
        self.offers = offers
        self.pricing = pricing
        self.threshold = utilization_threshold
        self.exposure = exposure
        self.hazard = hazard  # the reclaim rate per (type, zone) scale-up learns from
        self.catalog = default_gpu_catalog()
        self.empty: dict[str, SimNode] = {}
        self.under: dict[str, SimNode] = {}
        self.booting: dict[str, SimNode] = {}
        self._dead_rows = 0

    def launch(self, it: InstanceType, zone: str, spot: bool, max_price: Decimal | None,
               now: float, delay: float, mig: bool) -> tuple[SimNode | None, float | None]:
        """(the node booting, when its spot notice comes or None); (None, None): the spot
        market has no capacity in ``zone`` now (insufficient capacity)."""
        m = self.market
        if spot:
            if m is None or not m.available(it.name, zone, now):
                return None, None
            price = m.price(it.name, zone, now)
        else:
            price = on_demand_rate(it, self.pricing)
        bid = float(max_price) if max_price is not None else None
        node = self.cloud.launch(it, zone, spot, price, now, delay, bid, mig=mig)
        if not spot:
            self.offers.on_demand_added(it.name, zone)
        self.booting[node.name] = node
        notice = None
        if spot and m is not None:
            t = m.reclaim_time(it.name, zone, now, bid)
            notice = max(t, now) if t is not None else None
        return node, notice

    def ready(self, name: str, now: float) -> SimNode | None:
        """The node booted: its row joins the snapshot (None: it was cancelled meanwhile)."""
        node = self.cloud.nodes[name]
        if node.state != "provisioning":
            return None
        del self.booting[name]
        it = node.itype
        gm = self.catalog[it.gpu_model]
        labels = {"nvidia.com/gpu.product": it.gpu_model,
                  SPOT_TAINT_KEY: "spot" if node.spot else "on-demand",
                  "topology.kubernetes.io/zone": node.zone}
        mig_kw: dict = {}
        if node.mig and gm.mig is not None:
            labels[MIG_CONFIG_LABEL] = MIG_CONFIG
            labels["nvidia.com/mig.strategy"] = "mixed"
            mig_kw = dict(mig_gpus=range(it.gpus), mig_compute_slices=gm.mig.compute_slices)
        info = NodeInfo(
            name=name, instance_type=it.name, zone=node.zone,
            capacity_type=CapacityType.SPOT if node.spot else CapacityType.ON_DEMAND,
            labels=labels,
            taints=frozenset({SPOT_TAINT}) if node.spot else frozenset(),
        )
        self.state.add_node(
            name, gpu_model=it.gpu_model, num_gpus=it.gpus, cpu_milli=it.cpu_milli,
            memory_mib=it.memory_mib, gpu_memory_mib=gm.memory_mib,
            nvlink_domains=it.nvlink_domain_of(), cuda_driver=it.cuda_driver, info=info,
            **mig_kw,
        )
        node.state = "ready"
        node.ready_s = now
        node.empty_since = now
        self.empty[name] = node
        if node.spot:
            self.exposure.node_ready(node.ready_s)
            if self.hazard is not None:
                self.hazard.node_ready(it.name, node.zone, node.ready_s)
        return node

    def changed(self, node: SimNode, now: float) -> Became | None:
        """A pod came or went on ``node``: keep the empty/underused indexes; returns the
        transition a scan timer wants to hear of."""
        if node.state != "ready":
            return None
        state = idle_state(len(node.jobs), node.alloc_milli, node.gpus, self.threshold)
        if state is Idle.EMPTY:
            node.underused_since = None
            self.under.pop(node.name, None)
            if node.empty_since is None:
                node.empty_since = now
                self.empty[node.name] = node
                return Became.EMPTY
            return None
        if node.empty_since is not None:
            node.empty_since = None
            del self.empty[node.name]
        under = state is Idle.UNDERUSED
        if under and node.underused_since is None:
            node.underused_since = now
            self.under[node.name] = node
            return Became.UNDERUSED
        if not under and node.underused_since is not None:
            node.underused_since = None
            del self.under[node.name]
        return None

    def retire(self, node: SimNode, now: float,
               allocations: Callable[[str], Iterable[Allocation]]) -> bool:
        """Take a node out of scheduling (drain); billing continues until ``end``. Returns
        whether it was still booting. ``allocations``: a node's binds, to rebuild the
        snapshot with."""
        if node.state == "ready":
            self.state.remove_node(node.name)
            self.empty.pop(node.name, None)
            self.under.pop(node.name, None)
            if node.spot:
                self.exposure.node_gone(node.ready_s)
            self._dead_rows += 1
            if self._dead_rows > 256 and self._dead_rows > 2 * len(self.state.index):
                self.compact(allocations)
            if node.spot:
                self.exposure.close(now - node.ready_s)
                if self.hazard is not None:
                    self.hazard.node_gone(node.itype.name, node.zone, node.ready_s, now,
                                          node.reclaimed)
        booting = self.booting.pop(node.name, None) is not None
        node.state = "draining"
        return booting

    def compact(self, allocations: Callable[[str], Iterable[Allocation]]) -> None:
        """Rebuild the snapshot without dead rows. Live nodes keep their order; their binds
        (``allocations(name)``) are re-applied."""
        old = self.state
        new = FleetState(max_gpus=old.max_gpus, capacity=max(64, 2 * len(old.index)))
        for name in sorted(old.index, key=old.index.__getitem__):
            i = old.index[name]
            g = int(old.num_gpus[i])
            it = self.cloud.nodes[name].itype
            new.add_node(
                name, gpu_model=it.gpu_model, num_gpus=g, cpu_milli=int(old.cpu_total[i]),
                memory_mib=int(old.mem_total[i]), gpu_memory_mib=int(old.gpu_mem_total[i, 0]),
                nvlink_domains=[int(x) for x in old.nvlink_domain[i, :g]],
                cuda_driver=int(old.cuda_driver[i]),
                mig_gpus=[k for k in range(g) if old.mig_enabled[i, k]], info=old.nodes[i],
                mig_compute_slices=int(old.mig_compute_total[i, :g].max(initial=0)) or 7,
            )
        for name in new.index:
            for req, bind, masks in allocations(name):
                new.allocate(req, bind, masks)
        self.state = new
        self._dead_rows = 0

    def end(self, node: SimNode, at: float,
            allocations: Callable[[str], Iterable[Allocation]]) -> None:
        """The node is gone: drained if it was not, billed up to ``at``."""
        if node.state == "gone":
            return
        if node.state == "ready":
            self.retire(node, at, allocations)
        if not node.spot:
            self.offers.on_demand_removed(node.itype.name, node.zone)
        bill = None
        m = self.market
        if node.spot and m is not None and m.mode == "price":
            bill = round(m.cost_usd(node.itype.name, node.zone, node.launched_s, at) * MICRO)
        self.cloud.end(node, at, bill)
