"""PyTorch helpers: a real small model trained in a subprocess, SIGTERM'd at random points, ends
bit for bit equal to the uninterrupted run (weights, Adam moments, scheduler, every RNG)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from gpufleet.checkpoint import Checkpointer
from gpufleet.checkpoint.protocol import EXIT_PREEMPTED

from .conftest import check_redone, run_to_end

torch = pytest.importorskip("torch")
torch_state = pytest.importorskip("gpufleet.checkpoint.torch_state")


def test_capture_restore_roundtrip_with_amp_scaler(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(3):
        loss = model(torch.ones(1, 4)).sum()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
    ck = Checkpointer(tmp_path, codec=torch_state.TorchCodec(), handle_signals=False)
    ck.save(
        3,
        torch_state.capture(
            model=model, optimizer=opt, scheduler=sched, scaler=scaler, extra={"epoch": 1}
        ),
    )
    expect = (torch.rand(3), np.random.random(), random.random())

    model2 = torch.nn.Linear(4, 2)
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
    sched2 = torch.optim.lr_scheduler.StepLR(opt2, step_size=1, gamma=0.5)
    scaler2 = torch.amp.GradScaler("cpu", init_scale=1.0)
    saved = Checkpointer(tmp_path, handle_signals=False).restore()
    extra = torch_state.restore(
        saved, model=model2, optimizer=opt2, scheduler=sched2, scaler=scaler2
    )
    assert extra == {"epoch": 1}
    assert torch.equal(model.weight, model2.weight)
    assert scaler2.get_scale() == scaler.get_scale()
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert torch.equal(
        opt2.state_dict()["state"][0]["momentum_buffer"],
        opt.state_dict()["state"][0]["momentum_buffer"],
    )
    got = (torch.rand(3), np.random.random(), random.random())  # RNGs rewound to save time
    assert torch.equal(got[0], expect[0]) and got[1:] == expect[1:]


def test_restore_missing_part_is_an_error() -> None:
    state = torch_state.capture(extra=None)
    with pytest.raises(KeyError, match="optimizer"):
        torch_state.restore(state, optimizer=torch.optim.SGD([torch.zeros(1)], lr=0.1))


@pytest.mark.slow
def test_random_sigterm_torch_training_bit_exact(make_run) -> None:  # type: ignore[no-untyped-def]
    # torch takes seconds to import on a busy machine: the reference runs alongside attempt 1
    ref = make_run("train_torch.py", name="ref", total=100, every=10, step_sleep_s=0.0)
    ref_proc = ref.start()
    run = make_run("train_torch.py", total=100, every=10, step_sleep_s=0.01)
    rnd = random.Random(3)
    graceful = []
    for _ in range(2):
        proc = run.start()
        run.wait_running(proc, run.attempts)
        time.sleep(rnd.uniform(0.05, 0.3))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_PREEMPTED, err.decode()
        graceful.append(True)
    run_to_end(run)
    assert check_redone(run, graceful) == [0, 0]
    _, err = ref_proc.communicate(timeout=120)
    assert ref_proc.returncode == 0, err.decode()
    a = torch.load(ref.out, weights_only=True)
    b = torch.load(run.out, weights_only=True)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].numpy().tobytes() == b[k].numpy().tobytes(), k
