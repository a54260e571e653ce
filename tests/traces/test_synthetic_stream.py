"""``SyntheticStream``: the default generator drawn a window at a time."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpufleet.traces.synthetic import SyntheticStream, SyntheticWorkload, generate


@pytest.mark.parametrize("seed", [0, 7])
def test_one_window_is_generate_exactly(seed: int) -> None:
    params = SyntheticWorkload(jobs=500, days=1)
    assert list(SyntheticStream(params, seed, chunk_jobs=500)) == generate(params, seed)
    assert list(SyntheticStream(SyntheticWorkload(), seed)) == generate(seed=seed)


def test_windows_join_into_one_trace_at_the_same_load() -> None:
    """6,000 jobs drawn 1,000 at a time against the same parameters drawn whole: the same
    count, arrival order, ids 0..n-1, and the same load — the arrivals cover the same span
    (within 2 %), each whole day holds as many jobs as the whole draw's day (within 15 %: no
    window is left short at the seams; a day, so the diurnal cycle cancels) and the shapes
    follow the same distribution."""
    params = SyntheticWorkload(jobs=6000, days=9)
    streamed = list(SyntheticStream(params, 3, chunk_jobs=1000))
    whole = generate(params, 3)
    assert len(streamed) == len(SyntheticStream(params, 3, chunk_jobs=1000)) == 6000
    submit = np.array([j.submit_s for j in streamed])
    assert np.all(np.diff(submit) >= 0)
    assert [j.job_id for j in streamed] == [f"syn-{i:06d}" for i in range(6000)]
    span, whole_span = submit[-1], whole[-1].submit_s
    assert span == pytest.approx(whole_span, rel=0.02)
    days = int(span // 86400)
    counts = np.histogram(submit, bins=days, range=(0, days * 86400))[0]
    expected = np.histogram([j.submit_s for j in whole], bins=days, range=(0, days * 86400))[0]
    assert np.all(np.abs(counts / expected - 1) < 0.15), (counts, expected)
    one_gpu = np.mean([j.request.num_gpu * j.replicas == 1 for j in streamed])
    assert one_gpu == pytest.approx(np.mean([j.request.num_gpu * j.replicas == 1
                                             for j in whole]), abs=0.02)


def test_iterating_again_draws_the_same_jobs() -> None:
    s = SyntheticStream(SyntheticWorkload(jobs=2500, days=3), 1, chunk_jobs=600)
    first = list(itertools.islice(s, 1300))
    assert list(itertools.islice(s, 1300)) == first
    assert list(SyntheticStream(SyntheticWorkload(jobs=2500, days=3), 2,
                                chunk_jobs=600))[:1300] != first


def test_a_window_of_no_jobs_is_an_error() -> None:
    with pytest.raises(ValueError, match="chunk_jobs"):
        SyntheticStream(SyntheticWorkload(), 0, chunk_jobs=0)
