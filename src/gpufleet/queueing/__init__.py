"""Queueing: order of pending work, backfill, gang admission."""

from gpufleet.queueing.order import BackfillPass, PassResult, QueueKey, queue_key

__all__ = ["BackfillPass", "PassResult", "QueueKey", "queue_key"]
