"""Job-side recovery: atomic verified checkpoints, clean stop on SIGTERM/notice, ``gpufleet run``.

See docs/checkpoint.md. PyTorch helpers live in :mod:`gpufleet.checkpoint.torch_state` (optional).
"""

from __future__ import annotations

from gpufleet.checkpoint.checkpointer import Checkpointer, Rejected, Restored
from gpufleet.checkpoint.codec import Codec, PickleCodec
from gpufleet.checkpoint.manifest import Manifest
from gpufleet.checkpoint.notices import (
    AliyunWatcher,
    AwsWatcher,
    GcpWatcher,
    Notice,
    NoticePoller,
    make_watcher,
)
from gpufleet.checkpoint.protocol import ENV_STATUS_FILE, EXIT_PREEMPTED

__all__ = [
    "ENV_STATUS_FILE",
    "EXIT_PREEMPTED",
    "AliyunWatcher",
    "AwsWatcher",
    "Checkpointer",
    "Codec",
    "GcpWatcher",
    "Manifest",
    "Notice",
    "NoticePoller",
    "PickleCodec",
    "Rejected",
    "Restored",
    "make_watcher",
]
