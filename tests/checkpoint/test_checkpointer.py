"""In-process behaviour of Checkpointer: schedule, retention, fallback, stores, signals, notices."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from gpufleet.checkpoint import EXIT_PREEMPTED, Checkpointer, Notice
from gpufleet.checkpoint.manifest import data_name, manifest_name
from gpufleet.checkpoint.store import LocalStore
from gpufleet.errors import InputError


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def ckpt_steps(path: Path) -> list[int]:
    return sorted(int(p.name[5:17]) for p in path.glob("ckpt-*.json"))


def make(location: str | Path, **kw: object) -> Checkpointer:
    kw.setdefault("handle_signals", False)
    return Checkpointer(location, **kw)  # type: ignore[arg-type]


def test_every_steps_saves_multiples_and_keeps_last_k(tmp_path: Path) -> None:
    ck = make(tmp_path, every_steps=3, keep=2)
    saved = [s for s in range(1, 11) if ck.after_step(s, {"s": s})]
    assert saved == [3, 6, 9]
    assert ckpt_steps(tmp_path) == [6, 9]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        data_name(6),
        manifest_name(6),
        data_name(9),
        manifest_name(9),
    ]


def test_every_seconds_counts_from_end_of_last_save(tmp_path: Path) -> None:
    clock = FakeClock()
    ck = make(tmp_path, every_seconds=10.0, clock=clock)
    hits = []
    for step, t in enumerate([1, 5, 9.9, 10.0, 15, 19.9, 20.1, 25], start=1):
        clock.t = 1000.0 + t
        if ck.after_step(step, lambda s=step: {"s": s}):
            hits.append(step)
    assert hits == [4, 7]  # t=10.0 (10 s after start), t=20.1 (10.1 s after the save at 10.0)


def test_state_factory_called_only_when_saving(tmp_path: Path) -> None:
    calls = []

    def state() -> dict[str, int]:
        calls.append(1)
        return {"x": 1}

    ck = make(tmp_path, every_steps=5)
    for s in range(1, 12):
        ck.after_step(s, state)
    assert len(calls) == 2


def test_restore_roundtrip_numpy_and_python(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    rng.random(3)
    state = {
        "step": 7,
        "w": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
        "z": np.float64(2.5),
        "rng": rng,
        "tags": ["a", ("b", 3)],
        "none": None,
        "big": np.ones(300_000),
    }
    make(tmp_path).save(7, state)
    ck = make(tmp_path)
    got = ck.restore(default=None)
    assert got["step"] == 7 and got["tags"] == ["a", ("b", 3)] and got["none"] is None
    assert np.array_equal(got["w"], state["w"]) and got["w"].dtype == np.float32
    assert got["rng"].random() == rng.random()
    got["big"][0] = 5  # restored arrays are writable
    assert ck.status.resumed_step == 7


def test_restore_fresh_returns_default(tmp_path: Path) -> None:
    ck = make(tmp_path / "new")
    assert ck.restore(default=lambda: {"step": 0}) == {"step": 0}
    assert ck.status.resumed_step is None


def corrupt_flip(d: Path, step: int) -> None:
    p = d / data_name(step)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    p.write_bytes(bytes(raw))


def corrupt_truncate(d: Path, step: int) -> None:
    p = d / data_name(step)
    p.write_bytes(p.read_bytes()[:-10])


def corrupt_manifest_torn(d: Path, step: int) -> None:
    p = d / manifest_name(step)
    p.write_bytes(p.read_bytes()[:20])


def corrupt_manifest_wrong_step(d: Path, step: int) -> None:
    p = d / manifest_name(step)
    doc = json.loads(p.read_text())
    doc["step"] = step + 1
    p.write_text(json.dumps(doc))


def corrupt_data_missing(d: Path, step: int) -> None:
    (d / data_name(step)).unlink()


def corrupt_same_size_garbage(d: Path, step: int) -> None:
    # a garbled file whose manifest is rewritten to match it: passes the hash, fails decoding
    p = d / data_name(step)
    junk = b"\x00" * p.stat().st_size
    p.write_bytes(junk)
    import hashlib

    m = d / manifest_name(step)
    doc = json.loads(m.read_text())
    doc["sha256"] = hashlib.sha256(junk).hexdigest()
    m.write_text(json.dumps(doc))


def corrupt_manifest_names_other_steps_data(path: Path, step: int) -> None:
    """Step `step`'s manifest now names (and hashes) the previous step's intact data file."""
    mpath = path / manifest_name(step)
    doc = json.loads(mpath.read_text())
    other = json.loads((path / manifest_name(step - 10)).read_text())
    doc.update(data=other["data"], sha256=other["sha256"], bytes=other["bytes"])
    mpath.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (corrupt_manifest_names_other_steps_data, f"expected '{data_name(30)}' for step 30"),
        (corrupt_flip, "sha256"),
        (corrupt_truncate, "bytes, manifest says"),
        (corrupt_manifest_torn, "manifest unreadable"),
        (corrupt_manifest_wrong_step, "does not match its file name"),
        (corrupt_data_missing, "None bytes"),
        (corrupt_same_size_garbage, "decode failed"),
    ],
)
def test_falls_back_to_previous_when_newest_is_damaged(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    ck = make(tmp_path, every_steps=10, keep=3)
    for s in range(1, 31):
        ck.after_step(s, {"step": s, "w": np.full(100, s, dtype=np.float64)})
    damage(tmp_path, 30)
    restored, rejected = make(tmp_path).load_latest()
    assert restored is not None and restored.step == 20
    assert restored.state["w"][0] == 20.0
    assert len(rejected) == 1 and rejected[0].step == 30 and reason in rejected[0].reason


def test_all_damaged_starts_fresh_and_prunes_abandoned_future(tmp_path: Path) -> None:
    ck = make(tmp_path, every_steps=10, keep=2)
    for s in (10, 20):
        ck.save(s, {"step": s})
    corrupt_flip(tmp_path, 10)
    corrupt_flip(tmp_path, 20)
    ck2 = make(tmp_path, every_steps=10, keep=2)
    assert ck2.restore(default={"step": 0}) == {"step": 0}
    assert ck2.status.rejected == 2
    ck2.after_step(10, {"step": 10, "new": True})  # overwrites 10; the damaged 20 is dropped
    assert ckpt_steps(tmp_path) == [10]
    assert make(tmp_path).restore()["new"] is True


def test_memory_filesystem_roundtrip_and_fallback() -> None:
    url = "memory://gpufleet-test/ckpt-fallback"
    ck = make(url, every_steps=2, keep=2)
    for s in range(1, 7):
        ck.after_step(s, {"step": s, "a": np.arange(s)})
    assert ck.store.names() == [data_name(4), manifest_name(4), data_name(6), manifest_name(6)]
    restored, _ = make(url).load_latest()
    assert restored is not None and restored.step == 6
    fs = ck.store.fs  # type: ignore[attr-defined]
    path = f"{ck.store.root}/{data_name(6)}"  # type: ignore[attr-defined]
    fs.pipe(path, fs.cat(path)[:-1])  # torn object
    restored, rejected = make(url).load_latest()
    assert restored is not None and restored.step == 4 and rejected[0].step == 6
    assert not ck.store.durable
    fs.rm(ck.store.root, recursive=True)  # type: ignore[attr-defined]


def test_file_url_gets_local_store_guarantees(tmp_path: Path) -> None:
    ck = make(f"file://{tmp_path}/x")
    ck.save(1, {"a": 1})
    assert ck.store.durable and (tmp_path / "x" / manifest_name(1)).exists()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"every_steps": 0}, "every_steps"),
        ({"every_steps": 2.5}, "every_steps"),
        ({"every_seconds": 0}, "every_seconds"),
        ({"every_seconds": -1.0}, "every_seconds"),
        ({"keep": 0}, "keep"),
    ],
)
def test_bad_settings_are_input_errors(tmp_path: Path, kw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as err:
        make(tmp_path, **kw)
    assert err.value.field == field


def test_negative_step_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="step"):
        make(tmp_path).save(-1, {})


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_stop_signal_saves_at_next_safe_point_then_exits(tmp_path: Path, sig: int) -> None:
    before = signal.getsignal(sig)
    ck = Checkpointer(tmp_path, every_steps=100)
    ck.after_step(1, {"step": 1})
    os.kill(os.getpid(), sig)  # the handler only sets a flag: nothing saved yet
    assert ck.should_stop and ckpt_steps(tmp_path) == []
    with pytest.raises(SystemExit) as exc:
        ck.after_step(2, {"step": 2})
    assert exc.value.code == EXIT_PREEMPTED
    assert ckpt_steps(tmp_path) == [2]
    assert signal.getsignal(sig) == before  # handlers restored on the way out


def test_sigusr2_saves_and_continues(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, every_steps=100) as ck:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ck.after_step(3, {"step": 3}) is True
        assert not ck.should_stop and ckpt_steps(tmp_path) == [3]


def test_exit_on_stop_false_leaves_the_loop_to_the_caller(tmp_path: Path) -> None:
    ck = make(tmp_path, every_steps=100, exit_on_stop=False)
    ck.request_stop("test")
    assert ck.after_step(5, {"step": 5}) is True
    assert ck.should_stop and ck.status.phase == "preempted"
    assert ck.after_step(5, {"step": 5}) is False  # already saved at this step


def test_notice_deadline_used_when_asked(tmp_path: Path) -> None:
    wall = FakeClock(10_000.0)
    clock = FakeClock(0.0)
    ck = make(
        tmp_path,
        every_steps=1000,
        exit_on_stop=False,
        use_notice_time=True,
        notice_margin_s=10.0,
        wall=wall,
        clock=clock,
    )
    ck.save(0, {"step": 0})  # last save took 0 s of fake time
    ck.on_notice(Notice("aws", "terminate", wall.t + 120.0, "test"))
    clock.t, wall.t = 1.0, wall.t + 1.0
    assert ck.after_step(1, {"step": 1}) is False  # 119 s left > 10 s margin: keep training
    clock.t, wall.t = 2.0, wall.t + 100.0
    assert ck.after_step(2, {"step": 2}) is False  # 19 s left > 10 + 1 (step) s
    clock.t, wall.t = 3.0, wall.t + 8.5
    assert ck.after_step(3, {"step": 3}) is True  # 10.5 s left <= 11 s: save now
    assert ck.should_stop and ckpt_steps(tmp_path) == [0, 3]


def test_notice_without_use_notice_time_stops_at_once(tmp_path: Path) -> None:
    ck = make(tmp_path, every_steps=1000, exit_on_stop=False)
    ck.on_notice(Notice("gcp", "preempted", None, "TRUE"))
    assert ck.after_step(1, {"step": 1}) is True and ck.status.stop_reason == "gcp preempted notice"


def test_rebalance_notice_only_saves(tmp_path: Path) -> None:
    ck = make(tmp_path, every_steps=1000, exit_on_stop=False)
    ck.on_notice(Notice("aws", "rebalance", None, "{}"))
    assert ck.after_step(1, {"step": 1}) is True
    assert not ck.should_stop


def test_status_file_reports_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    status = tmp_path / "status.json"
    monkeypatch.setenv("GPUFLEET_STATUS_FILE", str(status))
    monkeypatch.setenv("GPUFLEET_ATTEMPT", "3")
    ck = make(tmp_path / "c", every_steps=2)
    ck.restore()
    for s in range(1, 6):
        ck.after_step(s, {"s": s})
    ck.finish()
    doc = json.loads(status.read_text())
    assert doc["attempt"] == 3 and doc["phase"] == "done" and doc["saved_step"] == 4
    assert doc["saves"] == 2 and doc["resumed_step"] is None and doc["pid"] == os.getpid()


def test_signal_handlers_off_main_thread_is_a_clear_error(tmp_path: Path) -> None:
    import threading

    errors: list[BaseException] = []

    def build() -> None:
        try:
            Checkpointer(tmp_path)
        except InputError as exc:
            errors.append(exc)

    t = threading.Thread(target=build)
    t.start()
    t.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])
    make(tmp_path)  # handle_signals=False works anywhere


class FullDisk:
    """A LocalStore whose disk holds ``capacity`` bytes: a write that would exceed it fails with
    ENOSPC (as a real full disk does), and ``fail_next_manifest`` fails one manifest write."""

    def __init__(self, inner: LocalStore, capacity: int) -> None:
        self.inner = inner
        self.capacity = capacity
        self.fail_next_manifest = False
        self.url, self.durable = inner.url, inner.durable

    def used(self) -> int:
        return sum(p.stat().st_size for p in self.inner.root.iterdir() if p.is_file())

    def write(self, name: str, fill: Callable[[BinaryIO], None]) -> None:
        buf = io.BytesIO()
        fill(buf)
        if name.endswith(".json") and self.fail_next_manifest:
            self.fail_next_manifest = False
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.used() + len(buf.getvalue()) > self.capacity:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.inner.write(name, lambda f: f.write(buf.getvalue()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_enospc_before_manifest_leaves_no_orphan_and_later_saves_succeed(tmp_path: Path) -> None:
    ck = make(tmp_path, keep=1)
    state = {"w": np.arange(5000, dtype=np.float64)}  # 40 kB of data, manifests ~300 bytes
    disk = FullDisk(ck.store, capacity=2 * 40_500 + 2_000)  # room for two checkpoints at once
    ck.store = disk
    ck.save(1, state)
    disk.fail_next_manifest = True
    with pytest.raises(OSError) as exc:
        ck.save(2, state)
    assert exc.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == [data_name(1), manifest_name(1)]
    ck.save(3, state)  # would fail for lack of space if step 2's data had stayed behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [data_name(3), manifest_name(3)]
    assert make(tmp_path).restore()["w"][-1] == 4999


def test_first_save_frees_what_a_killed_save_left_before_writing(tmp_path: Path) -> None:
    state = {"w": np.arange(5000, dtype=np.float64)}
    make(tmp_path).save(1, state)
    # a save SIGKILLed between data and manifest, and one killed mid-data, on a now-full disk
    (tmp_path / data_name(2)).write_bytes((tmp_path / data_name(1)).read_bytes())
    (tmp_path / f".tmp-{data_name(3)}.abc").write_bytes(b"half written")
    ck = make(tmp_path, keep=1)
    ck.store = FullDisk(ck.store, capacity=2 * 40_500 + 2_000)  # type: ignore[assignment]
    assert ck.restore()["w"][-1] == 4999
    ck.save(4, state)  # needs the orphan's space
    assert sorted(p.name for p in tmp_path.iterdir()) == [data_name(4), manifest_name(4)]
