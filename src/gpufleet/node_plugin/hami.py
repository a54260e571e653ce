"""HAMi-core limits: a share's memory and SM limits enforced inside its container's processes.

HAMi-core (github.com/Project-HAMi/HAMi-core) is a CUDA interception library, ``libvgpu.so``: a
process that preloads it has its CUDA driver calls checked against the limits its environment
names: an allocation past the memory limit fails with out-of-memory, and kernel launches are
throttled to keep the GPU's utilization under the SM limit. With ``gpufleet node-plugin
--hami-core PATH`` a share's CDI spec (:mod:`.cdi`) uses it instead of MPS:

- the library (``PATH`` on the host) is bind-mounted read-only at :data:`LIBRARY` and preloaded
  (``LD_PRELOAD``): the container path HAMi's device plugin uses with its default hook path
  ``/usr/local`` (``<hook path>/vgpu/libvgpu.so``);
- ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m`` and ``CUDA_DEVICE_SM_LIMIT_<i>=<percent>`` per GPU of
  the claim, ``i`` its CUDA index in the container (its place in ``CUDA_VISIBLE_DEVICES``): the
  per-device forms HAMi-core reads (``do_init_device_memory_limits`` and
  ``do_init_device_sm_limits`` in src/multiprocess/multiprocess_memory_limit.c; a ``m`` suffix
  is MiB), as HAMi's device plugin writes the memory one;
- ``CUDA_DEVICE_MEMORY_SHARED_CACHE``: the file in which the processes of the claim share their
  usage and limits. HAMi-core takes the limits from the environment only when it creates that
  file, so every claim gets a directory of its own on the host, ``<hami-dir>/claims/<claimUID>``,
  created empty at prepare and removed at unprepare, mounted read-write at :data:`CACHE_DIR`
  (HAMi's device plugin makes one per container the same way);
- ``/tmp/vgpulock``, the directory of the lock HAMi-core takes while it sets a process up (a
  fixed path in src/utils.c): the node's ``<hami-dir>/vgpulock``, shared by every claim as HAMi
  shares the host's ``/tmp/vgpulock``.

The directories are mode 0777 (as HAMi's device plugin makes them): the container's user need not
be root. The library's content is HAMi-core's business; the plugin only checks that the file is
there when it starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = Path("/var/run/gpufleet/hami")
LIBRARY = "/usr/local/vgpu/libvgpu.so"
CACHE_DIR = "/usr/local/vgpu/cache"
CACHE_FILE = f"{CACHE_DIR}/cudevshr.cache"
LOCK_DIR = "/tmp/vgpulock"


class HamiError(RuntimeError):
    """A HAMi-core directory that could not be made; the message names it."""


def claim_dir(root: Path | str, claim_uid: str) -> Path:
    """The host directory of the claim's shared cache file."""
    return Path(root) / "claims" / claim_uid


def lock_dir(root: Path | str) -> Path:
    """The host directory mounted at ``/tmp/vgpulock`` in every container of every claim."""
    return Path(root) / "vgpulock"


@dataclass(frozen=True)
class HamiCore:
    """The node's HAMi-core library (a host path) and the plugin's directories under ``root``."""

    library: Path
    root: Path = DEFAULT_DIR

    def check(self) -> str | None:
        """Why the library cannot be used, or None."""
        if not self.library.is_absolute():
            return f"HAMi-core library {str(self.library)!r} is not an absolute path"
        if not self.library.is_file():
            return f"HAMi-core library {str(self.library)!r} not found"
        return None


def ensure(root: Path | str, claim_uid: str) -> None:
    """Make the lock directory and the claim's directory (kept if there: a retried prepare must
    not reset the usage its running containers share)."""
    for path in (lock_dir(root), claim_dir(root, claim_uid)):
        try:
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o777)
        except OSError as exc:
            raise HamiError(f"HAMi-core directory {path}: {exc.strerror or exc}") from None


def remove(root: Path | str, claim_uid: str) -> None:
    """Remove the claim's directory and its cache file (a missing one is fine)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(claim_dir(root, claim_uid))
