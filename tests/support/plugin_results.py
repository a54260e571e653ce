"""An allocation result of the node plugin's driver, as a scheduler writes it into a claim's
``status.allocation``: what the plugin's prepare tests hand it."""

from __future__ import annotations

from typing import Any

from gpufleet.node_plugin import DRIVER


def share_result(node: str, device: str, memory: str | None, cores: str | None,
                 share: str) -> dict[str, Any]:
    """A result on ``device`` of pool ``node`` with ``shareID`` ``share`` and the
    ``consumedCapacity`` named (none named: the whole device)."""
    r: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device,
                         "shareID": share}
    consumed = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if consumed:
        r["consumedCapacity"] = consumed
    return r
