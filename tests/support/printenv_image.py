"""A one-file image whose container prints its environment: what the tests on the lab's real
node read to see what a DRA driver's CDI spec put into a container.

``/printenv`` prints each variable on a line, then a last line without ``=`` (``printenv:
done``) that says it is all there, and waits like pause until SIGTERM. ``/printenv <seconds>``
sleeps that long and exits 0: an init container that holds a pod between the kubelet's
NodePrepareResources and its main container's start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.lab import real_node

IMAGE = "localhost/gpufleet-printenv:test"
PRINTENV_C = """#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
extern char **environ;
static void quit(int sig) { (void)sig; _exit(0); }
int main(int argc, char **argv) {
  signal(SIGINT, quit); signal(SIGTERM, quit);
  if (argc > 1) { sleep((unsigned)atoi(argv[1])); return 0; }
  for (char **e = environ; *e; e++) puts(*e);
  puts("printenv: done");
  fflush(stdout);
  for (;;) pause();
}
"""


def load_into_node(directory: Path) -> str:
    """Build the image and import it into the real node's containerd (the lab at
    ``directory``); its reference, for ``imagePullPolicy: Never``."""
    archive = real_node.build_static_image(real_node.work_dir(directory), "printenv",
                                           PRINTENV_C, IMAGE.rsplit(":", 1)[1])
    real_node.import_static_image(directory, archive, IMAGE)
    return IMAGE


def printed_env(core: Any, ns: str, pod: str, container: str = "main") -> dict[str, str] | None:
    """The environment the pod's container printed (its log, read through the kubelet), once
    the program has printed all of it; else None."""
    from kubernetes.client.exceptions import ApiException

    # the raw response: the client's decoded one is the repr of the bytes here ("b'PATH=…\\n…'")
    try:
        response = core.read_namespaced_pod_log(pod, ns, container=container,
                                                _preload_content=False)
    except ApiException as exc:
        if exc.status == 400:  # the container has not started yet
            return None
        raise
    lines = response.data.decode().splitlines()
    if "printenv: done" not in lines:
        return None
    return dict(line.split("=", 1) for line in lines if "=" in line)
