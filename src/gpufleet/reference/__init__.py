"""The reference documentation rendered from the code: ``docs/reference/``.

Each page is built from what the program itself holds, so it cannot drift from it:

* ``cli.md`` — every command of the typer app, walked through click (:mod:`.cli_doc`);
* ``config.md`` and ``scenario.schema.json`` / ``controller.schema.json`` — the scenario and
  controller configuration files, from their pydantic models (:mod:`.config_doc`,
  :mod:`.schema`);
* ``annotations.md`` — the labels, annotations and fields the Kubernetes driver reads and writes,
  from its tables (:mod:`.annotations_doc`);
* ``metrics.md`` — every metric each process serves, from its collectors on a fresh registry
  (:mod:`.metrics_doc`).

``python -m gpufleet.reference`` writes them (``make reference``); ``--check`` fails when a
committed page differs from what the code renders (:mod:`.pages`). The package sits at the top
of the import graph, beside :mod:`gpufleet.cli`: it reads the CLI, the configuration, the
Kubernetes driver and the metrics, and nothing imports it but the entry point's ``config schema``
command (:mod:`.cli`), which needs only :mod:`.schema`.
"""
