"""The Score extension point: one vectorised pass over candidate nodes, plus a scalar reference.

``score`` must agree exactly with ``score_one`` on every row (tests check it on random clusters):
the scalar form is the readable definition, the vectorised one is what runs.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gpufleet.placement.view import PodView

MAX_NODE_SCORE = 100
MAX_SPEC_CPU = 128_000  # FGD simulator's normalisers: the largest openb node
MAX_SPEC_GPU = 8_000


class Scorer(Protocol):
    name: str

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Scores (higher is better) of ``rows``, all of which passed the filters."""
        ...

    def score_one(self, view: PodView, row: int) -> float:
        """The same score for one node, written plainly."""
        ...
