"""A differential test of gpufleet's DRA allocator against kube-scheduler 1.36's own, on a lab of
their own (kube-scheduler beside gpufleet's controller, run in-process).

Hypothesis draws claim shapes gpufleet supports (docs/kubernetes.md, "DRA allocation"), with a
fixed seed (``derandomize``): whole GPUs ``count`` 1..5 on ``gpu.nvidia.com`` with or without a
CEL selector from a small pool (``productName ==``, ``productName.lowerAscii().matches(…)``,
``minor``/``index`` comparisons that match all or some of a node's GPUs, a ``memory``
``compareTo``); a MIG profile on ``mig.nvidia.com`` (one the A100 lacks included) on a
p4d.24xlarge in dynamic MIG; a memory share of one shareable NVIDIA-shaped GPU; shares (memory
and ``cores``) and whole GPUs on ``share.gpu.gpufleet.io`` on the shared pool (gpufleet's node
plugin's devices); and asks nothing can meet (more GPUs than the node has, a share larger than a
GPU, a selector nothing matches).

Each case gets two fresh nodes of one instance type, each in a namespace and zone of its own —
optionally with GPU 0 held first by a claim kube-scheduler allocates (a whole GPU, a 3g.20gb, a
share of memory with or without ``cores``) — and one claim and one pod in each namespace: one
pod for kube-scheduler, its twin for gpufleet. All
cases run at once (every pod is pinned to its own node by zone), then each pod is bound or has a
``PodScheduled=False`` message. Then:

* where kube-scheduler bound its pod, gpufleet bound the twin;
* where gpufleet refused, kube-scheduler refused too (the same rule, seen from the other side);
* every allocation either scheduler wrote passes an independent check against the devices read
  from the node's ResourceSlices (node, count, distinct devices, driver, device type and MIG
  profile, the generated selector evaluated in Python on the device's attributes, shareID and
  ``consumedCapacity`` within capacity and at least what was asked), and the project's
  over-commit checker (:func:`gpufleet.k8s.dra.claim_devices.judge_claims`) finds nothing.

A table of cases, agreements and each disagreement class is printed; any disagreement fails the
test. ``GPUFLEET_DRA_DIFF_EXAMPLES`` (default 40, about a minute
on a loaded 2-core machine) is how many cases hypothesis draws besides :data:`ALWAYS`
(duplicates dropped); a bigger sweep: ``GPUFLEET_DRA_DIFF_EXAMPLES=200``.
``GPUFLEET_DRA_DIFF_VERBOSE=1`` prints every case with both outcomes, not only disagreements.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from dra_objects import G, Space, V, claim_body
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.utils.quantity import parse_quantity
from live_controller import running_controller
from live_wait import after_passes, wait_for
from overcommit import cluster_overcommits

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.dra.claim_devices import judge_claims
from gpufleet.k8s.dra.shares import SHARE_CLASS
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.translate.node_objects import spec_from_instance
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.dra import POOL_LABEL, SHARED_POOL
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live
IT = default_instance_catalog()
POLICY = Path(__file__).resolve().parents[2] / "deploy" / "dra" / "gpu-share-policy.yaml"
EXAMPLES = int(os.environ.get("GPUFLEET_DRA_DIFF_EXAMPLES", "40"))
VERBOSE = bool(os.environ.get("GPUFLEET_DRA_DIFF_VERBOSE"))
NVIDIA, GPUFLEET = "gpu.nvidia.com", "gpu.gpufleet.io"


# -- generated cases ---------------------------------------------------------------------------

def _attr(dev: dict[str, Any], name: str) -> Any:
    v = (dev.get("attributes") or {}).get(name) or {}
    return next(iter(v.values()), None)


def _cap(dev: dict[str, Any], name: str) -> Any:
    c = (dev.get("capacity") or {}).get(name)
    return parse_quantity(c["value"]) if c else None


@dataclass(frozen=True)
class Sel:
    """One selector of the pool: its CEL (on ``domain``) and the same test in Python."""

    kind: str  # product | regex | minor-lt | minor-eq | index-ge | memory-ge
    arg: str

    def cel(self, domain: str) -> str:
        a = f"device.attributes['{domain}']"
        return {
            "product": f"{a}.productName == '{self.arg}'",
            "regex": f"{a}.productName.lowerAscii().matches('^.*{self.arg}.*$')",
            "minor-lt": f"{a}.minor < {self.arg}",
            "minor-eq": f"{a}.minor == {self.arg}",
            "index-ge": f"{a}.index >= {self.arg}",
            "memory-ge": (f"device.capacity['{domain}'].memory.compareTo("
                          f"quantity('{self.arg}')) >= 0"),
        }[self.kind]

    def holds(self, dev: dict[str, Any]) -> bool:
        tests: dict[str, Callable[[], bool]] = {
            "product": lambda: _attr(dev, "productName") == self.arg,
            "regex": lambda: self.arg in str(_attr(dev, "productName")).lower(),
            "minor-lt": lambda: int(_attr(dev, "minor")) < int(self.arg),
            "minor-eq": lambda: int(_attr(dev, "minor")) == int(self.arg),
            "index-ge": lambda: int(_attr(dev, "index")) >= int(self.arg),
            "memory-ge": lambda: _cap(dev, "memory") >= parse_quantity(self.arg),
        }
        return tests[self.kind]()


SELECTORS = st.one_of(
    st.none(),
    st.builds(Sel, st.just("product"),
              st.sampled_from(["Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB",
                               "NVIDIA H100 80GB HBM3"])),
    st.builds(Sel, st.just("regex"), st.sampled_from(["t4", "v100", "a100", "h200"])),
    st.builds(Sel, st.just("minor-lt"), st.sampled_from(["1", "2", "8"])),
    st.builds(Sel, st.just("index-ge"), st.sampled_from(["0", "3"])),
    st.builds(Sel, st.just("memory-ge"), st.sampled_from(["16Gi", "32Gi"])),
)


@dataclass(frozen=True)
class Case:
    kind: str  # whole | mig | nvshare | gfshare
    itype: str
    cls: str
    count: int = 1
    sel: Sel | None = None
    profile: str | None = None  # MIG
    memory: str | None = None  # a share's capacity request
    cores: str | None = None
    # a claim kube-scheduler allocates on the node (GPU 0) before the case's pod is created
    holder: Case | None = None

    @property
    def mig_config(self) -> str | None:
        return "all-enabled" if self.itype == "p4d.24xlarge" else None

    @property
    def driver(self) -> str:
        return GPUFLEET if self.cls == SHARE_CLASS else NVIDIA

    def claim(self, name: str = "c") -> dict[str, Any]:
        cels = []
        if self.profile is not None:
            cels.append(f"device.attributes['{NVIDIA}'].profile == '{self.profile}'")
        if self.sel is not None:
            cels.append(self.sel.cel(self.driver))
        body = claim_body(name, self.cls, self.count, None, None)
        ex = body["spec"]["devices"]["requests"][0]["exactly"]
        if cels:
            ex["selectors"] = [{"cel": {"expression": c}} for c in cels]
        req = {k: v for k, v in (("memory", self.memory), ("cores", self.cores)) if v}
        if req:
            ex["capacity"] = {"requests": req}
        return body

    def candidate(self, dev: dict[str, Any], driver: str) -> bool:
        """Whether ``dev`` is one the class (and MIG profile) admits, selector aside."""
        if driver != self.driver:
            return False
        if self.cls == SHARE_CLASS:
            return True
        want = "mig" if self.cls == "mig.nvidia.com" else "gpu"
        return _attr(dev, "type") == want and (
            self.profile is None or _attr(dev, "profile") == self.profile)

    def admits(self, dev: dict[str, Any], driver: str) -> bool:
        return self.candidate(dev, driver) and (self.sel is None or self.sel.holds(dev))


KINDS = ("whole", "nvshare", "mig", "gfshare")


GPU0 = Sel("minor-eq", "0")
HOLDERS = {
    "whole": [None, Case("whole", "", NVIDIA, 1, GPU0)],
    "nvshare": [None, Case("whole", "", NVIDIA, 1, GPU0)],
    "mig": [None, Case("mig", "", "mig.nvidia.com", 1, GPU0, profile="3g.20gb")],
    "gfshare": [None, Case("gfshare", "", SHARE_CLASS, 1, GPU0, memory="4Gi"),
                Case("gfshare", "", SHARE_CLASS, 1, GPU0, memory="4Gi", cores="50")],
}


@st.composite
def cases(draw: st.DrawFn, kind: str) -> Case:
    """One case of ``kind``, with what holds GPU 0 of its node beforehand (or nothing)."""
    return replace(draw(_asks(kind)), holder=draw(st.sampled_from(HOLDERS[kind])))


@st.composite
def _asks(draw: st.DrawFn, kind: str) -> Case:
    if kind == "whole":
        itype = draw(st.sampled_from(["g4dn.12xlarge", "g4dn.xlarge", "p3.8xlarge",
                                      "p4d.24xlarge"]))
        return Case(kind, itype, NVIDIA, draw(st.integers(1, 5)), draw(SELECTORS))
    if kind == "nvshare":
        itype = draw(st.sampled_from(["g4dn.xlarge", "g4dn.12xlarge", "p3.8xlarge"]))
        return Case(kind, itype, NVIDIA, 1, draw(SELECTORS),
                    memory=draw(st.sampled_from(["4Gi", "8Gi", "16Gi", "17Gi"])))
    if kind == "mig":
        extra = draw(st.sampled_from([None, Sel("minor-lt", "4"), Sel("regex", "a100")]))
        return Case(kind, "p4d.24xlarge", "mig.nvidia.com", 1, extra,
                    profile=draw(st.sampled_from(["3g.20gb", "1g.5gb", "7g.40gb", "5g.50gb"])))
    itype = draw(st.sampled_from(["g4dn.12xlarge", "g4dn.xlarge"]))
    if draw(st.booleans()):  # whole GPUs of the pool
        return Case(kind, itype, SHARE_CLASS, draw(st.integers(1, 5)), draw(SELECTORS))
    return Case(kind, itype, SHARE_CLASS, 1, draw(SELECTORS),
                memory=draw(st.sampled_from(["512Mi", "4Gi", "16Gi", "17Gi"])),
                cores=draw(st.sampled_from([None, "25", "100", "101"])))


# cases always run besides the drawn ones: shares of the node plugin's devices whose ``cores``
# (percent of the SMs, 100 in all; a share that asks none takes the policy's default, all 100)
# do not fit beside what holds the GPU, or at all — both schedulers refuse them
ALWAYS = [
    Case("gfshare", "g4dn.xlarge", SHARE_CLASS, 1, memory="4Gi",
         holder=HOLDERS["gfshare"][1]),
    Case("gfshare", "g4dn.xlarge", SHARE_CLASS, 1, memory="4Gi", cores="60",
         holder=HOLDERS["gfshare"][2]),
    Case("gfshare", "g4dn.xlarge", SHARE_CLASS, 1, memory="4Gi", cores="101"),
    # a whole GPU of a node in dynamic MIG (each GPU published whole beside its MIG devices)
    Case("whole", "p4d.24xlarge", NVIDIA, 1),
]


def drawn_cases(n: int) -> list[Case]:
    """:data:`ALWAYS`, then about ``n`` cases from hypothesis with a fixed seed, a quarter of
    each kind (so a small ``n`` still covers every kind), duplicates dropped, in draw order."""
    got: list[Case] = list(ALWAYS)
    for kind in KINDS:
        @settings(derandomize=True, max_examples=max(1, -(-n // len(KINDS))), deadline=None,
                  database=None, phases=[Phase.generate])
        @given(cases(kind))
        def collect(c: Case) -> None:
            if c not in got:
                got.append(c)

        collect()
    return got


# -- the lab -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kube_lab(lab_binaries: Path) -> Iterator[LabSession]:
    with tempfile.TemporaryDirectory(prefix="gpufleet-dra-diff-") as tmp:
        info = up(LabOptions(directory=Path(tmp), nodes=[], controller=False,
                             kube_scheduler=True, device_plugin=True))
        try:
            session = LabSession(info)
            share_class = next(d for d in yaml.safe_load_all(POLICY.read_text())
                               if d["kind"] == "DeviceClass")
            client.CustomObjectsApi(session.api).create_cluster_custom_object(
                G, V, "deviceclasses", share_class)
            yield session
        finally:
            down(Path(tmp))


@pytest.fixture(scope="module")
def gpufleet(kube_lab: LabSession) -> Iterator[Controller]:
    with running_controller(kube_lab.api) as ctl:
        yield ctl


@dataclass
class Twin:
    case: Case
    space: Space
    scheduler: str

    @property
    def node(self) -> str:
        return self.space.nodes[0]


def _add_nodes(lab: LabSession, twins: list[Twin]) -> None:
    specs = []
    for t in twins:
        name = f"{t.space.name}-0"
        sp = spec_from_instance(IT[t.case.itype], name, zone=t.space.name,
                                mig_config=t.case.mig_config)
        if t.case.cls == SHARE_CLASS:
            sp = replace(sp, extra_labels={**sp.extra_labels, POOL_LABEL: SHARED_POOL})
        specs.append(sp)
        t.space.nodes.append(name)
    lab.add_nodes(specs)


def _outcomes(lab: LabSession) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(namespace, pod) → (node it is bound to, its PodScheduled=False message)."""
    pods = json.loads(lab.core.list_pod_for_all_namespaces(_preload_content=False).data)
    out = {}
    for p in pods["items"]:
        msg = next((str(c.get("message")) for c in p["status"].get("conditions") or ()
                    if c["type"] == "PodScheduled" and c["status"] == "False"), None)
        out[(p["metadata"]["namespace"], p["metadata"]["name"])] = (
            p["spec"].get("nodeName"), msg)
    return out


# -- the independent check ---------------------------------------------------------------------

def check_allocation(case: Case, node: str, pod_node: str, claim: dict[str, Any],
                     devices: dict[tuple[str, str, str], dict[str, Any]]) -> list[str]:
    """What is wrong with ``claim``'s allocation for ``case`` on ``node``, read against the
    published ``devices`` ((driver, pool, device) → the slice's device)."""
    bad: list[str] = []
    alloc = (claim.get("status") or {}).get("allocation")
    if not alloc:
        return ["the pod is bound but its claim is not allocated"]
    if pod_node != node:
        bad.append(f"bound to {pod_node}, not its zone's node {node}")
    terms = (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    if terms != [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                   "values": [node]}]}]:
        bad.append(f"allocation nodeSelector {terms}")
    res = alloc["devices"]["results"]
    if len(res) != case.count:
        bad.append(f"{len(res)} devices for count {case.count}")
    if len({r["device"] for r in res}) != len(res):
        bad.append(f"a device twice: {[r['device'] for r in res]}")
    for r in res:
        where = f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
        dev = devices.get((r.get("driver"), r.get("pool"), r.get("device")))
        if r.get("request") != "gpu":
            bad.append(f"{where}: request {r.get('request')!r}")
        if r.get("pool") != node or dev is None:
            bad.append(f"{where}: not a device of {node}'s slices")
            continue
        if not case.admits(dev, r["driver"]):
            bad.append(f"{where}: the class, profile or selector does not admit it")
        shared = bool(dev.get("allowMultipleAllocations"))
        if shared != bool(r.get("shareID")):
            bad.append(f"{where}: shareID {r.get('shareID')!r} on a device "
                       f"{'' if shared else 'not '}published shareable")
        consumed = r.get("consumedCapacity") or {}
        if shared:
            for name in dev.get("capacity") or {}:
                got = parse_quantity(consumed[name]) if name in consumed else None
                cap = _cap(dev, name)
                asked = {"memory": case.memory, "cores": case.cores}.get(name)
                if got is None or got > cap:
                    bad.append(f"{where}: consumed {name} {consumed.get(name)} of {cap}")
                elif asked is not None and got < parse_quantity(asked):
                    bad.append(f"{where}: consumed {name} {got} < asked {asked}")
                elif asked is None and case.memory is None and got != cap:
                    bad.append(f"{where}: a whole device consumed {name} {got} of {cap}")
    return bad


# -- the test ----------------------------------------------------------------------------------

def test_gpufleet_allocates_what_kube_scheduler_allocates(
        kube_lab: LabSession, gpufleet: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    drawn = drawn_cases(EXAMPLES)
    assert len(drawn) >= min(EXAMPLES, 4), drawn
    twins = [Twin(c, Space(kube_lab), s) for c in drawn
             for s in ("default-scheduler", "gpufleet")]
    custom = client.CustomObjectsApi(kube_lab.api)
    try:
        _add_nodes(kube_lab, twins)
        held = [t for t in twins if t.case.holder is not None]
        for t in held:
            assert t.case.holder is not None
            custom.create_namespaced_custom_object(G, V, t.space.name, "resourceclaims",
                                                   t.case.holder.claim("h"))
            t.space.pod("h", claim="h", scheduler="default-scheduler")
        wait_for("kube-scheduler to place every holder",
                 lambda: all(t.space.bound("h") for t in held), timeout=120, poll_s=1.0)
        for t in twins:
            custom.create_namespaced_custom_object(G, V, t.space.name, "resourceclaims",
                                                   t.case.claim())
        for t in twins:
            t.space.pod("p", claim="c", scheduler=t.scheduler)

        def settled() -> dict[tuple[str, str], tuple[str | None, str | None]] | None:
            got = _outcomes(kube_lab)
            seen = [got.get((t.space.name, "p"), (None, None)) for t in twins]
            return got if all(node or msg for node, msg in seen) else None

        wait_for("every pod bound or refused", settled, timeout=180, poll_s=1.0)
        # a refusal made before a scheduler's informers saw the node is retried: take the
        # outcomes once they hold across more of gpufleet's passes
        def stable() -> dict[tuple[str, str], tuple[str | None, str | None]] | None:
            before = {k: v[0] for k, v in (settled() or {}).items()}
            after_passes(gpufleet, 3, timeout=60)
            now = settled()
            return now if now and {k: v[0] for k, v in now.items()} == before else None

        outcome = wait_for("the outcomes to hold", stable, timeout=120, poll_s=0.5)
        claims = custom.list_cluster_custom_object(G, V, "resourceclaims")["items"]
        slices = custom.list_cluster_custom_object(G, V, "resourceslices")["items"]
        devices = {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
                   for s in slices for d in s["spec"].get("devices") or ()}
        by_ns = {c["metadata"]["namespace"]: c for c in claims if c["metadata"]["name"] == "c"}

        table: Counter[str] = Counter()
        problems: list[str] = []
        rows: list[str] = []
        for i in range(0, len(twins), 2):
            kt, gt = twins[i], twins[i + 1]
            case = kt.case
            (kn, kmsg), (gn, gmsg) = (outcome[(t.space.name, "p")] for t in (kt, gt))
            for t, bound in ((kt, kn), (gt, gn)):
                if bound:
                    for b in check_allocation(case, t.node, bound, by_ns[t.space.name],
                                              devices):
                        problems.append(f"{case} [{t.scheduler}]: {b}")
            if kn and gn:
                cls = "agree: both bound"
            elif not kn and not gn:
                cls = "agree: both refused"
            elif kn:
                cls = "DISAGREE: kube-scheduler bound, gpufleet refused"
            else:
                cls = "DISAGREE: gpufleet bound, kube-scheduler refused"
            table[cls] += 1
            if VERBOSE or not cls.startswith("agree"):
                rows.append(f"  {cls}\n    case: {case}\n    kube-scheduler: "
                            f"{kn or kmsg}\n    gpufleet: {gn or gmsg}")
        judged = judge_claims(claims, slices)
        problems += [f"judge_claims: {f}" for f in judged.findings]
        problems += [f"over-commit: {f}" for f in cluster_overcommits(kube_lab.core)]
        lines = [f"DRA differential: {len(drawn)} cases "
                 f"(GPUFLEET_DRA_DIFF_EXAMPLES={EXAMPLES})"]
        lines += [f"  {n:4d}  {k}" for k, n in sorted(table.items())]
        report = "\n".join(lines + rows)
        with capsys.disabled():
            print("\n" + report)
        assert not problems, "allocations that fail the check:\n" + "\n".join(problems)
        assert not any(k.startswith("DISAGREE") for k in table), report
        assert sum(table.values()) == len(drawn)
    finally:
        core = kube_lab.core
        for t in twins:
            core.delete_collection_namespaced_pod(t.space.name, grace_period_seconds=0)
        wait_for("the cases' pods to go",
                 lambda: not json.loads(core.list_pod_for_all_namespaces(
                     _preload_content=False).data)["items"], 120)
        for t in twins:
            for n in t.space.nodes:
                core.delete_node(n)
            core.delete_namespace(t.space.name)
