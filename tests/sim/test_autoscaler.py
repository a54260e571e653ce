"""The simulator's scan (``sim.autoscaler``): what it keeps between scans is what it would
read afresh."""

from __future__ import annotations

from gpufleet.config import scenarios_named
from gpufleet.control.views import node_view
from gpufleet.provisioning import NodeView
from gpufleet.sim.cloud import SimNode
from gpufleet.sim.runner import Simulation
from gpufleet.traces.synthetic import SyntheticWorkload, generate


def test_a_kept_room_only_view_is_the_view_read_afresh() -> None:
    """Every room-only view a consolidation look gets equals ``node_view`` read from the
    fleet then; views are kept while a node's row and price stand (hits) and read again once
    they move (misses), and both happen in a run with consolidation."""
    jobs = generate(SyntheticWorkload(jobs=300, days=0.5), seed=0)
    [sc] = scenarios_named(["gpufleet"])
    sim = Simulation(sc, 0, jobs)
    scan = sim.sim.autoscaler
    view = scan._view
    seen: dict[str, NodeView] = {}
    hits = misses = 0

    def checked(n: SimNode, room_only: bool = False) -> NodeView:
        nonlocal hits, misses
        got = view(n, room_only)
        if room_only:
            fresh = node_view(scan.state, n.name, scan.offers.shape(n.itype, n.mig), n.spot,
                              n.usd_per_hour, None)
            assert got == fresh, n.name
            if seen.get(n.name) is got:
                hits += 1
            else:
                misses += 1
            seen[n.name] = got
        return got

    scan._view = checked  # type: ignore[method-assign]
    sim.run(None)
    assert hits > 0 and misses > 0
