"""Kubernetes quantities ("500m", "64Gi") in the units FleetState counts (milli-CPU, MiB).

Parsing itself is the official client's ``parse_quantity``; this only fixes the units and turns a
malformed value into data the caller can report instead of an exception from deep inside.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity

MIB = Decimal(1 << 20)


def quantity(text: object) -> Decimal | None:
    """The quantity as a Decimal, or None when it is not a Kubernetes quantity."""
    try:
        return parse_quantity(text)
    except (ValueError, InvalidOperation, TypeError):
        return None


def cpu_milli(text: object) -> int:
    q = quantity(text)
    return 0 if q is None else int((q * 1000).to_integral_value(rounding="ROUND_CEILING"))


def memory_mib(text: object) -> int:
    q = quantity(text)
    return 0 if q is None else int((q / MIB).to_integral_value(rounding="ROUND_CEILING"))


def count(text: object) -> int:
    q = quantity(text)
    return 0 if q is None else int(q)
