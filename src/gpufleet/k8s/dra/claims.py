"""ResourceClaims (``resource.k8s.io/v1``) ⇄ the request model and the state's GPU bookings.

Three directions, all pure (the API's JSON in, data out):

* **What a pending pod asks** (:func:`pod_ask`): the pod's claims (``spec.resourceClaims``, a
  ``resourceClaimName`` or a template whose claim the controller-manager created and named in
  ``status.resourceClaimStatuses``) hold one GPU device request, read as a
  :class:`~gpufleet.state.ResourceRequest`'s GPU part:

  - whole GPUs: ``exactly: {deviceClassName: gpu.nvidia.com, count: N}``;
  - a MIG device: a class whose devices are ``type == 'mig'`` (``mig.nvidia.com``) and a
    ``profile == '3g.20gb'`` CEL selector (on the request or on the class);
  - a share of one GPU: ``count: 1`` on the GPU class with ``capacity.requests.memory`` (the
    consumable-capacity form); the share's milli-GPU is the pod's ``gpu-fraction`` annotation
    when it has one, else 1 (the device's memory is then the only thing shared);
  - a share as :mod:`.shares`' templates ask it: a ``firstAvailable`` list whose every
    subrequest is such a share on a shareable GPU (``device.allowMultipleAllocations == true``)
    of exactly one memory size (``device.capacity['gpu.nvidia.com'].memory.compareTo(
    quantity('80Gi')) == 0``). Placement gets any GPU model of those sizes; the device it picks
    picks the subrequest, written as kube-scheduler writes a prioritized list's result
    (``request: gpu/gpu-80gi``, that subrequest's capacity consumed).

  Any other shape — another ``firstAvailable``, several requests or claims, another driver —
  is why placement cannot place the pod; :mod:`.claim_view` then gives it to the general
  allocator (:mod:`.allocator`).

  Selectors (the class's and the request's): the ``&&`` operands placement reads —
  ``device.driver == 'gpu.nvidia.com'``, equality on the driver's ``type``, ``profile`` and
  ``productName`` attributes (and, in a ``firstAvailable`` share, the two terms above) — give
  the request's kind, MIG profile and GPU model. Every other selector is kept whole and
  evaluated per device as Kubernetes does (:mod:`gpufleet.k8s.dra.cel`, :func:`selector_nodes`):
  placement places the claim only on nodes where it matches every device placement may
  choose (it picks GPU indices without knowing the selectors); one that matches only some of
  a node's is the general allocator's; a selector that cannot be evaluated refuses the claim
  with the CEL error.
* **What is taken** (:func:`holdings`): every claim with ``status.allocation`` — written by
  gpufleet or any other scheduler — books its devices on the state's rows: a whole device its
  GPU (all of a MIG GPU's slices), a MIG device its slot, a share (a result with ``shareID``)
  its ``consumedCapacity`` of memory and the milli-GPU that is of the device's memory (or of
  its ``cores``, on gpufleet's node plugin's devices, where that is more).
* **What to write** (:func:`allocation`): a ``Bind`` back as ``status.allocation`` — results
  (request, driver, pool, device; ``shareID`` and ``consumedCapacity`` for a share), the class's
  and the claim's opaque configs as kube-scheduler copies them, and the node as ``nodeSelector``.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.decisions import Bind, MigSlot
from gpufleet.k8s.dra import cel
from gpufleet.k8s.dra.cel import SelectorError
from gpufleet.k8s.dra.devices import Device, NodeDevices
from gpufleet.k8s.dra.shares import CORES
from gpufleet.k8s.dra.slices import DRIVER, GPU_DRIVERS, GPUFLEET_DRIVER, device_attribute
from gpufleet.k8s.translate.quantity import memory_mib, quantity
from gpufleet.state import GPU_MILLI, ResourceRequest

FINALIZER = "resource.kubernetes.io/delete-protection"

_DOMAIN = r"""['"](gpu\.nvidia\.com|gpu\.gpufleet\.io)['"]"""  # the GPU drivers' domains
_TERM = re.compile(
    rf"""^device\.attributes\[{_DOMAIN}\]\.(\w+)\s*==\s*['"]([^'"]*)['"]$""")
_DRIVER_TERM = re.compile(r"""^device\.driver\s*==\s*['"]([^'"]*)['"]$""")
# what shares' templates select: shareable devices of exactly one memory size
_MEMORY_TERM = re.compile(
    rf"""^device\.capacity\[{_DOMAIN}\]\.memory\.compareTo\("""
    r"""\s*quantity\(\s*['"]([^'"]+)['"]\s*\)\s*\)\s*==\s*0$""")
_SHAREABLE_TERM = re.compile(r"^device\.allowMultipleAllocations\s*==\s*true$")
_READ = ("type", "profile", "productName")
# the terms that are no attribute (read only in a firstAvailable share's subrequests)
MEMORY, SHAREABLE = "capacity.memory", "allowMultipleAllocations"
# the driver a request's devices must be of: its ``device.driver ==`` term, or the domain of an
# attribute or capacity term placement reads (those exist only on that driver's devices)
DRIVER_KEY = "driver"
# consumable capacities a share may ask: memory on either driver's GPU; ``cores`` (percent of
# the SMs) on gpufleet's node plugin's
SHARE_CAPACITIES = {DRIVER: frozenset({"memory"}),
                    GPUFLEET_DRIVER: frozenset({"memory", "cores"})}


def claim_key(claim: Mapping[str, Any]) -> str:
    m = claim.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def _scan(expr: str) -> Iterator[tuple[int, int]]:
    """(index, nesting depth after it) of each character outside string literals."""
    depth, quote, i = 0, "", 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        else:
            depth += (c in "([{") - (c in ")]}")
            yield i, depth
        i += 1


def _split_and(expr: str) -> list[str]:
    """The expression's top-level ``&&`` operands (outside parentheses, brackets and string
    literals), a parenthesised operand's own operands included: ``a && (b && c)`` → a, b, c."""
    parts: list[str] = []
    start = 0
    for i, depth in _scan(expr):
        if depth == 0 and expr.startswith("&&", i) and i >= start:
            parts.append(expr[start:i])
            start = i + 2
    parts.append(expr[start:])
    out: list[str] = []
    for part in parts:
        term = part.strip()
        while term.startswith("(") and next(
                (i for i, depth in _scan(term) if depth == 0), -1) == len(term) - 1:
            term = term[1:-1].strip()
        out += _split_and(term) if term != part.strip() else [term]
    return out


@dataclass(frozen=True, slots=True)
class Selector:
    """A CEL selector evaluated per device (:mod:`gpufleet.k8s.dra.cel`): ``label`` names it
    as kube-scheduler does (``class gpu.nvidia.com: selector #0``, ``claim ns/c: selector
    #1``)."""

    label: str
    expression: str


def _selector_terms(selectors: Any, where: str, label: str, share_terms: bool
                    ) -> tuple[dict[str, str], tuple[Selector, ...], str | None]:
    """What placement reads of CEL selectors, the selectors left to evaluate per device, or
    why the request cannot be allocated.

    Each selector's top-level ``&&`` operands that gpufleet reads — ``device.driver ==
    'gpu.nvidia.com'`` and equality on the driver's ``type``, ``profile`` and ``productName``
    (with ``share_terms``, a firstAvailable share's, also ``allowMultipleAllocations == true``
    as :data:`SHAREABLE` and a memory equality as :data:`MEMORY`, in MiB) — become placement's
    terms. A selector with any other operand is kept whole as a :class:`Selector`; the terms
    read from it still narrow placement (each is necessary for the whole to hold)."""
    out: dict[str, str] = {}
    kept: list[Selector] = []
    for i, sel in enumerate(selectors or ()):
        expr = ((sel or {}).get("cel") or {}).get("expression")
        if not isinstance(expr, str):
            return out, (), f"{where}: a selector without a CEL expression"
        whole = True
        for term in _split_and(expr):
            domain = None
            if (m := _DRIVER_TERM.match(term)) is not None:
                if m.group(1) not in GPU_DRIVERS:
                    return out, (), (f"{where}: selects driver {m.group(1)!r}, not "
                                     f"{' or '.join(GPU_DRIVERS)}")
                key, value = DRIVER_KEY, m.group(1)
            elif share_terms and _SHAREABLE_TERM.match(term):
                key, value = SHAREABLE, "true"
            elif share_terms and (m := _MEMORY_TERM.match(term)) is not None \
                    and memory_mib(m.group(2)) > 0:
                key, value, domain = MEMORY, str(memory_mib(m.group(2))), m.group(1)
            elif (m := _TERM.match(term)) is not None and m.group(2) in _READ:
                key, value, domain = m.group(2), m.group(3), m.group(1)
            else:
                whole = False
                continue
            for k, v in ((key, value), (DRIVER_KEY, domain)):
                if v is None:
                    continue
                if out.get(k, v) != v:
                    return out, (), f"{where}: {k} selected twice, differently"
                out[k] = v
        if not whole:
            kept.append(Selector(f"{label}: selector #{i}", expr))
    return out, tuple(kept), None


@dataclass(frozen=True, slots=True)
class ShareOption:
    """One subrequest of a prioritized-list share: on a device of ``device_memory_mib`` it asks
    ``share_memory_mib``, and the allocation result names it (``<request>/<name>``)."""

    name: str
    device_memory_mib: int
    share_memory_mib: int
    cel: tuple[Selector, ...] = ()  # its class's and its own selectors placement does not read
    capacity: tuple[tuple[str, str], ...] = ()  # its capacity requests besides memory


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """One claim's GPU device request, as placement needs it."""

    claim: str  # namespace/name
    request: str  # the request's name (what the allocation result names)
    class_name: str
    count: int
    profile: str | None  # MIG
    share_memory_mib: int  # >0: a share of one GPU with this much memory
    product: str | None  # productName selected
    # a firstAvailable share (the templates k8s.dra.shares writes): one subrequest per device
    # memory size; share_memory_mib is then 0 and the chosen device's size picks the option
    options: tuple[ShareOption, ...] = ()
    # the class's and the request's selectors placement does not read, evaluated per device
    # (:func:`selector_nodes`); a firstAvailable share's are its options'
    cel: tuple[Selector, ...] = ()
    driver: str | None = None  # the GPU driver whose devices it selects (None: either)
    capacity: tuple[tuple[str, str], ...] = ()  # capacity requests besides memory (``cores``)


@dataclass(frozen=True, slots=True)
class _Read:
    """One ``exactly`` request or subrequest as read."""

    class_name: str
    count: int
    terms: dict[str, str]
    share: int  # capacity.requests.memory in MiB (0: none)
    cel: tuple[Selector, ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()  # the other capacity requests, as written


def _device_type(terms: Mapping[str, str]) -> str | None:
    """The device type the terms select: their ``type``; on gpufleet's node plugin, which
    publishes whole GPUs only, ``gpu`` without one."""
    return terms.get("type") or ("gpu" if terms.get(DRIVER_KEY) == GPUFLEET_DRIVER else None)


def _device_request(ex: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]], where: str,
                    claim: str, share_terms: bool = False) -> tuple[_Read | None, str | None]:
    """A device request (``exactly`` or a subrequest, same fields) checked against the shapes
    gpufleet places, or why not."""
    cname = str(ex.get("deviceClassName") or "")
    dc = classes.get(cname)
    if dc is None:
        return None, f"{where}: DeviceClass {cname!r} does not exist"
    terms, cel, why = _selector_terms((dc.get("spec") or {}).get("selectors"),
                                      f"DeviceClass {cname}", f"class {cname}", share_terms)
    if why:
        return None, why
    more, mine, why = _selector_terms(ex.get("selectors"), where, f"claim {claim}", share_terms)
    if why:
        return None, why
    if any(terms.get(k, v) != v for k, v in more.items()):
        return None, f"{where}: its selectors contradict DeviceClass {cname}'s"
    terms |= more
    if (ex.get("allocationMode") or "ExactCount") != "ExactCount":
        return None, f"{where}: allocationMode {ex.get('allocationMode')!r} (only ExactCount)"
    n = int(ex.get("count") or 1)
    driver = terms.get(DRIVER_KEY)
    kind = _device_type(terms)
    cap = ((ex.get("capacity") or {}).get("requests") or {})
    share = memory_mib(cap.get("memory")) if cap.get("memory") is not None else 0
    consumable = SHARE_CAPACITIES.get(driver or DRIVER, frozenset({"memory"}))
    if set(cap) - consumable:
        return None, (f"{where}: capacity {sorted(cap)} (consumable on {driver or DRIVER}: "
                      f"{', '.join(sorted(consumable))})")
    others = tuple(sorted((str(k), str(v)) for k, v in cap.items() if k != "memory"))
    if kind == "mig":
        if "profile" not in terms:
            return None, f"{where}: a MIG device needs a profile selector"
        if n != 1 or share:
            return None, f"{where}: one MIG device per request, no capacity request"
    elif kind == "gpu":
        if "profile" in terms:
            return None, f"{where}: a whole GPU has no profile"
        if share and n != 1:
            return None, f"{where}: a share is of one GPU (count 1)"
    else:
        return None, f"{where}: DeviceClass {cname} does not select one device type"
    return _Read(cname, n, terms, share, cel + mine, others), None


def _first_available(key: str, name: str, subs: Any, classes: Mapping[str, Mapping[str, Any]],
                     where: str) -> tuple[ClaimAsk | None, str | None]:
    """A prioritized list gpufleet allocates: every subrequest a share (count 1, a memory
    capacity request) of one shareable GPU of exactly one memory size (the sizes distinct), all
    of one DeviceClass and product — so the device placement picks decides the subrequest."""
    if not isinstance(subs, list) or not subs:
        return None, f"{where}: an empty firstAvailable"
    shape = ("a firstAvailable gpufleet allocates lists shares of one GPU each selecting "
             "allowMultipleAllocations and exactly one memory size")
    options: list[ShareOption] = []
    firsts: set[tuple[str, str | None, str | None]] = set()
    for j, sub in enumerate(subs):
        sname = str((sub or {}).get("name", j))
        got, why = _device_request(sub or {}, classes, f"{where} subrequest {sname!r}", key,
                                   share_terms=True)
        if why or got is None:
            return None, why
        t = got.terms
        if _device_type(t) != "gpu" or not got.share or got.count != 1 or MEMORY not in t \
                or t.get(SHAREABLE) != "true":
            return None, f"{where} subrequest {sname!r}: {shape}"
        size = int(t[MEMORY])
        if any(o.device_memory_mib == size for o in options):
            return None, f"{where}: two subrequests select {size} MiB devices"
        options.append(ShareOption(sname, size, got.share, got.cel, got.capacity))
        firsts.add((got.class_name, t.get("productName"), t.get(DRIVER_KEY)))
    if len(firsts) != 1:
        return None, f"{where}: subrequests of different DeviceClasses or products, or drivers"
    ((cname, product, driver),) = firsts
    return ClaimAsk(key, name, cname, 1, None, 0, product, tuple(options), driver=driver), None


def claim_asks(claim: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]
               ) -> tuple[list[ClaimAsk], str | None]:
    """The claim's device requests as asks, or why gpufleet cannot allocate it."""
    key = claim_key(claim)
    asks: list[ClaimAsk] = []
    for i, r in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()):
        where = f"claim {key} request {r.get('name', i)!r}"
        if key.endswith("/None"):  # not created yet (an extended-resource claim)
            where = f"extended-resource request {r.get('name', i)!r}"
        name = str(r.get("name", ""))
        if r.get("firstAvailable") is not None:
            ask, why = _first_available(key, name, r["firstAvailable"], classes, where)
            if why or ask is None:
                return [], why
            asks.append(ask)
            continue
        ex = r.get("exactly")
        if not isinstance(ex, Mapping):
            return [], f"{where}: neither 'exactly' nor 'firstAvailable'"
        got, why = _device_request(ex, classes, where, key)
        if why or got is None:
            return [], why
        asks.append(ClaimAsk(key, name, got.class_name, got.count, got.terms.get("profile"),
                             got.share, got.terms.get("productName"), cel=got.cel,
                             driver=got.terms.get(DRIVER_KEY), capacity=got.capacity))
    return asks, None


# -- CEL selectors → nodes ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Judged:
    """One ask's selectors over every node's candidate devices (see :func:`selector_nodes`)."""

    nodes: frozenset[str]  # every candidate device matches
    partly: dict[str, Selector]  # node → the selector that matches only some of them
    error: tuple[Selector, SelectorError] | None  # the first selector that failed, and how


def candidate_devices(ask: ClaimAsk, node: NodeDevices
                      ) -> list[tuple[Device, tuple[Selector, ...]]]:
    """The node's devices placement may give ``ask`` — the selectors it reads (kind, MIG
    profile, productName and, for a firstAvailable share, a shareable device of an option's
    memory) admit them — each with the CEL selectors it must also match."""
    devs = [d for (_, prof, _), d in sorted(node.mig.items()) if prof == ask.profile] \
        if ask.profile is not None else [node.whole[g] for g in sorted(node.whole)]
    out: list[tuple[Device, tuple[Selector, ...]]] = []
    for d in devs:
        if ask.driver is not None and d.driver != ask.driver:
            continue
        if ask.product is not None and device_attribute(
                d.raw or {}, "productName", d.driver) != ask.product:
            continue
        if ask.options:
            opt = next((o for o in ask.options if o.device_memory_mib == d.memory_mib), None)
            if opt is None or not d.shareable:
                continue
            out.append((d, opt.cel))
        else:
            out.append((d, ask.cel))
    return out


def _judge(ask: ClaimAsk, nodes: Mapping[str, NodeDevices]) -> _Judged:
    ok: set[str] = set()
    partly: dict[str, Selector] = {}
    for name in sorted(nodes):
        node = nodes[name]
        missed: Selector | None = None  # the first selector a device here failed
        fits: list[bool] = []
        for dev, sels in candidate_devices(ask, node):
            device = node.cel_input(dev)
            hit = True
            for sel in sels:  # in order; the first false one decides
                try:
                    got = cel.matches(sel.expression, device)
                except SelectorError as e:
                    return _Judged(frozenset(), {}, (sel, e))
                if not got:
                    hit = False
                    missed = missed or sel
                    break
            fits.append(hit)
        if fits and all(fits):
            ok.add(name)
        elif any(fits) and missed is not None:
            partly[name] = missed
    return _Judged(frozenset(ok), partly, None)


def _selectors_of(ask: ClaimAsk) -> tuple[Selector, ...]:
    return ask.cel if not ask.options else tuple(s for o in ask.options for s in o.cel)


def selector_nodes(ask: ClaimAsk, nodes: Mapping[str, NodeDevices],
                   memo: dict[Any, Any] | None = None) -> tuple[frozenset[str] | None, str | None]:
    """The nodes where ``ask``'s CEL selectors (those placement does not read) match every
    device placement may choose for it, or why placement cannot place the claim; None: it has
    no such selector (no restriction).

    Placement picks a node's GPU indices (or MIG start slices) without knowing which devices a
    selector admits, so a node is eligible only where the selectors match all of its candidate
    devices; where a node has some but not all, the claim goes to the general allocator
    (:mod:`.allocator`), which picks devices one by one, as it does when no node is eligible,
    and the reason given here is the pod's refusal if that finds no node either. A selector
    that cannot be evaluated (a compile error, a missing attribute) refuses the claim with
    the CEL error, as kube-scheduler's allocator stops at it. ``memo``: results by the ask's
    shape and selectors, valid while the devices are the same objects."""
    sels = _selectors_of(ask)
    if not sels:
        return _driver_nodes(ask, nodes, memo)
    for sel in sels:  # a compile error fails every device: said even where none is published
        if (text := cel.compile_selector(sel.expression).error) is not None:
            return frozenset(), f"{sel.label}: {SelectorError(sel.expression, text, compile=True)}"
    key = (ask.driver, ask.profile, ask.product, tuple((o.device_memory_mib, tuple(
        s.expression for s in o.cel)) for o in ask.options),
        tuple(s.expression for s in ask.cel))
    judged = memo.get(key) if memo is not None else None
    if judged is None:
        judged = _judge(ask, nodes)
        if memo is not None:
            memo[key] = judged
    if judged.error is not None:
        sel, err = judged.error
        return frozenset(), f"{sel.label}: {err}"
    if judged.nodes and not judged.partly:
        return judged.nodes, None
    if judged.partly:  # placement would keep the claim off those nodes; kube's allocator not
        where = sorted(judged.partly)
        sel = judged.partly[where[0]]
        more = f" and {len(where) - 1} more" if len(where) > 1 else ""
        return frozenset(), (
            f"{sel.label}: {sel.expression!r} matches only some of the {_kind(ask)} devices "
            f"on node {where[0]}{more}; cannot allocate all claims with the devices it admits")
    if len(sels) == 1:
        return frozenset(), (f"{sels[0].label}: no published {_kind(ask)} device matches "
                             f"{sels[0].expression!r}")
    return frozenset(), (f"claim {ask.claim}: no published {_kind(ask)} device matches its "
                         f"selectors ({'; '.join(repr(s.expression) for s in sels)})")


def _driver_nodes(ask: ClaimAsk, nodes: Mapping[str, NodeDevices], memo: dict[Any, Any] | None
                  ) -> tuple[frozenset[str] | None, str | None]:
    """The nodes whose GPUs ``ask``'s driver publishes (None: every node with devices; a fleet
    of one GPU driver needs no restriction), or why none can serve it."""
    if ask.driver is None:
        return None, None
    key = ("driver", ask.driver)
    got = memo.get(key) if memo is not None else None
    if got is None:
        have = frozenset(n for n, d in nodes.items() if d.driver == ask.driver)
        got = (None if len(have) == len(nodes) else have,)
        if memo is not None:
            memo[key] = got
    (admits,) = got
    if admits is not None and not admits:
        return admits, f"claim {ask.claim}: no node publishes {ask.driver} GPUs"
    return admits, None


def _kind(ask: ClaimAsk) -> str:
    return f"MIG {ask.profile}" if ask.profile is not None else "GPU"


# -- pods → claims ------------------------------------------------------------------------------


def pod_claim_names(pod: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """The names of the pod's claims in its namespace, or why not all are known yet (a
    template's claim the controller-manager has not created)."""
    spec = pod.get("spec") or {}
    status = {s.get("name"): s.get("resourceClaimName")
              for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    out: list[str] = []
    for rc in spec.get("resourceClaims") or ():
        if rc.get("resourceClaimName"):
            out.append(str(rc["resourceClaimName"]))
        elif rc.get("resourceClaimTemplateName"):
            got = status.get(rc.get("name"))
            if not got:
                return (), f"waiting for the claim of template {rc['resourceClaimTemplateName']}"
            out.append(str(got))
    ext = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {})
    if ext.get("resourceClaimName"):
        out.append(str(ext["resourceClaimName"]))
    return tuple(out), None


def pod_ask(
    base: ResourceRequest, milli_hint: int | None, claims: Sequence[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]], catalog: GpuCatalog,
) -> tuple[ResourceRequest | None, ClaimAsk | None, str | None]:
    """The pod's request (``base``: its CPU, memory and node constraints) with the GPU part its
    claims ask; the one ask it is; or why it cannot be placed."""
    asks: list[ClaimAsk] = []
    for c in claims:
        got, why = claim_asks(c, classes)
        if why:
            return None, None, why
        asks += got
    if not asks:
        return base, None, None
    if len(asks) > 1:
        return None, None, "gpufleet places one GPU device request per pod"
    (a,) = asks
    req = base
    if a.product is not None:
        model = catalog.resolve(a.product.replace(" ", "-")) or catalog.resolve(a.product)
        if model is None:
            return None, None, f"claim {a.claim}: unknown productName {a.product!r}"
        req = ResourceRequest(**{**_fields(req), "gpu_models": frozenset({model})})
    if a.profile is not None:
        return ResourceRequest(**{**_fields(req), "num_gpu": 1, "mig_profile": a.profile}), a, None
    if a.options:
        return _first_available_ask(req, milli_hint, a, catalog)
    if a.share_memory_mib:
        milli = milli_hint if milli_hint is not None and milli_hint < GPU_MILLI else 1
        cores, why = _cores_milli(a.driver, a.capacity, f"claim {a.claim}")
        if why:
            return None, None, why
        milli = max(milli, cores)
        return ResourceRequest(**{**_fields(req), "num_gpu": 1, "gpu_milli": milli,
                                  "gpu_memory_mib": a.share_memory_mib}), a, None
    return ResourceRequest(**{**_fields(req), "num_gpu": a.count, "gpu_milli": GPU_MILLI,
                              "gpu_memory_mib": 0}), a, None


def _first_available_ask(req: ResourceRequest, milli_hint: int | None, a: ClaimAsk,
                         catalog: GpuCatalog
                         ) -> tuple[ResourceRequest | None, ClaimAsk | None, str | None]:
    """A prioritized-list share: any GPU model of one of the subrequests' memory sizes, and
    milli-GPU the pod's fraction — at least the largest fraction of its device any subrequest
    asks (``ceil(memory × 1000 / size)``, what :func:`holdings` books once it is allocated), so
    milli fitting on a GPU means its memory fits too, whichever subrequest the device picks."""
    sizes = {o.device_memory_mib for o in a.options}
    models = frozenset(n for n, m in catalog.models.items() if m.memory_mib in sizes)
    if req.gpu_models is not None:
        models &= req.gpu_models
    if not models:
        return None, None, (f"claim {a.claim}: no GPU model gpufleet knows has the memory its "
                            f"subrequests select ({', '.join(f'{s} MiB' for s in sorted(sizes))})")
    least = max(math.ceil(o.share_memory_mib * GPU_MILLI / o.device_memory_mib)
                for o in a.options)
    for o in a.options:
        cores, why = _cores_milli(a.driver, o.capacity, f"claim {a.claim} subrequest {o.name!r}")
        if why:
            return None, None, why
        least = max(least, cores)
    hint = milli_hint if milli_hint is not None and milli_hint < GPU_MILLI else 0
    milli = min(GPU_MILLI, max(1, least, hint))
    return ResourceRequest(**{**_fields(req), "num_gpu": 1, "gpu_milli": milli,
                              "gpu_memory_mib": 0, "gpu_models": models}), a, None


def _cores_milli(driver: str | None, capacity: Iterable[tuple[str, str]], where: str
                 ) -> tuple[int, str | None]:
    """The milli-GPU a share's ``cores`` take on gpufleet's node plugin's devices (percent of
    the GPU's SMs, :data:`~.shares.CORES` in all): what it asks, or — asking none — the
    capacity's default, all of them (a memory-only share there holds every core, as
    kube-scheduler's allocator books it); 0 on other drivers' devices. Placement books the
    larger of this and the memory's share, so shares never sum above the cores either; more
    cores than a GPU has is why the claim cannot be allocated."""
    if driver != GPUFLEET_DRIVER:
        return 0, None
    asked = dict(capacity).get("cores")
    if asked is None:
        return GPU_MILLI, None
    q = quantity(asked)
    if q is None or q < 0 or q > CORES:
        return 0, f"{where}: cores {asked} (a GPU has {CORES}, percent of its SMs)"
    return max(1, math.ceil(q * GPU_MILLI / CORES)), None


def _fields(req: ResourceRequest) -> dict[str, Any]:
    return {f: getattr(req, f) for f in req.__dataclass_fields__}


# -- allocated claims → bookings --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holding:
    """One allocated device as the state books it."""

    claim: str
    node: str
    request: ResourceRequest
    bind: Bind


def allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def reserved_for(claim: Mapping[str, Any]) -> list[str]:
    """UIDs the claim is reserved for."""
    return [str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or ()]


def allocation_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocation is restricted to (``metadata.name In [node]``), if one."""
    sel = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in sel.get("nodeSelectorTerms") or ():
        for f in term.get("matchFields") or ():
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and f.get("values"):
                return str(f["values"][0])
    return None


def _full_slot(node: NodeDevices, dev: Device, catalog: GpuCatalog) -> MigSlot | None:
    """A whole GPU of a MIG GPU takes all of its slices: the largest profile at slice 0."""
    spec = catalog[node.inventory.gpu_model].mig
    if spec is None:
        return None
    prof = max(spec.profiles.values(), key=lambda p: (p.memory_slices, p.compute))
    return MigSlot(dev.gpu, prof.name, 0)


def holdings(claims: Iterable[Mapping[str, Any]], nodes: Mapping[str, NodeDevices],
             catalog: GpuCatalog) -> tuple[list[Holding], dict[str, str]]:
    """The bookings of every allocated claim's ``gpu.nvidia.com`` devices, and the claims (or
    results) that could not be read, with why (a device no slice publishes any more)."""
    out: list[Holding] = []
    bad: dict[str, str] = {}
    by_key = {d.key: (n, d) for n in nodes.values() for d in n.by_name.values()}
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation")
        if not alloc:
            continue
        key = claim_key(c)
        for r in ((alloc.get("devices") or {}).get("results") or ()):
            if r.get("driver") not in GPU_DRIVERS:
                continue
            found = by_key.get((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))))
            if found is None:
                bad[key] = f"device {r.get('pool')}/{r.get('device')} is not published"
                continue
            node, dev = found
            job = f"claim:{key}/{r.get('device')}"
            if r.get("shareID") and dev.profile is None and dev.gpu not in node.inventory.mig_gpus:
                mem = memory_mib(((r.get("consumedCapacity") or {}).get("memory")) or 0)
                total = dev.memory_mib or node.inventory.gpu_memory_mib
                milli = max(1, min(GPU_MILLI, math.ceil(mem * GPU_MILLI / max(total, 1))))
                # cores (gpufleet's node plugin): the larger fraction of the GPU is what it holds
                cores = quantity((r.get("consumedCapacity") or {}).get("cores"))
                have = quantity((((dev.raw or {}).get("capacity") or {}).get("cores") or {})
                                .get("value"))
                if cores is not None and have:
                    milli = max(milli, min(GPU_MILLI, math.ceil(cores * GPU_MILLI / have)))
                out.append(Holding(key, node.node,
                                   ResourceRequest(num_gpu=1, gpu_milli=milli, gpu_memory_mib=mem),
                                   Bind(job, node.node, (dev.gpu,), milli)))
            elif (h := _device_holding(key, job, node, dev, catalog)) is not None:
                out.append(h)
    return out, bad


def _device_holding(key: str, job: str, node: NodeDevices, dev: Device, catalog: GpuCatalog
                    ) -> Holding | None:
    """A whole device booked: a MIG device its slot, a whole GPU of a MIG GPU all of its slices,
    another GPU all of it (None: a MIG GPU whose model has no MIG profiles)."""
    slot: MigSlot | None = None
    if dev.profile is not None:
        slot = MigSlot(dev.gpu, dev.profile, dev.start)
    elif dev.gpu in node.inventory.mig_gpus:
        slot = _full_slot(node, dev, catalog)
        if slot is None:
            return None
    if slot is not None:
        return Holding(key, node.node, ResourceRequest(num_gpu=1, mig_profile=slot.profile),
                       Bind(job, node.node, (), 0, (slot,)))
    return Holding(key, node.node, ResourceRequest(num_gpu=1),
                   Bind(job, node.node, (dev.gpu,), GPU_MILLI))


def taint_holdings(nodes: Mapping[str, NodeDevices], catalog: GpuCatalog) -> list[Holding]:
    """What a tainted device (:func:`~.devices.blocking_taint`) withholds from placement: its
    whole GPU or its MIG slot, booked as taken (the part no claim holds yet)."""
    out: list[Holding] = []
    for node in nodes.values():
        for dev in node.tainted:
            job = f"taint:{dev.driver}/{dev.pool}/{dev.name}"
            if (h := _device_holding(job, job, node, dev, catalog)) is not None:
                out.append(h)
    return out


# -- Bind → status.allocation -----------------------------------------------------------------


def node_selector(node: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def _mib_quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _round_up(requested: Decimal, policy: Mapping[str, Any]) -> Decimal:
    """A capacity request as the device's ``requestPolicy`` makes it (kube's allocator): up to
    the next valid value, or into the valid range at its step."""
    values = sorted(q for v in policy.get("validValues") or () if (q := quantity(v)) is not None)
    if values:
        return next((v for v in values if v >= requested), requested)
    rng = policy.get("validRange") or {}
    low = quantity(rng.get("min"))
    if low is None:
        return requested
    if requested <= low:
        return low
    step = quantity(rng.get("step"))
    if step:
        return low + math.ceil((requested - low) / step) * step
    return requested


def _quantity_text(q: Decimal, binary: bool) -> str:
    if binary:
        mib = q / (1 << 20)
        if mib == int(mib):
            return _mib_quantity(int(mib))
    return str(int(q)) if q == int(q) else f"{q.normalize():f}"


def consumed_capacity(device: Mapping[str, Any], memory_used_mib: int,
                      requests: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """``consumedCapacity`` of one allocation of a shareable device, as kube-scheduler's
    allocator writes it: every capacity the device has — memory ``memory_used_mib`` (what
    placement planned), the others as requested — raised to the capacity's request policy; a
    capacity not requested takes the policy's default, or all of it without one."""
    asked = dict(requests)
    out: dict[str, str] = {}
    for name, cap in ((device.get("capacity") or {}).items()):
        if not isinstance(cap, Mapping):
            continue
        policy = cap.get("requestPolicy") or {}
        value = quantity(cap.get("value"))
        if name == "memory":
            want: Decimal | None = Decimal(memory_used_mib) * (1 << 20)
        else:
            want = quantity(asked.get(name))
        if want is None:
            got = quantity(policy.get("default")) if policy else None
            got = value if got is None else got
        else:
            got = _round_up(want, policy) if policy else want
        if got is None:
            continue
        if value is not None:
            got = min(got, value)
        out[str(name)] = _quantity_text(got, binary=name == "memory")
    if "memory" not in out:  # a device publishing no memory capacity: what was planned
        out["memory"] = _mib_quantity(memory_used_mib)
    return out


def allocation(claim: Mapping[str, Any], ask: ClaimAsk, bind: Bind, node: NodeDevices,
               classes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """``status.allocation`` for ``claim`` placed as ``bind`` (None: a device the plan chose is
    not published — the plan and the slices disagree, so nothing is written)."""
    results: list[dict[str, Any]] = []
    if bind.mig:
        devs = [node.mig.get((s.gpu, s.profile, s.start)) for s in bind.mig]
    else:
        devs = [node.whole.get(g) for g in bind.gpus]
    if any(d is None for d in devs) or not devs:
        return None
    request = ask.request
    for d in devs:
        assert d is not None
        share = ask.share_memory_mib
        if ask.options:  # the subrequest of the chosen device's size, named as kube names it
            opt = next((o for o in ask.options if o.device_memory_mib == d.memory_mib), None)
            if opt is None or len(devs) != 1:
                return None
            request, share = f"{ask.request}/{opt.name}", opt.share_memory_mib
            others = opt.capacity
        else:
            others = ask.capacity
        res: dict[str, Any] = {"request": request, "driver": d.driver, "pool": d.pool,
                               "device": d.name}
        if share and not d.shareable:
            return None
        if d.shareable:  # as kube's allocator: every allocation of such a device is a share
            used = d.memory_mib
            if ask.options:  # what the subrequest asks (placement's milli covers it)
                used = min(d.memory_mib, share)
            elif share:  # the planned milli in memory, rounded down: n shares of milli
                # summing to 1000 then never sum above the device's memory (rounded up, three
                # 333s of 32 GiB took 32,769 MiB), and :func:`holdings` reads back that milli
                used = min(d.memory_mib, max(
                    share, bind.milli_per_gpu * d.memory_mib // GPU_MILLI))
            res["shareID"] = str(uuid.uuid4())
            res["consumedCapacity"] = consumed_capacity(d.raw or {}, used, others)
        results.append(res)
    config: list[dict[str, Any]] = []
    for cfg in ((classes.get(ask.class_name) or {}).get("spec") or {}).get("config") or ():
        if cfg.get("opaque"):
            config.append({"source": "FromClass", "requests": [request],
                           "opaque": cfg["opaque"]})
    for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or ():
        if cfg.get("opaque"):
            config.append({"source": "FromClaim", "requests": list(cfg.get("requests") or ()),
                           "opaque": cfg["opaque"]})
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    return {"devices": devices, "nodeSelector": node_selector(bind.node)}
