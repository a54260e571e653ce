"""GPU catalog: shipped data, alias resolution, MIG placement rules, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.catalog.gpus import load_gpu_catalog, parse_version
from gpufleet.errors import InputError


def test_shipped_catalog_has_required_models_and_aliases() -> None:
    cat = load_gpu_catalog()
    for name in (
        "K80",
        "P100",
        "V100-16GB",
        "V100-32GB",
        "T4",
        "A10",
        "A10G",
        "L4",
        "A100-40GB",
        "A100-80GB",
        "H100-80GB",
        "H200-141GB",
    ):
        assert name in cat.models
    for alias, canon in [
        ("V100M16", "V100-16GB"),
        ("V100M32", "V100-32GB"),
        ("g2", "G2"),
        ("Tesla-T4", "T4"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
    ]:
        assert cat.resolve(alias) == canon
    assert cat.resolve("G9") is None
    assert cat["K80"].max_cuda_version == 11080


@pytest.mark.parametrize(
    ("model", "profile", "starts", "slices"),
    [
        ("A100-40GB", "3g.20gb", (0, 4), 4),
        ("A100-40GB", "2g.10gb", (0, 2, 4), 2),
        ("A100-40GB", "7g.40gb", (0,), 8),
        ("A100-80GB", "1g.10gb", (0, 1, 2, 3, 4, 5, 6), 1),
        ("H100-80GB", "4g.40gb", (0,), 4),
    ],
)
def test_mig_placement_rules(
    model: str, profile: str, starts: tuple[int, ...], slices: int
) -> None:
    prof = load_gpu_catalog().mig_profile(model, profile)
    assert prof is not None
    assert prof.starts == starts and prof.memory_slices == slices
    assert prof.slice_mask(4) == ((1 << slices) - 1) << 4


def test_parse_version() -> None:
    assert parse_version("12.4") == 12040
    assert parse_version("11") == 11000
    with pytest.raises(InputError):
        parse_version("twelve")


def test_bad_gpu_yaml_names_field(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.yaml"
    bad.write_text(
        "X1:\n  memory_gib: -3\n  compute_capability: '8.0'\n  interconnect: pcie\n"
        "  fp16_tflops: 1\n"
    )
    with pytest.raises(InputError, match="memory_gib") as exc:
        load_gpu_catalog(bad)
    assert exc.value.path is not None and "gpus.yaml" in exc.value.path


def test_mig_start_past_end_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.yaml"
    bad.write_text(
        "X1:\n  memory_gib: 40\n  compute_capability: '8.0'\n  interconnect: nvlink\n"
        "  fp16_tflops: 1\n  mig:\n    compute_slices: 7\n    memory_slices: 8\n    profiles:\n"
        "      3g.20gb: {compute: 3, memory_slices: 4, max_count: 2, starts: [0, 6]}\n"
    )
    with pytest.raises(InputError, match="runs past"):
        load_gpu_catalog(bad)


def test_alias_to_unknown_model_rejected(tmp_path: Path) -> None:
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("Foo: NotAModel\n")
    with pytest.raises(InputError, match="unknown model"):
        load_gpu_catalog(aliases_path=aliases)


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.yaml"
    bad.write_text("A:\n  b: [1, 2\n")
    with pytest.raises(InputError) as exc:
        load_gpu_catalog(bad)
    assert exc.value.line is not None
