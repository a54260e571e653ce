"""The ``gpufleet`` command line: the table of contents of the feature commands.

Each feature keeps its commands in its own module (``gpufleet.<feature>.cli``), registered on the
shared apps of :mod:`gpufleet.cli_app` when the module is imported. This module only lists them
(:func:`_register`) and runs the app; no feature imports it back, so there is no import cycle.
"""

from __future__ import annotations

from gpufleet.cli_app import app, bench_app, err_console, friendly_errors

__all__ = ["app", "bench_app", "err_console", "friendly_errors", "main"]


def _register() -> None:
    """Import every feature CLI; each registers its commands on import.

    The entry list of commands: add a feature's ``cli`` module here. Deferred to ``main`` so that
    importing ``gpufleet.cli`` stays cheap.
    """
    import gpufleet.checkpoint.cli  # gpufleet run
    import gpufleet.cloud.cli  # gpufleet cloud offerings|instances
    import gpufleet.k8s.cli  # gpufleet controller, gpufleet bench k8s-packing
    import gpufleet.k8s.disruption.agent  # gpufleet agent
    import gpufleet.lab.cli  # gpufleet lab up|down|status
    import gpufleet.market.cli  # gpufleet bench spot-deadline
    import gpufleet.metrics.cli  # gpufleet exporter
    import gpufleet.node_plugin.cli  # gpufleet node-plugin
    import gpufleet.placement.cli  # gpufleet bench packing
    import gpufleet.reference.cli  # gpufleet config schema
    import gpufleet.sim.cli  # noqa: F401  gpufleet simulate


def main() -> None:
    _register()
    app(prog_name="gpufleet")


if __name__ == "__main__":  # pragma: no cover
    main()
