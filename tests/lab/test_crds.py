"""What ``lab up`` reads as the chart's CRDs: the chart's ``crds/`` folder, CRDs only.

Installing them and waiting for Established runs against the real API server in every live test
(the shared lab comes up through it; ``tests/k8s/test_queues_live.py`` checks the result)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.lab.crds import CRD_DIR, chart_crds
from gpufleet.lab.errors import LabError

CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "gpufleet" / "crds"


def test_the_lab_reads_the_charts_crd_folder() -> None:
    assert CRD_DIR == CHART_CRDS
    crds = chart_crds()
    assert [c["metadata"]["name"] for c in crds] == ["gpuqueues.gpufleet.io"]
    assert crds[0] == yaml.safe_load((CHART_CRDS / "gpuqueues.gpufleet.io.yaml").read_text())


def test_every_document_in_every_file_in_name_order(tmp_path: Path) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all(
        [{**crd, "metadata": {"name": "b1"}}, None, {**crd, "metadata": {"name": "b2"}}]))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({**crd, "metadata": {"name": "a"}}))
    (tmp_path / "notes.txt").write_text("not read")
    assert [c["metadata"]["name"] for c in chart_crds(tmp_path)] == ["a", "b1", "b2"]


def test_another_kind_in_the_folder_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(yaml.safe_dump({"kind": "ConfigMap", "metadata": {}}))
    with pytest.raises(LabError, match=r"x\.yaml: a ConfigMap among the chart's CRDs"):
        chart_crds(tmp_path)


@pytest.mark.parametrize("sub", ["", "absent"], ids=["empty", "absent"])
def test_a_folder_without_crds_is_refused(tmp_path: Path, sub: str) -> None:
    with pytest.raises(LabError, match="no CustomResourceDefinitions found in"):
        chart_crds(tmp_path / sub)
