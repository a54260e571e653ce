"""The general claim allocator: any set of claims, on any driver's devices, on one node.

Kubernetes' structured-parameters allocator (``k8s.io/dynamic-resource-allocation/structured``,
the one kube-scheduler 1.36 runs with DRAConsumableCapacity, DRAPartitionableDevices,
DRAPrioritizedList, DRADeviceTaints and DRAAdminAccess on) read as rules, for the claims
placement does not express (:mod:`.claims` reads one GPU request per pod into a
:class:`~gpufleet.state.ResourceRequest` and lets placement choose the GPUs): several requests
per claim and several claims per pod, ``count`` above one, ``allocationMode: All``,
``constraints`` (``matchAttribute``, ``distinctAttribute``), ``firstAvailable`` of any
subrequests, devices of any driver, partitionable devices (a pool's ``sharedCounters``, a
device's ``consumesCounters``), consumable capacity (``allowMultipleAllocations`` with each
capacity's ``requestPolicy``), device taints against the request's tolerations, and
``adminAccess``. Pure: the API's JSON in, ``status.allocation`` bodies out.

As kube's allocator does, it walks the requests of every claim in order and, for each device
a request needs, the node's devices in order — pools by driver and name, each pool's newest
slices by name, devices as published — taking the first that is free, matches the class's and
the request's selectors, fits its capacity and counters, is not tainted against the request,
and keeps the claim's constraints; when a later request cannot be met it backtracks to the
next candidate. A ``firstAvailable`` request takes the first subrequest with which everything
else still fits. The first complete assignment wins, so the result is kube-scheduler's own
device choice on the same state (the differential live test compares them).

What it does not do, as in kube-scheduler with these gates: devices of slices that are not the
node's own (``allNodes``, a node selector, per-device node selection) are not offered;
devices with binding conditions are skipped (DRADeviceBindingConditions is off).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from gpufleet.k8s.dra import cel
from gpufleet.k8s.dra.cel import DeviceInput, SelectorError
from gpufleet.k8s.translate.quantity import quantity

DeviceKey = tuple[str, str, str]  # (driver, pool, device), how a result names a device
CounterKey = tuple[str, str, str]  # (driver, pool, counter set)

# the taint effects that keep a device from a request that does not tolerate them
_BLOCKING = ("NoSchedule", "NoExecute")
MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize


class _TooMany(Exception):
    """kube's ``errAllocationResultMaxSizeExceeded``: the claim's results would pass
    :data:`MAX_RESULTS`; a ``firstAvailable`` request tries its next subrequest."""


class AllocationError(Exception):
    """The claims cannot be allocated on any node, for a reason kube-scheduler reports as such
    (a missing DeviceClass, a selector that cannot be evaluated), not for want of devices."""


# -- what a node publishes -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolDevice:
    """One published device: its driver, pool and name, and the slice's entry."""

    driver: str
    pool: str
    name: str
    raw: Mapping[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)


@dataclass(slots=True)
class NodePools:
    """Every device the node's own slices publish, in the order kube's allocator tries them,
    and each pool's shared counters."""

    node: str
    devices: list[PoolDevice] = field(default_factory=list)
    counters: dict[CounterKey, dict[str, Decimal]] = field(default_factory=dict)
    # pools with slices for this node that are not all published yet: no device offered,
    # and a request for ``All`` devices cannot be answered (kube's ``IsIncomplete``)
    incomplete: list[tuple[str, str]] = field(default_factory=list)
    # each device's CEL variable, converted on first use
    inputs: dict[DeviceKey, DeviceInput] = field(default_factory=dict)

    def cel_input(self, dev: PoolDevice) -> DeviceInput:
        got = self.inputs.get(dev.key)
        if got is None:
            got = self.inputs[dev.key] = DeviceInput(dev.raw, dev.driver)
        return got


def _spec(s: Mapping[str, Any]) -> Mapping[str, Any]:
    return s.get("spec") or {}


def _amounts(counters: Any) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, c in (counters or {}).items():
        q = quantity((c or {}).get("value"))
        if q is not None:
            out[str(name)] = q
    return out


def node_pools(slices: Iterable[Mapping[str, Any]]) -> dict[str, NodePools]:
    """Each node's pools from the ResourceSlices: of the newest generation of each pool, the
    slices naming the node (``nodeName``), by name, with the counter sets of all of the pool's
    slices; a pool whose slices are not all published yet is offered on no node (kube's
    ``IsIncomplete``), and recorded as such on the nodes it has slices for."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in slices:
        sp = _spec(s)
        pool = sp.get("pool") or {}
        if not sp.get("driver") or not pool.get("name"):
            continue
        pools.setdefault((str(sp["driver"]), str(pool["name"])), []).append(s)
    out: dict[str, NodePools] = {}
    for (driver, name), members in sorted(pools.items()):
        gen = max(int((_spec(s).get("pool") or {}).get("generation") or 0) for s in members)
        newest = sorted((s for s in members
                         if int((_spec(s).get("pool") or {}).get("generation") or 0) == gen),
                        key=lambda s: str((s.get("metadata") or {}).get("name", "")))
        want = int((_spec(newest[0]).get("pool") or {}).get("resourceSliceCount") or 1)
        nodes = sorted({str(_spec(s)["nodeName"]) for s in newest if _spec(s).get("nodeName")})
        counters = {(driver, name, str(cs.get("name"))): _amounts(cs.get("counters"))
                    for s in newest for cs in _spec(s).get("sharedCounters") or ()}
        for node in nodes:
            np_ = out.setdefault(node, NodePools(node))
            if len(newest) < want:
                np_.incomplete.append((driver, name))
                continue
            np_.counters.update(counters)
            for s in newest:
                if _spec(s).get("nodeName") != node:
                    continue
                for d in _spec(s).get("devices") or ():
                    if isinstance(d, Mapping) and d.get("name"):
                        np_.devices.append(PoolDevice(driver, name, str(d["name"]), d))
    return out


# -- what is taken -----------------------------------------------------------------------------


@dataclass(slots=True)
class InUse:
    """What allocated claims hold: devices held whole, and what shares of a shareable device
    consume (kube's ``AllocatedState``: ``AllocatedDevices`` and ``AggregatedCapacity``)."""

    whole: set[DeviceKey] = field(default_factory=set)
    capacity: dict[DeviceKey, dict[str, Decimal]] = field(default_factory=dict)

    def add(self, allocation: Mapping[str, Any] | None) -> None:
        """Count one ``status.allocation`` (an admin-access result holds nothing)."""
        for r in ((allocation or {}).get("devices") or {}).get("results") or ():
            if r.get("adminAccess"):
                continue
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            if r.get("shareID"):
                got = self.capacity.setdefault(key, {})
                for name, amount in _amounts({k: {"value": v} for k, v in (
                        r.get("consumedCapacity") or {}).items()}).items():
                    got[name] = got.get(name, Decimal(0)) + amount
            else:
                self.whole.add(key)

    def holds(self, key: DeviceKey) -> bool:
        return key in self.whole or key in self.capacity

    def copy(self) -> InUse:
        return InUse(set(self.whole), {k: dict(v) for k, v in self.capacity.items()})


def in_use(claims: Iterable[Mapping[str, Any]]) -> InUse:
    got = InUse()
    for c in claims:
        got.add((c.get("status") or {}).get("allocation"))
    return got


# -- consumable capacity (kube's consumable_capacity.go) ---------------------------------------


def _value(q: Decimal) -> int:
    """kube's ``Quantity.Value()``: the integer value, rounded up."""
    return int(q.to_integral_value(rounding=ROUND_CEILING))


def _round_up(asked: Decimal, policy: Mapping[str, Any]) -> Decimal:
    rng = policy.get("validRange") or {}
    low = quantity(rng.get("min")) if rng else None
    if low is not None:
        if asked < low:
            return low
        step = quantity(rng.get("step"))
        if not step:
            return asked
        n, mod = divmod(_value(asked) - _value(low), _value(step))
        return Decimal(_value(low) + _value(step) * (n + (1 if mod else 0)))
    for v in policy.get("validValues") or ():
        q = quantity(v)
        if q is not None and asked <= q:
            return q
    return asked


def _consumed(asked: Decimal | None, cap: Mapping[str, Any]) -> Decimal:
    policy = cap.get("requestPolicy")
    if asked is None:
        default = quantity(policy.get("default")) if policy else None
        return default if default is not None else quantity(cap.get("value")) or Decimal(0)
    return _round_up(asked, policy) if policy else asked


def _consumed_text(asked: str | None, cap: Mapping[str, Any]) -> str:
    """:func:`_consumed` as kube writes it: the quantity it picked as written (the ask, the
    policy's default, a valid value, the range's minimum, the capacity), or one it computed
    stepping up a range (binary suffixes)."""
    policy = cap.get("requestPolicy")
    if asked is None:
        default = policy.get("default") if policy else None
        return str(default if default is not None else cap.get("value"))
    q = quantity(asked)
    if not policy or q is None:
        return asked
    rng = policy.get("validRange") or {}
    low = quantity(rng.get("min")) if rng else None
    if low is not None:
        if q < low:
            return str(rng["min"])
        return asked if not quantity(rng.get("step")) else quantity_text(_round_up(q, policy))
    for v in policy.get("validValues") or ():
        valid = quantity(v)
        if valid is not None and q <= valid:
            return str(v)
    return asked


def _violates(value: Decimal, policy: Mapping[str, Any] | None) -> bool:
    if not policy:
        return False
    if quantity(policy.get("default")) == value:
        return False
    rng = policy.get("validRange")
    if rng:
        high = quantity(rng.get("max"))
        if high is not None and value > high:
            return True
        step, low = quantity(rng.get("step")), quantity(rng.get("min")) or Decimal(0)
        return step is not None and step != 0 and \
            (_value(value) - _value(low)) % _value(step) != 0
    values = [q for v in policy.get("validValues") or () if (q := quantity(v)) is not None]
    return bool(values) and value not in values


def consumption(asked: Mapping[str, Decimal], capacity: Mapping[str, Any]
                ) -> dict[str, Decimal] | None:
    """What one allocation of a device with ``capacity`` consumes of each of its capacities for
    a request asking ``asked`` (every capacity: unasked ones their policy's default, or all of
    them), or None when a value breaks the device's request policy or names a capacity the
    device does not have."""
    if any(name not in capacity for name in asked):
        return None
    out: dict[str, Decimal] = {}
    for name, cap in capacity.items():
        if not isinstance(cap, Mapping):
            continue
        got = _consumed(asked.get(name), cap)
        if _violates(got, cap.get("requestPolicy")):
            return None
        out[str(name)] = got
    return out


def quantity_text(q: Decimal) -> str:
    """A quantity as Kubernetes prints a value it computed (binary suffixes where exact)."""
    if q == q.to_integral_value():
        n = int(q)
        for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if n and n % size == 0:
                return f"{n // size}{suffix}"
        return str(n)
    return f"{q.normalize():f}"


# -- the requests ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    """One ``exactly`` request, or one subrequest of a ``firstAvailable`` list."""

    claim: int
    name: str  # the request's name
    sub: str | None  # the subrequest's name (None: an exactly request)
    class_name: str
    selectors: list[tuple[str, str]]  # (label for errors, expression): the class's first
    count: int
    all_devices: bool
    admin: bool
    tolerations: list[Mapping[str, Any]]
    capacity: dict[str, Decimal]
    capacity_text: dict[str, str]  # the same, as written
    candidates: list[PoolDevice] = field(default_factory=list)  # All: every matching device

    @property
    def own_name(self) -> str:
        """kube's ``request.name()``: the subrequest's own name for a subrequest."""
        return self.name if self.sub is None else self.sub

    @property
    def result_name(self) -> str:
        return self.name if self.sub is None else f"{self.name}/{self.sub}"

    def raw_tolerations(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self.tolerations]


def _tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """kube's ``resourceclaim.ToleratesTaint``."""
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")


def _tainted_against(dev: PoolDevice, req: _Request) -> bool:
    return any(t.get("effect") in _BLOCKING and not any(_tolerates(tol, t)
                                                        for tol in req.tolerations)
               for t in dev.raw.get("taints") or () if isinstance(t, Mapping))


def _attribute(dev: PoolDevice, name: str) -> tuple[str, Any] | None:
    """A constraint's fully qualified attribute on ``dev`` (kube's ``lookupAttribute``): as
    published, or its short name where the domain is the device's driver."""
    attrs = dev.raw.get("attributes") or {}
    got = attrs.get(name)
    if got is None and "/" in name:
        domain, short = name.split("/", 1)
        if domain == dev.driver:
            got = attrs.get(short)
    if not isinstance(got, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in got:
            return kind, got[kind]
    return None


class _Constraint:
    """``matchAttribute`` or ``distinctAttribute`` over some (or all) of a claim's requests."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.requests = frozenset(str(r) for r in spec.get("requests") or ())
        self.match = spec.get("matchAttribute")
        self.attribute = str(self.match or spec.get("distinctAttribute"))
        self.value: tuple[str, Any] | None = None
        self.count = 0
        # distinct: every value taken, in order (kube 1.36.3 keeps only each request's latest,
        # so a request of several devices could repeat one: kubernetes/kubernetes#140438)
        self.seen: list[tuple[str, Any]] = []

    def applies(self, req: _Request) -> bool:
        return not self.requests or req.name in self.requests or (
            req.sub is not None and req.result_name in self.requests)

    def add(self, req: _Request, dev: PoolDevice) -> bool:
        if not self.applies(req):
            return True
        got = _attribute(dev, self.attribute)
        if got is None:
            return False
        if self.match is not None:
            if self.count and got != self.value:
                return False
            if not self.count:
                self.value = got
        else:
            if got in self.seen:
                return False
            self.seen.append(got)
        self.count += 1
        return True

    def remove(self, req: _Request) -> None:
        if not self.applies(req):
            return
        self.count -= 1
        if self.match is None:
            self.seen.pop()  # devices come back in the reverse order they were taken


def _capacity_asks(spec: Mapping[str, Any], where: str
                   ) -> tuple[dict[str, Decimal], dict[str, str]]:
    out: dict[str, Decimal] = {}
    texts: dict[str, str] = {}
    for name, v in ((spec.get("capacity") or {}).get("requests") or {}).items():
        q = quantity(v)
        if q is None:
            raise AllocationError(f"{where}: capacity {name}: {v!r} is not a quantity")
        out[str(name)], texts[str(name)] = q, str(v)
    return out, texts


def _read_request(ci: int, claim_name: str, name: str, sub: str | None,
                  spec: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]) -> _Request:
    where = f"claim {claim_name}, request {name if sub is None else f'{name}/{sub}'}"
    cname = str(spec.get("deviceClassName") or "")
    if not cname:
        raise AllocationError(f"{where}: missing device class name (unsupported request type?)")
    dc = classes.get(cname)
    if dc is None:
        raise AllocationError(f"{where}: could not retrieve device class {cname}: "
                              f"deviceclass.resource.k8s.io \"{cname}\" not found")
    sels: list[tuple[str, str]] = []
    for i, s in enumerate(((dc.get("spec") or {}).get("selectors")) or ()):
        sels.append((f"class {cname}: selector #{i}", str(((s or {}).get("cel") or {})
                                                            .get("expression") or "")))
    for i, s in enumerate(spec.get("selectors") or ()):
        expr = ((s or {}).get("cel") or {}).get("expression")
        if not expr:
            raise AllocationError(f"{where}, selector #{i}: CEL expression empty "
                                  "(unsupported selector type?)")
        sels.append((f"claim {claim_name}: selector #{i}", str(expr)))
    mode = spec.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise AllocationError(f"{where}: unsupported allocation mode {mode}")
    return _Request(ci, name, sub, cname, sels, int(spec.get("count") or 1), mode == "All",
                    bool(spec.get("adminAccess")), list(spec.get("tolerations") or ()),
                    *_capacity_asks(spec, where))


# -- the search --------------------------------------------------------------------------------


class _Search:
    """One allocation attempt of ``claims`` on one node (kube's ``allocator``)."""

    def __init__(self, claims: Sequence[Mapping[str, Any]],
                 classes: Mapping[str, Mapping[str, Any]], pools: NodePools, used: InUse,
                 share_id: Callable[[], str]) -> None:
        self.claims = claims
        self.classes = classes
        self.pools = pools
        self.used = used
        self.share_id = share_id
        self.names = [f"{(c.get('metadata') or {}).get('namespace')}/"
                      f"{(c.get('metadata') or {}).get('name')}" for c in claims]
        # per claim, per request: the exactly request, or the subrequests in order
        self.requests: list[list[list[_Request]]] = []
        self.constraints: list[list[_Constraint]] = []
        self.chosen: dict[tuple[int, int], int] = {}  # (claim, request) → subrequest taken
        self.results: list[list[tuple[_Request, PoolDevice, dict[str, Decimal] | None]]] = []
        self.taking: dict[DeviceKey, set[int]] = {}  # held whole in this attempt, by claim
        self.sharing: dict[DeviceKey, dict[str, Decimal]] = {}  # consumed in this attempt
        self.counters: dict[CounterKey, dict[str, Decimal]] = {}
        self.counted: set[DeviceKey] = {  # devices whose counters allocated claims consume
            k for k in (*used.whole, *used.capacity)}
        self.match: dict[tuple[DeviceKey, int, int, int], bool] = {}
        self.held: dict[CounterKey, dict[str, Decimal]] = {}  # allocated claims' counters
        for ci, c in enumerate(claims):
            devices = (c.get("spec") or {}).get("devices") or {}
            reqs: list[list[_Request]] = []
            for ri, r in enumerate(devices.get("requests") or ()):
                name = str(r.get("name", ri))
                if r.get("firstAvailable"):
                    reqs.append([_read_request(ci, self.names[ci], name, str(s.get("name")), s,
                                               classes) for s in r["firstAvailable"]])
                elif isinstance(r.get("exactly"), Mapping):
                    reqs.append([_read_request(ci, self.names[ci], name, None, r["exactly"],
                                               classes)])
                else:
                    raise AllocationError(f"claim {self.names[ci]}, request {name}: neither "
                                          "'exactly' nor 'firstAvailable'")
            self.requests.append(reqs)
            self.constraints.append([_Constraint(k) for k in devices.get("constraints") or ()
                                     if k.get("matchAttribute") or k.get("distinctAttribute")])
            self.results.append([])
        for ci, reqs in enumerate(self.requests):  # All: the matching devices, gathered first
            least = 0  # kube's minDevicesPerClaim
            for ri, subs in enumerate(reqs):
                for si, req in enumerate(subs):
                    if req.all_devices:
                        if pools.incomplete:
                            d, p = pools.incomplete[0]
                            raise AllocationError(
                                f"claim {self.names[ci]}, request {req.own_name}: asks for all "
                                f"devices, but resource pool {d}/{p} is currently being updated")
                        req.candidates = [d for d in pools.devices
                                          if self._selectable(req, ri, si, d)
                                          and self._fits(req, d) is not None]
                least += min(len(r.candidates) if r.all_devices else r.count for r in subs)
            if least > MAX_RESULTS:
                raise AllocationError(f"claim {self.names[ci]}: number of requested devices "
                                      f"{least} exceeds the claim limit of {MAX_RESULTS}")

    # kube's isSelectable: the class's selectors, then the request's
    def _selectable(self, req: _Request, ri: int, si: int, dev: PoolDevice) -> bool:
        key = (dev.key, req.claim, ri, si)
        got = self.match.get(key)
        if got is not None:
            return got
        if dev.raw.get("bindingConditions"):
            got = False
        else:
            device = self.pools.cel_input(dev)
            got = True
            for label, expr in req.selectors:
                try:
                    ok = cel.matches(expr, device)
                except SelectorError as e:
                    raise AllocationError(f"{label}: {e}") from None
                if not ok:
                    got = False
                    break
        self.match[key] = got
        return got

    def _fits(self, req: _Request, dev: PoolDevice) -> dict[str, Decimal] | None:
        """kube's ``CmpRequestOverCapacity``: what the request consumes of ``dev``'s
        capacities if that fits beside what is already consumed (None: it does not)."""
        capacity = dev.raw.get("capacity") or {}
        got = consumption(req.capacity, capacity)
        if got is None:
            return None
        held = self.used.capacity.get(dev.key, {})
        taking = self.sharing.get(dev.key, {})
        for name, amount in got.items():
            total = quantity((capacity.get(name) or {}).get("value")) or Decimal(0)
            if held.get(name, Decimal(0)) + taking.get(name, Decimal(0)) + amount > total:
                return None
        return got

    def _in_use(self, key: DeviceKey) -> bool:
        return key in self.used.whole or bool(self.taking.get(key))

    def _counters_fit(self, dev: PoolDevice) -> bool:
        """Reserve ``dev``'s counters if every counter set of its pool stays within what it
        has (kube's ``checkAvailableCounters``); False, reserving nothing, if not."""
        self._consume(dev, +1)
        for ck, have in self.pools.counters.items():
            if ck[:2] != dev.key[:2]:
                continue
            used = self._held_counters(ck)
            took = self.counters.get(ck, {})
            if any(used.get(n, Decimal(0)) + took.get(n, Decimal(0)) > v
                   for n, v in have.items()):
                self._consume(dev, -1)
                return False
        return True

    def _held_counters(self, ck: CounterKey) -> dict[str, Decimal]:
        got = self.held.get(ck)
        if got is not None:
            return got
        out = self.held[ck] = {}
        for d in self.pools.devices:
            if d.key[:2] != ck[:2] or d.key not in self.counted:
                continue
            for c in d.raw.get("consumesCounters") or ():
                if str(c.get("counterSet")) == ck[2]:
                    for n, v in _amounts(c.get("counters")).items():
                        out[n] = out.get(n, Decimal(0)) + v
        return out

    def _consume(self, dev: PoolDevice, sign: int) -> None:
        for c in dev.raw.get("consumesCounters") or ():
            ck = (dev.driver, dev.pool, str(c.get("counterSet")))
            got = self.counters.setdefault(ck, {})
            for n, v in _amounts(c.get("counters")).items():
                got[n] = got.get(n, Decimal(0)) + sign * v

    def _take(self, req: _Request, dev: PoolDevice, must: bool = False
              ) -> Callable[[], None] | None:
        """kube's ``allocateDevice``: take ``dev`` for ``req`` if it may be, returning how to
        give it back (None: it may not). ``must`` (an ``All`` request, which needs exactly this
        device): a constraint it breaks is an error, not a reason to try another."""
        shareable = bool(dev.raw.get("allowMultipleAllocations"))
        if not shareable and req.admin and req.claim in self.taking.get(dev.key, ()):
            return None
        if not req.admin and self._in_use(dev.key):
            return None
        counters = False
        if dev.raw.get("consumesCounters") and not (
                shareable and (dev.key in self.used.capacity or dev.key in self.sharing)):
            if not self._counters_fit(dev):
                return None
            counters = True
        added = 0
        undo_taken = False

        def undo() -> None:
            if undo_taken:
                self.taking[dev.key].discard(req.claim)
            for k in reversed(self.constraints[req.claim][:added]):
                k.remove(req)
            if counters:
                self._consume(dev, -1)

        if _tainted_against(dev, req):
            undo()
            return None
        for k in self.constraints[req.claim]:
            if not k.add(req, dev):
                undo()
                if must:
                    raise AllocationError(
                        f"claim {self.names[req.claim]}, request {req.own_name}: cannot add "
                        f"device {'/'.join(dev.key)} because a claim constraint would not be "
                        "satisfied")
                return None
            added += 1
        if not shareable:
            self.taking.setdefault(dev.key, set()).add(req.claim)
            undo_taken = True
        consumed = self._fits(req, dev)
        if consumed is None:
            undo()
            return None
        results = self.results[req.claim]
        before = len(results)
        if shareable:
            sharing = self.sharing.setdefault(dev.key, {})
            for n, v in consumed.items():
                sharing[n] = sharing.get(n, Decimal(0)) + v
        results.append((req, dev, consumed if shareable else None))

        def give_back() -> None:
            del results[before:]
            if shareable:
                sharing = self.sharing[dev.key]
                for n, v in consumed.items():
                    sharing[n] -= v
                if all(v == 0 for v in sharing.values()):
                    del self.sharing[dev.key]
            undo()

        return give_back

    def run(self) -> bool:
        try:
            return self._one(0, 0, 0, 0, False, 0)
        except _TooMany:
            raise AllocationError("allocation max size exceeded") from None

    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        """kube's ``allocateOne``: device ``di`` of subrequest ``si`` of request ``ri`` of
        claim ``ci``, trying the node's devices from ``start``."""
        if ci >= len(self.requests):
            return True
        if ri >= len(self.requests[ci]):
            try:
                return self._one(ci + 1, 0, 0, 0, False, 0)
            except _TooMany:  # a later claim's: this node cannot take them all
                return False
        subs = self.requests[ci][ri]
        if not in_sub and subs[0].sub is not None:
            every_too_many = True
            for k in range(len(subs)):
                try:
                    ok = self._one(ci, ri, k, 0, True, 0)
                except _TooMany:  # over the limit with this subrequest: the next one
                    continue
                every_too_many = False
                if ok:
                    self.chosen[(ci, ri)] = k
                    return True
            if every_too_many:
                raise _TooMany
            return False
        req = subs[si]
        need = len(req.candidates) if req.all_devices else req.count
        if req.all_devices and not req.candidates:
            return False
        if di >= need:
            return self._one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + need - di > MAX_RESULTS:
            raise _TooMany
        if req.all_devices:
            back = self._take(req, req.candidates[di], must=True)
            return back is not None and self._next(back, ci, ri, si, di, in_sub, 0)
        devices = self.pools.devices
        for i in range(start, len(devices)):
            dev = devices[i]
            if req.admin and req.claim in self.taking.get(dev.key, ()):
                continue
            if not req.admin and self._in_use(dev.key):
                continue
            if not self._selectable(req, ri, si, dev) or self._fits(req, dev) is None:
                continue
            back = self._take(req, dev)
            if back is not None and self._next(back, ci, ri, si, di, in_sub, i + 1):
                return True
        return False

    def _next(self, back: Callable[[], None], ci: int, ri: int, si: int, di: int,
              in_sub: bool, start: int) -> bool:
        """Go on to the request's next device having taken one; if that fails (or passes
        the result limit), give the device ``back``."""
        try:
            if self._one(ci, ri, si, di + 1, in_sub, start):
                return True
        except _TooMany:
            back()
            raise
        back()
        return False

    def allocations(self, node: str) -> list[dict[str, Any]]:
        """Each claim's ``status.allocation`` (kube's result assembly)."""
        out: list[dict[str, Any]] = []
        for ci, claim in enumerate(self.claims):
            results: list[dict[str, Any]] = []
            for req, dev, consumed in self.results[ci]:
                r: dict[str, Any] = {"request": req.result_name, "driver": dev.driver,
                                     "pool": dev.pool, "device": dev.name}
                if req.admin:
                    r["adminAccess"] = True
                if req.tolerations:
                    r["tolerations"] = req.raw_tolerations()
                if consumed is not None:
                    r["shareID"] = self.share_id()
                    caps = dev.raw.get("capacity") or {}
                    if consumed:
                        r["consumedCapacity"] = {
                            n: _consumed_text(req.capacity_text.get(n), caps.get(n) or {})
                            for n in consumed}
                results.append(r)
            devices: dict[str, Any] = {"results": results}
            config = self._config(ci, claim)
            if config:
                devices["config"] = config
            out.append({"devices": devices, "nodeSelector": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In",
                                  "values": [node]}]}]}})
        return out

    def _taken(self, ci: int, ri: int) -> _Request:
        subs = self.requests[ci][ri]
        return subs[self.chosen.get((ci, ri), 0)]

    def _config(self, ci: int, claim: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The classes' configs (each class's once, naming every request of it) and the
        claim's that apply to what was allocated, as kube copies them."""
        out: list[dict[str, Any]] = []
        by_class: dict[str, list[dict[str, Any]]] = {}
        classes = self.classes
        for ri in range(len(self.requests[ci])):
            req = self._taken(ci, ri)
            have = by_class.get(req.class_name)
            if have is not None:
                for cfg in have:
                    cfg["requests"].append(req.result_name)
                continue
            made = [{"source": "FromClass", "requests": [req.result_name], "opaque":
                     cfg["opaque"]} for cfg in ((classes.get(req.class_name) or {}).get("spec")
                                                or {}).get("config") or () if cfg.get("opaque")]
            by_class[req.class_name] = made
            out += made
        spec_reqs = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
        for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or ():
            if not cfg.get("opaque"):
                continue
            names = list(cfg.get("requests") or ())
            entry = {"source": "FromClaim", "requests": names, "opaque": cfg["opaque"]}
            if not names:
                out.append(entry)
                continue
            for ri, r in enumerate(spec_reqs):
                if r.get("name") in names:
                    out.append(dict(entry))
                    continue
                taken = self._taken(ci, ri)
                if taken.sub is not None and taken.result_name in names:
                    out.append(dict(entry))
        return out


def allocate(claims: Sequence[Mapping[str, Any]], classes: Mapping[str, Mapping[str, Any]],
             pools: NodePools, used: InUse,
             share_id: Callable[[], str] = lambda: str(uuid.uuid4())
             ) -> list[dict[str, Any]] | None:
    """Allocate every one of ``claims`` (none allocated yet) together on ``pools``' node beside
    what ``used`` holds: each claim's ``status.allocation``, in order, or None when they do not
    all fit there. :class:`AllocationError` when they cannot be allocated anywhere (kube-
    scheduler's error: a missing class, a CEL selector that fails)."""
    search = _Search(claims, classes, pools, used, share_id)
    if not search.run():
        return None
    return search.allocations(pools.node)
