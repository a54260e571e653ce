"""The kubelet's plugin-registration service (``pluginregistration.Registration``).

The kubelet watches ``<root-dir>/plugins_registry/`` for sockets; on a new one it calls GetInfo
(this plugin: a DRAPlugin named ``gpu.gpufleet.io``, its DRA socket, the DRA gRPC services it
serves) and then NotifyRegistrationStatus with whether it accepted the plugin. Only then does it
call NodePrepareResources for this driver's claims.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.protos import Stubs

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# DRA names the gRPC services it serves here (k8s.io/kubelet/pkg/apis/dra/v1.DRAPluginService)
SUPPORTED_SERVICES = ("v1.DRAPlugin",)


def socket_name() -> str:
    """The registration socket's file name in the kubelet's plugins_registry directory."""
    return f"{DRIVER}-reg.sock"


def servicer(stubs: Stubs, dra_socket: Path) -> Any:
    """A Registration servicer; its ``registered`` event is set when the kubelet accepts us and
    ``status`` holds the kubelet's last word (registered, error)."""

    base: Any = stubs.registration_grpc.RegistrationServicer

    class Registration(base):
        def __init__(self) -> None:
            self.registered = threading.Event()
            self.status: tuple[bool, str] | None = None

        def GetInfo(self, request: Any, context: Any) -> Any:
            log.info("kubelet asked for the plugin's info (GetInfo)")
            return stubs.registration.PluginInfo(
                type=PLUGIN_TYPE, name=DRIVER, endpoint=str(dra_socket),
                supported_versions=list(SUPPORTED_SERVICES))

        def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
            self.status = (request.plugin_registered, request.error)
            if request.plugin_registered:
                log.info("registered with the kubelet (NotifyRegistrationStatus registered=true)")
                self.registered.set()
            else:
                log.error("the kubelet refused the plugin: %s", request.error)
                self.registered.clear()
            return stubs.registration.RegistrationStatusResponse()

    return Registration()
