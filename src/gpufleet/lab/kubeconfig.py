"""Kubeconfig files for the lab's clients (admin, controller-manager, scheduler, KWOK).

File paths rather than embedded data: the files stay small and readable, and a restarted lab on
the same directory keeps them valid (only the server port changes, and they are rewritten).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpufleet.lab.pki import CertPair

CLUSTER = "gpufleet-lab"


def write_kubeconfig(path: Path, server: str, ca: Path, client: CertPair, user: str) -> Path:
    """Write a single-context kubeconfig for ``user`` at ``path`` and return the path."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER,
                "cluster": {"server": server, "certificate-authority": str(ca.resolve())},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(client.cert.resolve()),
                    "client-key": str(client.key.resolve()),
                },
            }
        ],
        "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": user}}],
        "current-context": CLUSTER,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
