"""Run every ``benchmarks/bench_*.py`` in turn (``make bench``); each prints its own table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"\n=== {script.name} ===", flush=True)
        rc = subprocess.call([sys.executable, str(script)])
        if rc:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
