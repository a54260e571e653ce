"""``gpufleet controller``: bad input is one line and exit status 2, before any connection."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli import _register, app
from gpufleet.k8s.settings import load_config, policy_for

_register()
runner = CliRunner()


def test_config_is_a_simulator_scenario_unknown_keys_rejected(tmp_path: Path) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text("name: live\nplacement: bestfit\nsharing: false\nscale_down_unneeded_s: 300\n")
    sc = load_config(good)
    assert sc.name == "live" and not sc.sharing and policy_for(sc).name == "bestfit"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: live\nplacment: bestfit\n")
    res = runner.invoke(app, ["controller", "--kubeconfig", str(good), "--config", str(bad)])
    assert res.exit_code == 2
    assert "bad.yaml" in res.output and "placment" in res.output
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
