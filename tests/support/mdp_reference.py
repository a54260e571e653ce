"""The plain full-width backward induction behind ``smdp``: the oracle for ``mdp._solve``.

This is ``gpufleet.market.deadline.mdp._solve`` as it was before it learned to skip the done
states (σ ≥ τ·q) and to expect idle and on-demand in one batch: every τ computes every σ step
and every action, then overwrites the done ones. Kept verbatim (only the model's inputs,
``mdp.dp_inputs``, are shared) so that the fast solver can be compared with it bit for bit
(``tests/market/test_deadline_mdp_fast.py``); change both together.
"""

from __future__ import annotations

import numpy as np

from gpufleet.market.deadline.controller import Choice, DeadlineJob
from gpufleet.market.deadline.mdp import (
    BIG,
    DTYPE,
    READ_BACK,
    READ_WAIT,
    TAU_STRIDE,
    _rows,
    dp_inputs,
)


def solve_reference(job: DeadlineJob, mean_up: float, mean_down: float, shape: float, k: int,
                    s: int) -> np.ndarray:
    """Backward induction from τ = 0 to k over σ steps 0..s − 1 (costs in on-demand ticks)."""
    q, ds, pad, cs, co, nb, hz, adv = dp_inputs(job, mean_up, mean_down, shape)
    nxt_b = np.minimum(np.arange(nb) + 1, nb - 1)
    # val[held, a (0 down, 1 up), age bucket, pad + σ]; τ = 0: done wherever σ ≥ 0
    val = np.full((3, 2, nb, pad + s), BIG, dtype=DTYPE)
    val[..., pad:] = 0.0
    act = np.zeros((_rows(k), 2, nb, s), dtype=np.int8)
    new = np.empty_like(val)
    ih, sh, oh = int(Choice.IDLE), int(Choice.SPOT), int(Choice.ON_DEMAND)

    def expect(cont: np.ndarray, flip: np.ndarray, hz: np.ndarray = hz) -> np.ndarray:
        """E[V next | a, bucket]: cont[a, b] if the period goes on, flip[a] if it ends."""
        stay = cont + adv * (cont[:, nxt_b] - cont)
        return stay + hz * (flip[:, None, :] - stay)

    for tau in range(1, k + 1):
        e_i = expect(val[ih], val[ih, ::-1, 0])
        e_o = expect(val[oh], val[oh, ::-1, 0])
        # held spot, up now: it goes on (spot, up) or is preempted (idle, down)
        e_s = expect(val[sh, 1:], val[ih, 0:1, 0], hz[1:])[0]  # (nb, N)
        idle = e_i[..., pad - q : pad - q + s]
        od_keep = co + e_o[..., pad : pad + s]
        od_new = co + e_o[..., pad - ds : pad - ds + s]
        sp_keep = cs + e_s[:, pad : pad + s]
        sp_new = cs + e_s[:, pad - ds : pad - ds + s]
        new[..., :pad] = BIG
        rec = tau % TAU_STRIDE == 0 or tau == k
        row = (tau + TAU_STRIDE - 1) // TAU_STRIDE
        for h, od, sp in ((ih, od_new, sp_new), (sh, od_new, sp_keep), (oh, od_keep, sp_new)):
            out = new[h, ..., pad:]
            np.minimum(idle, od, out=out)
            if rec and h == oh:
                a = act[row, READ_BACK]
                a[...] = np.where(od[1] < idle[1], np.int8(oh), np.int8(ih))
                a[sp < out[1]] = sh
            elif rec and h == ih:
                act[row, READ_WAIT] = np.where(od[0] < idle[0], np.int8(oh), np.int8(ih))
            np.minimum(out[1], sp, out=out[1])
        new[sh, 0] = new[ih, 0]  # holding spot while it is down means idle
        new[:2, ..., pad : pad + ds] = BIG  # not on on-demand: must keep d to launch it
        first_done = min(tau * q, s)
        new[..., pad + first_done :] = 0.0
        val, new = new, val
    return act
