"""Prepare and unprepare claims: allocation → MPS limits → CDI spec, remembered in a checkpoint.

The kubelet calls NodePrepareResources with a claim's namespace, name and UID; the claim's
``status.allocation`` says which of this driver's devices on this node it got and, for a share of
a multi-allocatable device, how much of each capacity it consumes (``consumedCapacity``). A share
runs under MPS limits of exactly that: ``memory`` (MiB) and ``cores`` (percent of the SMs); a
result without ``consumedCapacity`` takes the whole GPU.

The scheduler never allocates more of a device's capacity than the slice publishes, but the node
checks again before it hands limits out: a claim whose shares would take a GPU's prepared claims
past its memory or past 100 % of its cores is refused, with an error the kubelet puts in the
pod's events (the pod stays ContainerCreating and the kubelet retries).

Both calls are idempotent, as kubelet retries need: preparing a prepared claim returns what the
first call returned (and writes its CDI spec again), unpreparing an unknown claim succeeds. The
checkpoint (one JSON file, replaced atomically) lists every prepared claim with its shares, so a
restarted plugin still counts them against their GPUs and unprepares them when asked.

With an :class:`~gpufleet.node_plugin.mps.MpsManager`, a *share* (a result that leaves part of
its GPU's memory or cores to others) runs under its GPU's MPS control daemon: the daemon is
started (or adopted) before the claim's CDI spec is written, the spec mounts its pipe directory,
and it is told to quit when the GPU's last share is unprepared. A claim whose results take a
whole GPU never uses MPS. An MPS client connects to one server, so a claim with shares of two
GPUs is refused. Checkpoint entries written without MPS (no ``mpsPipeDir``) stay valid: they
ran without a daemon and still do.

With a :class:`~gpufleet.node_plugin.hami.HamiCore` instead (never both), a share runs under
HAMi-core (:mod:`.hami`): its claim's cache directory is made before the CDI spec is written and
removed when the claim is unprepared; no daemon runs, so a claim may share several GPUs. A claim
of whole GPUs gets no limits at all. The per-GPU sum check is the same in every mode. A claim
keeps the way it was prepared (recorded per share in the checkpoint) until it is unprepared, even
across a restart with other flags.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.node_plugin import DRIVER, atomic_file, cdi, hami
from gpufleet.node_plugin.cdi import Share
from gpufleet.node_plugin.hami import HamiCore, HamiError
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.mps import MpsError, MpsManager
from gpufleet.node_plugin.slices import CORES

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
MIB = 2**20


class PrepareError(RuntimeError):
    """A claim that cannot be prepared; the message is what the kubelet shows."""


def _quantity(text: str, what: str) -> float:
    from kubernetes.utils.quantity import parse_quantity

    try:
        return float(parse_quantity(text))
    except ValueError:
        raise PrepareError(f"{what}: {text!r} is not a quantity") from None


def share_limits(result: dict[str, Any], gpu: Gpu) -> tuple[int, int]:
    """(memory MiB, cores %) a result's ``consumedCapacity`` gives it; the whole GPU for what it
    does not name. The slice publishes the GPU's nominal memory (``published_memory_mib``), so
    the consumed memory is scaled to the real total: shares that sum to at most the published
    size get limits that sum to at most the real one (a 20Gi share of an H100 80GB whose NVML
    total is 81,559 MiB gets 20,389 MiB). Memory rounds down to whole MiB (the MPS limit's unit:
    never above what was allocated), cores up to a whole percent (the slice's step is 1)."""
    consumed = result.get("consumedCapacity") or {}
    memory = gpu.memory_mib
    cores = CORES
    if "memory" in consumed:
        asked = _quantity(str(consumed["memory"]), "consumedCapacity.memory") / MIB
        memory = min(gpu.memory_mib,
                     math.floor(asked * gpu.memory_mib / gpu.published_memory_mib))
    if "cores" in consumed:
        cores = math.ceil(_quantity(str(consumed["cores"]), "consumedCapacity.cores"))
    if memory <= 0 or cores <= 0:
        raise PrepareError(f"device {result.get('device')}: consumedCapacity {consumed} leaves "
                           "no memory or no cores")
    return memory, cores


def overcommit(gpu: Gpu, prepared: list[Share], asked: list[Share]) -> str | None:
    """Why ``asked`` (shares of one claim) cannot join ``prepared`` (other claims' shares) on
    ``gpu``, or None when memory and cores both fit."""
    mine = [s for s in asked if s.uuid == gpu.uuid]
    if not mine:
        return None
    others = [s for s in prepared if s.uuid == gpu.uuid]
    for what, unit, total, used, want in (
        ("memory", "MiB", gpu.memory_mib, sum(s.memory_mib for s in others),
         sum(s.memory_mib for s in mine)),
        ("cores", "%", CORES, sum(s.cores for s in others), sum(s.cores for s in mine)),
    ):
        if used + want > total:
            return (f"{gpu.device_name} ({gpu.uuid}) would be overcommitted: {what} "
                    f"{used} {unit} prepared for {len({s.share_id for s in others})} other "
                    f"share(s) + {want} {unit} asked > {total} {unit}")
    return None


def allocated_results(claim: dict[str, Any], uid: str, node: str) -> list[dict[str, Any]]:
    """The claim's allocation results for this driver on ``node`` (pool = node name)."""
    meta = claim.get("metadata", {})
    ref = f"{meta.get('namespace')}/{meta.get('name')}"
    if meta.get("uid") != uid:
        raise PrepareError(f"claim {ref} has UID {meta.get('uid')}, the kubelet asked for {uid} "
                           "(deleted and created again?)")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PrepareError(f"claim {ref} is not allocated")
    results = [r for r in (allocation.get("devices") or {}).get("results") or ()
               if r.get("driver") == DRIVER and r.get("pool") == node]
    if not results:
        raise PrepareError(f"claim {ref} has no {DRIVER} device on node {node}")
    return results


@dataclass
class Prepared:
    namespace: str
    name: str
    shares: list[Share]

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name,
                "shares": [s.to_json() for s in self.shares]}


@dataclass
class Preparer:
    """The node's prepared claims, kept in ``checkpoint`` and mirrored by CDI specs in
    ``cdi_dir``. Thread-safe: the gRPC server calls it from its worker threads."""

    node: str
    gpus: list[Gpu]
    cdi_dir: Path
    checkpoint: Path
    dev_root: Path = Path("/dev")
    mps: MpsManager | None = None
    hami: HamiCore | None = None
    claims: dict[str, Prepared] = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.mps is not None and self.hami is not None:
            raise ValueError("a share runs under MPS or under HAMi-core, not both")
        self.claims = self._read_checkpoint()

    def _read_checkpoint(self) -> dict[str, Prepared]:
        try:
            data = json.loads(self.checkpoint.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise PrepareError(f"{self.checkpoint}: unreadable checkpoint ({exc})") from None
        if data.get("version") != CHECKPOINT_VERSION:
            raise PrepareError(f"{self.checkpoint}: checkpoint version {data.get('version')}, "
                               f"this plugin reads {CHECKPOINT_VERSION}")
        try:
            return {uid: Prepared(c["namespace"], c["name"],
                                  [Share.from_json(s) for s in c["shares"]])
                    for uid, c in data["claims"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise PrepareError(f"{self.checkpoint}: malformed checkpoint ({exc!r})") from None

    def _write_checkpoint(self) -> None:
        body = {"version": CHECKPOINT_VERSION, "node": self.node,
                "claims": {uid: c.to_json() for uid, c in sorted(self.claims.items())}}
        atomic_file.write(self.checkpoint, (json.dumps(body, indent=2) + "\n").encode())

    def _shares(self, ref: str, results: list[dict[str, Any]]) -> list[Share]:
        by_name = {g.device_name: g for g in self.gpus}
        shares = []
        for r in results:
            gpu = by_name.get(str(r.get("device")))
            if gpu is None:
                raise PrepareError(f"claim {ref}: device {r.get('device')} is not a GPU of node "
                                   f"{self.node} (it has {', '.join(by_name) or 'none'})")
            memory, cores = share_limits(r, gpu)
            partial = memory < gpu.memory_mib or cores < CORES
            pipe = str(self.mps.pipe_dir(gpu.uuid)) if self.mps and partial else None
            share = Share(request=str(r.get("request", "")), pool=self.node,
                          device=gpu.device_name, share_id=r.get("shareID"), uuid=gpu.uuid,
                          minor=gpu.minor, memory_mib=memory, cores=cores, mps_pipe_dir=pipe)
            if self.hami is not None:
                share = replace(share, limits=cdi.NO_LIMITS)
                if partial:
                    share = replace(share, limits=cdi.HAMI_CORE,
                                    hami_core=str(self.hami.library), hami_dir=str(self.hami.root))
            shares.append(share)
        if len(cdi.pipe_dirs(shares)) > 1:
            raise PrepareError(f"claim {ref}: shares of {len(cdi.pipe_dirs(shares))} GPUs; an "
                               "MPS client uses one GPU's MPS server, so a claim may share one "
                               "GPU (or take whole GPUs)")
        return shares

    def _mps_uuids(self, shares: list[Share]) -> set[str]:
        return {s.uuid for s in shares if s.mps_pipe_dir}

    def _start_mps(self, ref: str, shares: list[Share]) -> None:
        if self.mps is None:
            return
        for uuid in sorted(self._mps_uuids(shares)):
            try:
                self.mps.ensure(uuid)
            except MpsError as exc:
                raise PrepareError(f"claim {ref}: {exc}") from None

    def reconcile_mps(self) -> list[str]:
        """At start: adopt (or start again) the daemon of every GPU with a checkpointed share
        under MPS, tell the live daemons of GPUs without one to quit; the daemons quit and the
        failures, for the log (:mod:`.mps` logs each start and adoption). A daemon that will
        not start is retried by the claim's next prepare."""
        if self.mps is None:
            return []
        done = []
        with self._lock:
            wanted = self._mps_uuids([s for c in self.claims.values() for s in c.shares])
            for uuid in sorted(wanted):
                try:
                    self.mps.ensure(uuid)
                except MpsError as exc:
                    done.append(str(exc))
            for uuid in self.mps.live():
                if uuid not in wanted:
                    try:
                        self.mps.quit(uuid)
                        done.append(f"{uuid}: no share left, quit")
                    except MpsError as exc:
                        done.append(str(exc))
        return done

    def prepare(self, uid: str, namespace: str, name: str,
                results: list[dict[str, Any]]) -> tuple[list[Share], list[str]]:
        """Prepare the claim (idempotent): its shares and their CDI device IDs."""
        ref = f"{namespace}/{name}"
        with self._lock:
            done = self.claims.get(uid)
            if done is None:
                shares = self._shares(ref, results)
                prepared = [s for other, c in self.claims.items() if other != uid
                            for s in c.shares]
                for gpu in self.gpus:
                    why = overcommit(gpu, prepared, shares)
                    if why is not None:
                        raise PrepareError(f"claim {ref}: {why}")
                done = Prepared(namespace, name, shares)
            self._start_mps(ref, done.shares)
            for root in dict.fromkeys(str(s.hami_dir) for s in cdi.hami_shares(done.shares)):
                try:
                    hami.ensure(root, uid)
                except HamiError as exc:
                    raise PrepareError(f"claim {ref}: {exc}") from None
            shm = str(self.mps.shm_dir) if self.mps is not None else None
            cdi.write_spec(self.cdi_dir, uid, cdi.spec(uid, done.shares, self.dev_root, shm))
            if uid not in self.claims:
                self.claims[uid] = done
                self._write_checkpoint()
            return done.shares, cdi.device_ids(uid, done.shares)

    def unprepare(self, uid: str) -> bool:
        """Undo :meth:`prepare` (idempotent); whether the claim was prepared. The MPS daemon of
        a GPU whose last share this was is told to quit (a daemon that will not is logged: the
        claim is unprepared all the same, and the next share adopts it)."""
        with self._lock:
            cdi.remove_spec(self.cdi_dir, uid)
            gone = self.claims.pop(uid, None)
            if gone is None:
                return False
            self._write_checkpoint()
            for root in dict.fromkeys(str(s.hami_dir) for s in cdi.hami_shares(gone.shares)):
                try:
                    hami.remove(root, uid)
                except OSError as exc:
                    log.warning("unprepared claim %s/%s: removing %s: %s", gone.namespace,
                                gone.name, hami.claim_dir(root, uid), exc)
            if self.mps is not None:
                still = self._mps_uuids([s for c in self.claims.values() for s in c.shares])
                for uuid in sorted(self._mps_uuids(gone.shares) - still):
                    try:
                        self.mps.quit(uuid)
                    except MpsError as exc:
                        log.warning("unprepared claim %s/%s: %s", gone.namespace, gone.name, exc)
            return True

    def set_gpus(self, gpus: list[Gpu]) -> None:
        """The GPUs claims may be prepared on from now (the inventory read again)."""
        with self._lock:
            self.gpus = list(gpus)
