"""Scale-up (step 3 of the capacity loop): the pods the scheduling cycle refused →
:class:`gpufleet.provisioning.ScaleUpPolicy` — the simulator's, built by ``control.policies``
with the scenario's spot strategy — minus the capacity still booting, up to the node cap
(``control.limits.within_cap``: a gang's nodes all or none). A pod goes on spot only if it
tolerates the spot taint and the deadline guard has not pinned it to on-demand
(``k8s.capacity.inputs.pending_pods``); with team queues no launch for work its quota or budget
holds, and spot only for a ``spot-only`` team's (``gates``, ``control.teams.scale_up_gates``).

Spot is weighed by expected cost as in the simulator (``market.spot_cost``): the reclaim hazard
per (type, zone) is learned from this controller's own spot instances — exposure from their
launch until they leave the provider's list, a reclaim when a spot-interruption event named
the instance (``reclaim_notice``) — and a pod's risk comes from its ``gpufleet.io/duration``
(``inputs.pending_pods``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import TAG_MIG_CONFIG, CloudProvider, Instance
from gpufleet.config import Scenario
from gpufleet.control.headroom import placeholders
from gpufleet.control.limits import launch_room, launches_under_cap
from gpufleet.control.policies import scale_up_policy, spot_strategy
from gpufleet.control.spot_swap import spot_plan
from gpufleet.control.teams import Gate
from gpufleet.decisions import CapacityType, Launch
from gpufleet.k8s.capacity import inputs
from gpufleet.k8s.settings import live_guards
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.market.bidding import ZoneMarket
from gpufleet.market.spot_cost import ReclaimHazard
from gpufleet.provisioning import Offer, PendingPod


class ScaleUp:
    def __init__(self, provider: CloudProvider, scenario: Scenario,
                 types: Mapping[str, InstanceType]) -> None:
        self.provider = provider
        self.sc = scenario
        self.types = types
        self.policy = scale_up_policy(scenario)
        self.spot_strategy = spot_strategy(scenario)
        self.guards = live_guards(scenario)
        self.hazard = ReclaimHazard()
        self._spot: dict[str, tuple[str, str, float]] = {}  # id → (type, zone, launched at)
        self._reclaimed: set[str] = set()  # spot instances a reclaim notice named

    def reclaim_notice(self, instance_id: str) -> None:
        """The provider announced a spot reclaim of ``instance_id``."""
        self._reclaimed.add(instance_id)

    def observe(self, live: Sequence[Instance], now: float) -> None:
        """Feed the hazard: spot instances that appeared start their exposure, those gone from
        the list end it (a reclaim if a notice named them)."""
        up = set()
        for i in live:
            if i.capacity_type != CapacityType.SPOT:
                continue
            up.add(i.instance_id)
            if i.instance_id not in self._spot:
                self._spot[i.instance_id] = (i.instance_type, i.zone, i.launched_at)
                self.hazard.node_ready(i.instance_type, i.zone, i.launched_at)
        for iid in [k for k in self._spot if k not in up]:
            it, zone, since = self._spot.pop(iid)
            self.hazard.node_gone(it, zone, since, now, iid in self._reclaimed)
            self._reclaimed.discard(iid)

    def _market(self, live: Sequence[Instance], wants_mig: bool
                ) -> tuple[list[Offer], dict[str, list[ZoneMarket]]]:
        """The offers (on-demand only on a fleet without spot; MIG-capable types where a pod
        asks for a slice: ``wants_mig``) and the spot markets per type, as of now."""
        offerings = self.provider.offerings()
        if not self.sc.spot:
            offerings = [o for o in offerings if o.capacity_type == CapacityType.ON_DEMAND]
        offers = inputs.live_offers(offerings, live, self.types, wants_mig)
        markets_of = getattr(self.provider, "markets", None)
        if callable(markets_of):
            return offers, {t: list(markets_of(t)) for t in self.types}
        return offers, {t: list(m) for t, m in inputs.markets_from(offerings, self.types).items()}

    def swap_plan(self, pods: Sequence[PendingPod], live: Sequence[Instance], now: float,
                  read: dict[bool, tuple[list[Offer], dict[str, list[ZoneMarket]]]]
                  ) -> tuple[list[Launch], float]:
        """What scale-up would launch for ``pods`` now and its price per hour: the on-demand →
        spot swap's launch (``control.spot_swap``), judged by this loop's markets, spot
        strategy and learned hazard, as the simulator asks its scale-up. ``read``: the
        cycle's offers and markets, read from the provider once per cycle (keyed by whether
        MIG types are wanted), not once per candidate."""
        mig = any(p.request.mig_profile is not None for p in pods)
        if mig not in read:
            read[mig] = self._market(live, mig)
        offers, markets = read[mig]
        return spot_plan(self.policy, list(pods), offers, markets, self.spot_strategy,
                         lambda it, zone: self.hazard.rate_per_h(it, zone, now))

    def run(self, snap: Snapshot, refused: Sequence[str], live: list[Instance],
            booting: list[Instance], nodes: Sequence[Mapping[str, Any]], now: float,
            launch: Callable[[Launch], str | None],
            gates: Mapping[str, Gate] | None = None,
            caps: Mapping[str, int] | None = None,
            room: tuple[int, float] | None = None) -> bool:
        """Launch what the policy asks for, one node at a time through ``launch`` (the
        provisioner's record-first path; None: the cloud had no capacity for that launch).
        ``caps``: the largest node each job may use (``inputs.node_caps``); ``room``: the
        headroom buffer and the free GPUs, whose shortfall is asked for as placeholders
        after the pending pods (``control.headroom``, ``control.limits.launches_under_cap``).
        Returns whether the node cap held back a launch pending pods asked for."""
        self.observe(live, now)
        pending = inputs.pending_pods(snap, refused, now, self.guards, self.sc.checkpointing,
                                      gates, caps)
        holders = placeholders(*room) if room is not None else []
        if not pending and not holders:
            return False
        offers, markets = self._market(
            live, any(p.request.mig_profile is not None for p in pending))
        known = set(snap.state.index)
        joined = {(n.get("spec") or {}).get("providerID") for n in nodes
                  if n["metadata"]["name"] in known}
        coming = [(i.instance_type, i.capacity_type, i.zone, bool(i.tags.get(TAG_MIG_CONFIG)))
                  for i in [*(i for i in live if i.provider_id not in joined
                              and i not in booting), *booting]]
        inflight = inputs.inflight(coming, self.types)

        def plan(asked: Sequence[PendingPod]) -> list[Launch]:
            return self.policy.decide(asked, offers, inflight, markets, self.spot_strategy,
                                      lambda it, zone: self.hazard.rate_per_h(it, zone, now))

        launches, held = launches_under_cap(plan, pending, holders,
                                            launch_room(len(live), self.sc.max_nodes))
        for want in launches:
            for _ in range(want.count):
                if launch(want) is None:
                    break
        return held
