"""The CDI spec of a prepared claim: what the container runtime adds to each container using it.

One file per claim, ``<cdi-dir>/gpu.gpufleet.io-<claimUID>.json`` (CDI 0.6.0, kind
``gpu.gpufleet.io/claim``), one CDI device per allocated share. Every device of a claim carries
the claim's whole environment, so the container sees the same values whichever device's edits the
runtime applies last:

- ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES``: the claim's GPUs by UUID;
- ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: ``<uuid>=<MiB>M`` per GPU, comma-separated: the MPS
  server refuses the client's allocations past it;
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: the share of the SMs the client's kernels may use; MPS
  takes one value per client process, so a claim on several GPUs gets the smallest;
- ``CUDA_MPS_PIPE_DIRECTORY``, for a share run under the plugin's MPS control daemon of its GPU
  (:mod:`.mps`): the daemon's pipe directory, bind-mounted into the container at the same path,
  where the client finds its server; and the daemons' ``/dev/shm`` (a host directory) as the
  container's ``/dev/shm``, where client and server exchange memory.

A claim with a share prepared under HAMi-core (``--hami-core``) gets HAMi-core's preload, limits
and mounts instead of the ``CUDA_MPS_*`` variables (:mod:`.hami`); a claim of whole GPUs prepared
in that mode gets the visible devices only.

``/dev/nvidia<minor>`` is a device node of the share's device only where it exists (not in the
lab).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.node_plugin import DRIVER, atomic_file, hami

CDI_VERSION = "0.6.0"
KIND = f"{DRIVER}/claim"
# how a share's limits are enforced: MPS client env (what a checkpoint entry without ``limits``
# means), HAMi-core, or none (a whole GPU prepared under HAMi-core)
MPS, HAMI_CORE, NO_LIMITS = "mps", "hami-core", "none"


@dataclass(frozen=True)
class Share:
    """One allocation result of a claim, prepared: the device and the limits it runs under."""

    request: str
    pool: str
    device: str
    share_id: str | None
    uuid: str
    minor: int
    memory_mib: int
    cores: int
    mps_pipe_dir: str | None = None  # the GPU's MPS daemon's, for a share run under it
    limits: str = MPS
    hami_core: str | None = None  # HAMi-core: the library's host path
    hami_dir: str | None = None  # HAMi-core: the plugin's directory (claims/, vgpulock/)

    def to_json(self) -> dict[str, Any]:
        out = {"request": self.request, "pool": self.pool, "device": self.device,
               "shareID": self.share_id, "uuid": self.uuid, "minor": self.minor,
               "memoryMiB": self.memory_mib, "cores": self.cores}
        if self.mps_pipe_dir is not None:
            out["mpsPipeDir"] = self.mps_pipe_dir
        if self.limits != MPS:
            out["limits"] = self.limits
        if self.hami_core is not None:
            out["hamiCore"] = self.hami_core
        if self.hami_dir is not None:
            out["hamiDir"] = self.hami_dir
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Share:
        """A checkpointed share; one written before MPS daemons (no ``mpsPipeDir``) ran
        without one, one written before HAMi-core (no ``limits``) under MPS env."""
        pipe, lib, root = d.get("mpsPipeDir"), d.get("hamiCore"), d.get("hamiDir")
        limits = str(d.get("limits", MPS))
        if limits not in (MPS, HAMI_CORE, NO_LIMITS):
            raise ValueError(f"limits {limits!r}")
        if limits == HAMI_CORE and (lib is None or root is None):
            raise ValueError("limits hami-core without hamiCore and hamiDir")
        return cls(request=d["request"], pool=d["pool"], device=d["device"],
                   share_id=d.get("shareID"), uuid=d["uuid"], minor=int(d["minor"]),
                   memory_mib=int(d["memoryMiB"]), cores=int(d["cores"]),
                   mps_pipe_dir=None if pipe is None else str(pipe), limits=limits,
                   hami_core=None if lib is None else str(lib),
                   hami_dir=None if root is None else str(root))


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{DRIVER}-{claim_uid}.json"


def device_names(claim_uid: str, shares: Sequence[Share]) -> list[str]:
    """``<claimUID>-<device>``, with ``-<n>`` from the second share of one device on."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for s in shares:
        n = seen.get(s.device, 0)
        seen[s.device] = n + 1
        names.append(f"{claim_uid}-{s.device}" + (f"-{n}" if n else ""))
    return names


def device_ids(claim_uid: str, shares: Sequence[Share]) -> list[str]:
    """The fully qualified CDI device IDs the kubelet hands the runtime, one per share."""
    return [f"{KIND}={n}" for n in device_names(claim_uid, shares)]


def env(shares: Sequence[Share]) -> list[str]:
    """The claim's environment (see the module docstring), GPUs in the shares' order."""
    uuids = list(dict.fromkeys(s.uuid for s in shares))
    memory: dict[str, int] = {}
    for s in shares:
        memory[s.uuid] = memory.get(s.uuid, 0) + s.memory_mib
    visible = ",".join(uuids)
    out = [f"NVIDIA_VISIBLE_DEVICES={visible}", f"CUDA_VISIBLE_DEVICES={visible}"]
    if hami_shares(shares):
        # per GPU: its CUDA index in the container is its place in CUDA_VISIBLE_DEVICES
        cores: dict[str, int] = {}
        for s in shares:
            cores[s.uuid] = cores.get(s.uuid, 0) + s.cores
        return [*out, f"LD_PRELOAD={hami.LIBRARY}",
                *(f"CUDA_DEVICE_MEMORY_LIMIT_{i}={memory[u]}m" for i, u in enumerate(uuids)),
                *(f"CUDA_DEVICE_SM_LIMIT_{i}={min(cores[u], 100)}" for i, u in enumerate(uuids)),
                f"CUDA_DEVICE_MEMORY_SHARED_CACHE={hami.CACHE_FILE}"]
    if all(s.limits == NO_LIMITS for s in shares):
        return out
    out += [
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + ",".join(f"{u}={memory[u]}M" for u in uuids),
        f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={min(min(s.cores for s in shares), 100)}",
    ]
    pipes = pipe_dirs(shares)
    if pipes:
        out.append(f"CUDA_MPS_PIPE_DIRECTORY={pipes[0]}")
    return out


def hami_shares(shares: Sequence[Share]) -> list[Share]:
    """The claim's shares limited by HAMi-core."""
    return [s for s in shares if s.limits == HAMI_CORE]


def hami_mounts(claim_uid: str, shares: Sequence[Share]) -> list[dict[str, Any]]:
    """HAMi-core's mounts for the claim (none without a HAMi-core share): the library
    read-only, the claim's cache directory and the node's lock directory read-write."""
    mine = hami_shares(shares)
    if not mine:
        return []
    lib, root = str(mine[0].hami_core), str(mine[0].hami_dir)
    rw = ["rw", "nosuid", "nodev", "bind"]
    return [{"hostPath": lib, "containerPath": hami.LIBRARY,
             "options": ["ro", "nosuid", "nodev", "bind"]},
            {"hostPath": str(hami.claim_dir(root, claim_uid)), "containerPath": hami.CACHE_DIR,
             "options": rw},
            {"hostPath": str(hami.lock_dir(root)), "containerPath": hami.LOCK_DIR,
             "options": rw}]


def pipe_dirs(shares: Sequence[Share]) -> list[str]:
    """The MPS pipe directories the claim's shares run under (at most one: the preparer
    refuses a claim whose shares would need two daemons)."""
    return list(dict.fromkeys(s.mps_pipe_dir for s in shares if s.mps_pipe_dir))


def spec(claim_uid: str, shares: Sequence[Share], dev_root: Path = Path("/dev"),
         mps_shm: str | None = None) -> dict[str, Any]:
    """The claim's CDI spec; ``mps_shm``: the host directory that is the MPS daemons'
    ``/dev/shm``, mounted as the container's ``/dev/shm`` when its shares run under a daemon."""
    claim_env = env(shares)
    devices = []
    for name, s in zip(device_names(claim_uid, shares), shares, strict=True):
        edits: dict[str, Any] = {"env": list(claim_env)}
        node = dev_root / f"nvidia{s.minor}"
        if node.exists():
            edits["deviceNodes"] = [{"path": str(node)}]
        pipes = pipe_dirs(shares)
        if pipes:
            edits["mounts"] = [{"hostPath": p, "containerPath": p,
                                "options": ["rw", "nosuid", "nodev", "bind"]} for p in pipes]
            if mps_shm is not None:
                edits["mounts"].append({"hostPath": mps_shm, "containerPath": "/dev/shm",
                                        "options": ["rw", "nosuid", "nodev", "bind"]})
        mounts = hami_mounts(claim_uid, shares)
        if mounts:
            edits["mounts"] = mounts
        devices.append({"name": name, "containerEdits": edits})
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": devices}


def write_spec(cdi_dir: Path, claim_uid: str, body: dict[str, Any]) -> Path:
    path = spec_path(cdi_dir, claim_uid)
    atomic_file.write(path, (json.dumps(body, indent=2) + "\n").encode())
    return path


def remove_spec(cdi_dir: Path, claim_uid: str) -> bool:
    return atomic_file.remove(spec_path(cdi_dir, claim_uid))
