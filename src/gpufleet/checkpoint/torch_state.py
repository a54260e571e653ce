"""PyTorch state helpers (optional: importing this module needs ``pip install gpufleet[torch]``).

A resumed run only reproduces the uninterrupted one if *everything* that feeds the next step is
restored: weights, optimizer moments, LR-scheduler position, the AMP loss scale and every RNG
(Python's ``random``, NumPy's global one, torch's CPU and CUDA generators; dropout and data
shuffling draw from them). :func:`capture` gathers them into one dict, :func:`restore` puts them
back, and :class:`TorchCodec` writes that dict with ``torch.save``.
"""

from __future__ import annotations

import io
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:  # annotation only: codec imports this module lazily for its torch codec
    from gpufleet.checkpoint.codec import Sink


class TorchCodec:
    """``torch.save``/``torch.load``. Loads with ``weights_only=False`` because the RNG states are
    NumPy/Python objects; safe here because the SHA-256 is checked against the manifest first."""

    name = "torch"

    def dump(self, obj: Any, out: Sink) -> None:
        torch.save(obj, out)  # type: ignore[arg-type]  # torch only calls write/flush

    def load(self, data: memoryview) -> Any:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def capture(
    *,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: Any | None = None,
    extra: Any = None,
) -> dict[str, Any]:
    """Everything needed to continue bit for bit; pass only the parts the job has."""
    return {
        "model": None if model is None else model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(),
        "rng": rng_states(),
        "extra": extra,
    }


def restore(
    state: dict[str, Any],
    *,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: Any | None = None,
) -> Any:
    """Load a :func:`capture` dict into live objects; returns its ``extra``."""
    pairs = (
        ("model", model),
        ("optimizer", optimizer),
        ("scheduler", scheduler),
        ("scaler", scaler),
    )
    for key, target in pairs:
        if target is not None:
            if state.get(key) is None:
                raise KeyError(f"checkpoint holds no {key} state to restore")
            target.load_state_dict(state[key])
    set_rng_states(state["rng"])
    return state.get("extra")
