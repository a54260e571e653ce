"""Typical tasks learned online: only arrived requests count, and FGD stays exact when the
mix changes under its memo."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.decisions import Bind
from gpufleet.errors import InputError
from gpufleet.placement import get_policy, typical_tasks_from
from gpufleet.placement.filters import DEFAULT_FILTERS
from gpufleet.placement.scorers.fgd import FgdScore
from gpufleet.placement.scorers.stranding import StrandingScore
from gpufleet.placement.typical import TypicalLearner
from gpufleet.placement.view import pod_view
from gpufleet.state import ResourceRequest

from .conftest import REQUESTS, random_cluster


def _feasible(view) -> np.ndarray:  # type: ignore[no-untyped-def]
    mask = view.active.copy()
    for f in DEFAULT_FILTERS:
        mask &= f(view)
    return np.flatnonzero(mask)


def test_learner_sees_only_what_arrived() -> None:
    stream = [REQUESTS[i % 3 + 2] for i in range(30)] + [REQUESTS[7]] * 200
    learner = TypicalLearner(growth=1.5)
    for k, req in enumerate(stream, start=1):
        got = learner.observe(req)
        if got is not None:
            # a refresh is exactly the batch rule over the first k requests: nothing later
            assert got == typical_tasks_from(stream[:k])
            assert learner.tasks == got
    assert learner.seen == len(stream)
    # after 30 requests of three shapes the 8-GPU shape was unknown; at the end it dominates
    early = TypicalLearner()
    for req in stream[:30]:
        early.observe(req)
    assert early.tasks is not None
    assert all(r.num_gpu != 8 for r, _ in early.tasks)
    assert learner.tasks is not None and learner.tasks[0][0].num_gpu == 8


def test_refreshes_are_geometric_and_only_on_change() -> None:
    learner = TypicalLearner(growth=1.05)
    same = REQUESTS[4]
    changes = [learner.observe(same) is not None for _ in range(10_000)]
    assert changes[0] and sum(changes) == 1  # one shape: the mix never changes again
    mixed = TypicalLearner(growth=1.05)
    for i in range(10_000):
        mixed.observe(REQUESTS[2 + i % 5])
    # ~log(10,000)/log(1.05) ≈ 190 refresh points at most, far fewer than 10,000 arrivals
    assert 5 < mixed.refreshes < 250


def test_bad_learner_arguments() -> None:
    with pytest.raises(InputError):
        TypicalLearner(coverage=0)
    with pytest.raises(InputError):
        TypicalLearner(growth=1.0)


@pytest.mark.parametrize("quantize", [True, False])
def test_fgd_after_a_new_mix_equals_a_fresh_scorer(quantize: bool) -> None:
    """Warm every memo (rows, shapes, access) under mix A, switch to mix B: the scores and GPU
    picks must equal a scorer built on B from scratch, and differ from A's somewhere (so the
    check can fail when a stale memo survives)."""
    mix_a = typical_tasks_from([REQUESTS[2]] * 5 + [REQUESTS[4]])
    mix_b = typical_tasks_from([REQUESTS[3]] * 4 + [REQUESTS[5]] * 3 + [REQUESTS[7]])
    state = random_cluster(3, fill=60)
    rng = np.random.default_rng(3)
    live = FgdScore(mix_a, quantize=quantize)
    for req in REQUESTS:
        view = pod_view(state, req)
        rows = _feasible(view)
        if len(rows):
            live.score(view, rows, rng)
    live.set_typical_tasks(mix_b)
    fresh_b, old_a = FgdScore(mix_b, quantize=quantize), FgdScore(mix_a, quantize=quantize)
    differs = False
    for step, req in enumerate(REQUESTS * 2):
        view = pod_view(state, req)
        rows = _feasible(view)
        if not len(rows):
            continue
        got = live.score(view, rows, rng)
        np.testing.assert_array_equal(got, fresh_b.score(view, rows, rng))
        differs |= not np.array_equal(got, old_a.score(view, rows, rng))
        row = int(rows[np.argmax(got)])
        assert live.pick(view, row, rng) == fresh_b.pick(view, row, rng)
        if req.num_gpu and step % 2:
            gpus = live.pick(view, row, rng)
            milli = req.gpu_milli if req.is_shared else 1000
            state.allocate(req, Bind(f"x{step}", state.nodes[row].name, gpus, milli))
    assert differs


def test_policy_hands_the_mix_to_fgd_and_stranding() -> None:
    policy = get_policy("fgd-strand")
    fgd = next(s for s, _ in policy.scorers if isinstance(s, FgdScore))
    strand = next(s for s in policy.tiebreak if isinstance(s, StrandingScore))
    mix = [(ResourceRequest(cpu_milli=24000, num_gpu=2), 1.0)]
    policy.set_typical_tasks(mix)
    assert fgd.table.tasks == tuple(mix)
    assert strand.cpu_per_gpu == 12000
    get_policy("spread").set_typical_tasks(mix)  # no scorer measures a mix: a no-op
