"""The AWS provider's settings: region, the subnet of each zone, the launch template, the instance
types, the interruption queue — validated before any API call.

Every field is checked here so that a typo is one line naming the field (exit 2), not an EC2
error half-way through a scale-up. Credentials are deliberately NOT a field: they come only from
boto3's standard chain (environment, shared profile, instance role), so no config file ever holds
a secret.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.catalog.yamlfile import load_model, read_yaml

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_TEMPLATE_ID = re.compile(r"^lt-[0-9a-f]{8,17}$")
_TEMPLATE_NAME = re.compile(r"^[a-zA-Z0-9().\-/_]{3,128}$")  # EC2's own rule for the name


class LaunchTemplateRef(BaseModel):
    """The launch template every instance starts from (AMI, instance profile, user data, security
    groups). Exactly one of ``name`` / ``id``; ``version`` is a number, ``$Default`` or
    ``$Latest``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = Field(default=None, description="The launch template's name.")
    id: str | None = Field(default=None, description="The launch template's id (lt-…).")
    version: str = Field(default="$Default", description=(
        "A version number, $Default or $Latest."))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not _TEMPLATE_NAME.match(v):
            raise ValueError("expected 3-128 characters of letters, digits, ( ) . - / _")
        return v

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        if v is not None and not _TEMPLATE_ID.match(v):
            raise ValueError("expected a launch template id like lt-0abc12345def67890")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if v not in ("$Default", "$Latest") and not v.isdigit():
            raise ValueError("expected a version number, '$Default' or '$Latest'")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> LaunchTemplateRef:
        if (self.name is None) == (self.id is None):
            raise ValueError("give exactly one of 'name' or 'id'")
        return self

    def spec(self) -> dict[str, str]:
        """The ``LaunchTemplateSpecification`` of CreateFleet."""
        out = {"Version": self.version}
        if self.id is not None:
            out["LaunchTemplateId"] = self.id
        else:
            assert self.name is not None
            out["LaunchTemplateName"] = self.name
        return out


class AwsConfig(BaseModel):
    """``zones`` maps each availability zone gpufleet may launch in to the subnet it launches into
    (EC2 Fleet picks the zone through the subnet of the override). ``endpoint_url`` points both
    clients at an emulator (moto, LocalStack); leave it unset for AWS itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    region: str = Field(description="The AWS region, e.g. us-east-1.")
    zones: dict[str, str] = Field(min_length=1, description=(
        "Each availability zone gpufleet may launch in → the subnet it launches into."))
    launch_template: LaunchTemplateRef = Field(description=(
        "The launch template every instance starts from."))
    instance_types: tuple[str, ...] = Field(min_length=1, description=(
        "The instance types gpufleet may launch."))
    queue_url: str | None = Field(default=None, description=(
        "The SQS queue EventBridge sends spot interruption and rebalance events to; null: "
        "notices come from the node agent alone."))
    endpoint_url: str | None = Field(default=None, description=(
        "An emulator's URL for both clients (moto, LocalStack); unset for AWS itself."))
    # bounded so the controller's loop is never held long
    wait_time_s: int = Field(default=1, ge=0, le=20, description=(
        "SQS long poll per read of the interruption queue, seconds."))
    max_messages: int = Field(default=10, ge=1, le=10, description=(
        "SQS messages per read of the interruption queue."))
    page_size: int = Field(default=500, ge=5, le=1000, description=(
        "DescribeInstances page size (EC2 allows 5 to 1000)."))
    max_attempts: int = Field(default=3, ge=1, le=10, description=(
        "Attempts per call, the first included (botocore's standard retry mode)."))
    connect_timeout_s: float = Field(default=5.0, gt=0, le=60, description=(
        "Connect timeout per call, seconds."))
    read_timeout_s: float = Field(default=30.0, gt=0, le=300, description=(
        "Read timeout per call, seconds."))

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not _REGION.match(v):
            raise ValueError("expected a region like us-east-1")
        return v

    @field_validator("zones")
    @classmethod
    def _subnets(cls, v: dict[str, str]) -> dict[str, str]:
        for zone, subnet in v.items():
            if not _SUBNET.match(subnet):
                raise ValueError(
                    f"zone {zone}: expected a subnet id like subnet-0abc1234, got {subnet!r}"
                )
        if len(set(v.values())) != len(v):
            raise ValueError("two zones share one subnet (a subnet lives in one zone)")
        return v

    @field_validator("instance_types")
    @classmethod
    def _types(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("an instance type is listed twice")
        return v

    @field_validator("queue_url", "endpoint_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/]+", v):
            raise ValueError("expected an http(s):// URL")
        return v

    @model_validator(mode="after")
    def _zones_in_region(self) -> AwsConfig:
        for zone in self.zones:
            if not (zone.startswith(self.region) and len(zone) > len(self.region)):
                raise ValueError(f"zone {zone!r} is not in region {self.region!r}")
        return self

    @property
    def zone_of_subnet(self) -> dict[str, str]:
        return {subnet: zone for zone, subnet in self.zones.items()}


def aws_config_from(data: Any, source: str | Path = "aws config") -> AwsConfig:
    """Validate a mapping (e.g. the ``aws:`` section of the controller's config): InputError naming
    the field on the first problem."""
    return load_model(AwsConfig, data, source)


def load_aws_config(path: Path) -> AwsConfig:
    """Read and validate an AWS provider config file (YAML)."""
    return aws_config_from(read_yaml(path, "AWS provider config"), path)
