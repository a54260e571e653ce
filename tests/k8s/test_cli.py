"""``gpufleet controller``: bad input is one line and exit status 2, before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_env import clear_aws_credentials
from typer.testing import CliRunner

from gpufleet.cli import _register, app
from gpufleet.control.policies import placement_policy
from gpufleet.k8s.settings import load_config

_register()
runner = CliRunner()


def test_config_is_a_simulator_scenario(tmp_path: Path) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text("name: live\nplacement: bestfit\nsharing: false\nscale_down_unneeded_s: 300\n"
                    "spot_swap: true\nheadroom: true\n")
    sc = load_config(good)
    assert sc.name == "live" and not sc.sharing and placement_policy(sc).name == "bestfit"
    assert sc.spot_swap and sc.headroom  # both run in the capacity loop


@pytest.mark.parametrize(("text", "key"), [
    ("name: live\nplacment: bestfit\n", "placment"),  # unknown keys are rejected
    ("name: live\nspot_swap: maybe\n", "spot_swap"),  # and values of the wrong type
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    res = runner.invoke(app, ["controller", "--kubeconfig", str(bad), "--config", str(bad)])
    assert res.exit_code == 2
    assert "bad.yaml" in res.output and key in res.output
    assert "Traceback" not in res.output


def test_missing_or_broken_kubeconfig(tmp_path: Path) -> None:
    res = runner.invoke(app, ["controller", "--kubeconfig", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "kubeconfig file not found" in res.output
    broken = tmp_path / "kc"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", str(broken)])
    assert res.exit_code == 2 and "cannot use this kubeconfig" in res.output


def test_lease_timings_must_be_ordered(tmp_path: Path) -> None:
    res = runner.invoke(app, ["controller", "--lease-duration", "5", "--renew-deadline", "6"])
    assert res.exit_code == 2 and "renew-deadline" in res.output


def test_cloud_option_and_key_are_checked_before_any_connection(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", str(kc), "--cloud", "gce"])
    assert res.exit_code == 2 and "--cloud" in res.output and "kwok" in res.output
    cfg = tmp_path / "cloud.yaml"
    cfg.write_text("name: live\ncloud: {name: kwok, registration_timeout_s: -1}\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", str(kc), "--config", str(cfg)])
    assert res.exit_code == 2 and "registration_timeout_s" in res.output
    assert "Traceback" not in res.output


def test_client_rate_limit_must_be_sane() -> None:
    res = runner.invoke(app, ["controller", "--kube-api-qps", "nan"])
    assert res.exit_code == 2 and "--kube-api-qps" in res.output
    res = runner.invoke(app, ["controller", "--kube-api-qps", "200", "--kube-api-burst", "0"])
    assert res.exit_code == 2 and "--kube-api-burst" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_queue_spend_interval_must_be_sane(value: str) -> None:
    res = runner.invoke(app, ["controller", "--queue-spend-interval", value])
    assert res.exit_code == 2 and "expected a finite number >= 0" in res.output
    assert "Traceback" not in res.output


def _kubeconfig(tmp_path: Path) -> Path:
    kc = tmp_path / "kc"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    return kc


AWS_INLINE = ("{region: us-east-1, zones: {us-east-1a: subnet-0abc12345}, "
              "launch_template: {name: gpufleet-nodes}, instance_types: [g5.xlarge], "
              "endpoint_url: 'http://127.0.0.1:1', max_attempts: 1}")


def test_aws_without_a_credential_is_one_line_and_exit_2(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller asks the cloud for its offerings at start (its cost prices): with nothing in
    boto3's chain that is CredentialsError, one line, exit 2 — not a warning loop later."""
    clear_aws_credentials(monkeypatch, tmp_path)
    cfg = tmp_path / "aws.yaml"
    cfg.write_text(f"name: live\nprovider: aws\ncloud: {{name: aws, aws: {AWS_INLINE}}}\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", str(_kubeconfig(tmp_path)),
                              "--config", str(cfg)])
    assert res.exit_code == 2, res.output
    assert "no credentials found" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_provider_settings_are_required_and_validated(tmp_path: Path) -> None:
    kc = str(_kubeconfig(tmp_path))
    missing = tmp_path / "missing.yaml"
    missing.write_text("name: live\ncloud: {name: aws}\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", kc, "--config", str(missing)])
    assert res.exit_code == 2 and "'aws' settings" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: live\ncloud: {name: aws, aws: {region: moon-1, zones: {}}}\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", kc, "--config", str(bad)])
    assert res.exit_code == 2 and "cloud.aws" in res.output and "region" in res.output
    ali = tmp_path / "aliyun.yaml"
    ali.write_text("region: cn-hangzhou\nzones: {cn-hangzhou-h: vsw-1}\n")  # no launch source
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"name: live\ncloud: {{name: aliyun, aliyun: '{ali}'}}\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", kc, "--config", str(cfg)])
    assert res.exit_code == 2 and "aliyun.yaml" in res.output
    assert "launch_template_id" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["controller", "--kubeconfig", kc, "--cloud", "aws"])
    assert res.exit_code == 2 and "--cloud-config" in res.output
