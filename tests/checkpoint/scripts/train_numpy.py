"""Deterministic NumPy training loop used by the recovery tests (run as a real subprocess).

usage: train_numpy.py CKPT_DIR OUT.npz STEPS_LOG TOTAL_STEPS EVERY_STEPS [STEP_SLEEP_S]

Every computed step is appended to STEPS_LOG (``attempt step``) before the safe point, so the test
can count redone work even after SIGKILL.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from gpufleet.checkpoint import Checkpointer


def main() -> None:
    ckpt_dir, out, steps_log = sys.argv[1:4]
    total, every = int(sys.argv[4]), int(sys.argv[5])
    pause = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    attempt = os.environ.get("GPUFLEET_ATTEMPT", "?")
    ckpt = Checkpointer(ckpt_dir, every_steps=every, keep=2)

    def fresh() -> dict[str, object]:
        init = np.random.default_rng(1234)
        return {
            "step": 0,
            "w": init.standard_normal(512),
            "m": np.zeros(512),
            "mix": init.standard_normal((32, 512)),
            "rng": np.random.default_rng(99),
        }

    state = ckpt.restore(default=fresh)
    with open(steps_log, "a", buffering=1) as log:
        while state["step"] < total:
            rng = state["rng"]
            x = rng.standard_normal(32)
            grad = np.tanh(x @ state["mix"] + state["w"]) * rng.random()
            state["m"] = 0.9 * state["m"] + grad
            state["w"] = state["w"] - 0.01 * state["m"]
            state["step"] += 1
            log.write(f"{attempt} {state['step']}\n")
            if pause:
                time.sleep(pause)
            ckpt.after_step(state["step"], state)
    np.savez(
        out,
        w=state["w"],
        m=state["m"],
        rng=np.frombuffer(repr(state["rng"].bit_generator.state).encode(), dtype=np.uint8),
    )
    ckpt.finish()


if __name__ == "__main__":
    main()
