"""One writer per checkpoint folder: a second process is refused with a clear error, while the
first keeps its files; the lock goes with the holder (exit, close, or a newer in-process writer)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpufleet.checkpoint import Checkpointer
from gpufleet.checkpoint.manifest import data_name
from gpufleet.checkpoint.writerlock import LocationBusy

HOLDER = textwrap.dedent(
    """
    import sys
    from gpufleet.checkpoint import Checkpointer
    ck = Checkpointer(sys.argv[1], handle_signals=False)
    ck.save(1, {"by": "holder"})
    print("saved", flush=True)
    sys.stdin.readline()  # hold the folder until the test says go
    ck.save(2, {"by": "holder"})
    ck.close()
    print("done", flush=True)
    """
)


def test_second_process_writer_is_refused_and_first_keeps_working(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "saved"
        mine = Checkpointer(tmp_path, handle_signals=False)
        assert mine.restore()["by"] == "holder"  # reading needs no lock
        with pytest.raises(LocationBusy) as exc:
            mine.save(5, {"by": "intruder"})
        assert f"pid {holder.pid}" in str(exc.value) and str(tmp_path) in str(exc.value)
        assert not (tmp_path / data_name(5)).exists()
        out, err = holder.communicate("go\n", timeout=60)
        assert holder.returncode == 0 and out.strip() == "done", err
        mine.save(5, {"by": "me"})  # the holder exited: the folder is free
        assert Checkpointer(tmp_path, handle_signals=False).restore()["by"] == "me"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_close_releases_and_a_newer_in_process_writer_takes_over(tmp_path: Path) -> None:
    first = Checkpointer(tmp_path, handle_signals=False)
    first.save(1, {"s": 1})
    second = Checkpointer(tmp_path, handle_signals=False)  # e.g. a restarted training loop
    second.save(2, {"s": 2})
    with pytest.raises(LocationBusy, match="newer Checkpointer in this process"):
        first.save(3, {"s": 3})
    second.close()
    third = Checkpointer(tmp_path, handle_signals=False)
    third.save(4, {"s": 4})
    third.close()
    assert Checkpointer(tmp_path, handle_signals=False).restore() == {"s": 4}
