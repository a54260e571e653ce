"""The AWS provider's config: every mistake is one InputError naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.cloud.aws import AwsProvider
from gpufleet.cloud.aws_config import aws_config_from, load_aws_config
from gpufleet.errors import InputError


def _good() -> dict[str, Any]:
    return {
        "region": "us-west-2",
        "zones": {"us-west-2a": "subnet-0abc1234", "us-west-2b": "subnet-0abc1235"},
        "launch_template": {"id": "lt-0abc12345def67890", "version": "3"},
        "instance_types": ["p4d.24xlarge", "g5.xlarge"],
        "queue_url": "https://sqs.us-west-2.amazonaws.com/123456789012/gpufleet",
    }


def test_good_config_loads_with_bounded_defaults() -> None:
    cfg = aws_config_from(_good())
    assert cfg.launch_template.spec() == {
        "LaunchTemplateId": "lt-0abc12345def67890",
        "Version": "3",
    }
    assert cfg.zone_of_subnet["subnet-0abc1235"] == "us-west-2b"
    assert cfg.max_attempts == 3 and 0 <= cfg.wait_time_s <= 20 and cfg.endpoint_url is None


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"region": "US East"}, "region", "region like us-east-1"),
        ({"zones": {"us-west-2a": "sg-123"}}, "zones", "subnet id"),
        ({"zones": {}}, "zones", "at least 1"),
        ({"zones": {"us-east-1a": "subnet-0abc1234"}}, None, "not in region"),
        (
            {"zones": {"us-west-2a": "subnet-0abc1234", "us-west-2b": "subnet-0abc1234"}},
            "zones",
            "share one subnet",
        ),
        (
            {"launch_template": {"name": "lt-name", "id": "lt-0abc12345def67890"}},
            "launch_template",
            "exactly one",
        ),
        ({"launch_template": {}}, "launch_template", "exactly one"),
        ({"launch_template": {"name": "x"}}, "launch_template.name", "3-128"),
        (
            {"launch_template": {"name": "nodes", "version": "newest"}},
            "launch_template.version",
            "version number",
        ),
        ({"instance_types": []}, "instance_types", "at least 1"),
        ({"instance_types": ["g5.xlarge", "g5.xlarge"]}, "instance_types", "twice"),
        ({"queue_url": "sqs/queue"}, "queue_url", "http"),
        ({"wait_time_s": 21}, "wait_time_s", "less than or equal to 20"),
        ({"max_attempts": 0}, "max_attempts", "greater than or equal to 1"),
        ({"access_key": "AKIA..."}, "access_key", "Extra inputs"),
    ],
)
def test_bad_field_is_named(change: dict[str, Any], field: str | None, words: str) -> None:
    with pytest.raises(InputError) as err:
        aws_config_from({**_good(), **change}, "aws.yaml")
    assert err.value.field == field
    assert words in str(err.value) and str(err.value).startswith("aws.yaml: ")
    assert "\n" not in str(err.value)


def test_instance_type_outside_the_catalog_is_refused() -> None:
    cfg = aws_config_from({**_good(), "instance_types": ["g5.xlarge", "m5.large"]})
    with pytest.raises(InputError) as err:
        AwsProvider(cfg)
    assert err.value.field == "instance_types.1" and "m5.large" in str(err.value)


def test_load_from_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "aws.yaml"
    path.write_text(
        "region: us-east-1\n"
        "zones: {us-east-1a: subnet-0aaaaaaa}\n"
        "launch_template: {name: gpufleet-nodes}\n"
        "instance_types: [g5.xlarge]\n"
    )
    cfg = load_aws_config(path)
    assert cfg.launch_template.spec() == {
        "LaunchTemplateName": "gpufleet-nodes",
        "Version": "$Default",
    }
    path.write_text("region: us-east-1\nzones: {us-east-1a: subnet-0aaaaaaa}\n")
    with pytest.raises(InputError) as err:
        load_aws_config(path)
    assert str(path) in str(err.value) and err.value.field == "launch_template"
