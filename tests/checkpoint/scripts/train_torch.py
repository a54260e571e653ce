"""Deterministic small PyTorch training loop for the recovery tests (real subprocess).

usage: train_torch.py CKPT_DIR OUT.pt STEPS_LOG TOTAL_STEPS EVERY_STEPS [STEP_SLEEP_S]

Dropout, shuffling (torch RNG), input noise (NumPy global RNG) and a Python ``random`` coin all
draw from the RNGs the checkpoint must restore; Adam's moments and the scheduler's position are
state too, so any piece missing from the checkpoint breaks bit-exactness.
"""

from __future__ import annotations

import os
import random
import sys
import time

import numpy as np
import torch

from gpufleet.checkpoint import Checkpointer
from gpufleet.checkpoint.torch_state import TorchCodec, capture, restore


def main() -> None:
    ckpt_dir, out, steps_log = sys.argv[1:4]
    total, every = int(sys.argv[4]), int(sys.argv[5])
    pause = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    attempt = os.environ.get("GPUFLEET_ATTEMPT", "?")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=25, gamma=0.8)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    data = torch.randn(256, 16, generator=torch.Generator().manual_seed(7))
    target = data.sum(dim=1, keepdim=True).sin()

    ckpt = Checkpointer(ckpt_dir, every_steps=every, keep=2, codec=TorchCodec())
    saved = ckpt.restore()
    step = 0
    if saved is not None:
        step = restore(saved, model=model, optimizer=opt, scheduler=sched, scaler=scaler)

    def snapshot() -> dict[str, object]:
        return capture(model=model, optimizer=opt, scheduler=sched, scaler=scaler, extra=step)

    with open(steps_log, "a", buffering=1) as log:
        while step < total:
            idx = torch.randperm(256)[:32]
            noise = torch.from_numpy(np.random.standard_normal((32, 16)).astype(np.float32))
            x = data[idx] + 0.01 * noise * (1.0 if random.random() < 0.5 else -1.0)
            loss = torch.nn.functional.mse_loss(model(x), target[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            log.write(f"{attempt} {step}\n")
            if pause:
                time.sleep(pause)
            ckpt.after_step(step, snapshot)
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, out)
    ckpt.finish()


if __name__ == "__main__":
    main()
