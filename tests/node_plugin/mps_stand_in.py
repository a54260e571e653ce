"""A stand-in for ``nvidia-cuda-mps-control``, for tests on machines without a GPU; the tests
copy it with a ``#!python`` line as an executable. It behaves as the plugin relies on the real
one to: ``-d`` daemonizes (the command returns, a detached process stays), writes
``$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid`` and serves commands on
``<pipe>/control``; without ``-d`` it is the client, sending stdin's commands to the daemon of
``$CUDA_MPS_PIPE_DIRECTORY`` and failing when none listens; ``quit`` makes the daemon remove its
pid file and exit. The daemon records the ``CUDA_*`` environment it got in
``$CUDA_MPS_LOG_DIRECTORY/env.json`` and its pid in ``<log>/starts`` (one line per start)."""

import json
import os
import sys

PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
CONTROL = os.path.join(PIPE, "control")
PID_FILE = os.path.join(PIPE, "nvidia-cuda-mps-control.pid")


def daemon() -> None:
    logs = os.environ["CUDA_MPS_LOG_DIRECTORY"]
    if os.fork():
        sys.exit(0)  # the command returns; the daemon lives on
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # let go of the caller's pipes, or its wait for our output never ends
        os.dup2(null, fd)
    if os.path.exists(CONTROL):
        os.unlink(CONTROL)
    os.mkfifo(CONTROL)
    with open(os.path.join(logs, "env.json"), "w") as f:
        json.dump({k: v for k, v in os.environ.items() if k.startswith("CUDA_")}, f)
    with open(os.path.join(logs, "starts"), "a") as f:
        f.write(f"{os.getpid()}\n")
    with open(PID_FILE, "w") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        with open(CONTROL) as f:
            for line in f:
                if line.strip() == "quit":
                    os.unlink(PID_FILE)
                    os.unlink(CONTROL)
                    os._exit(0)


def client() -> None:
    try:
        fd = os.open(CONTROL, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        sys.exit(f"cannot connect to the MPS control daemon in {PIPE}: {exc}")
    os.write(fd, sys.stdin.read().encode())
    os.close(fd)


if __name__ == "__main__":
    daemon() if sys.argv[1:] == ["-d"] else client()
