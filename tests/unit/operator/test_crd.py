"""The CRD: a structural schema from the runner's models, fresh in crds/, equivalent to the CLI and config file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchmark.operator.resource.api import BatchBenchmarkSpec
from batchmark.operator.resource.crd import CRD_FILE, crd_yaml, custom_resource_definition
from batchmark.operator.resource.schema import Schema, SchemaError, structural_schema, walk
from batchmark.runner.cli import build_parser
from batchmark.runner.config.load import load_config
from batchmark.runner.config.run import RunConfig

ROOT = Path(__file__).resolve().parents[3]


def openapi_schema() -> Schema:
    schema: Schema = custom_resource_definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_committed_crd_is_fresh() -> None:
    committed = (ROOT / CRD_FILE).read_text(encoding="utf-8")
    assert committed == crd_yaml(), "crds/ is stale: run `batchmark crd > crds/batchmark.dev_batchbenchmarks.yaml`"


def test_the_schema_is_structural_and_every_field_is_described() -> None:
    problems: list[str] = []

    def visit(path: str, node: Schema) -> None:
        for keyword in ("$ref", "anyOf", "oneOf", "allOf", "const", "$defs", "title", "discriminator"):
            if keyword in node:
                problems.append(f"{path}: {keyword}")
        for keyword in ("exclusiveMinimum", "exclusiveMaximum"):
            if keyword in node and not isinstance(node[keyword], bool):
                problems.append(f"{path}: numeric {keyword}")
        if "description" not in node and path != ".metadata":  # the API server forbids any keyword there
            problems.append(f"{path}: no description")
        if (
            path != ".metadata"
            and node.get("type") == "object"
            and not (
                "properties" in node
                or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
            )
        ):
            problems.append(f"{path}: object without properties")
        if "type" not in node and not node.get("x-kubernetes-int-or-string"):
            problems.append(f"{path}: no type")

    walk(openapi_schema(), visit)
    assert problems == []


def test_per_kind_defaults_are_not_flattened_into_the_schema() -> None:
    profile = openapi_schema()["properties"]["spec"]["properties"]["profile"]
    # 512 for throughput and sweep, unset for constant and poisson: no schema default could say both.
    assert "default" not in profile["properties"]["maxConcurrency"]
    assert (
        "512 for kind throughput, sweep; unset for kind constant, poisson"
        in (profile["properties"]["maxConcurrency"]["description"])
    )
    # A default every kind shares stays in the schema.
    backend = openapi_schema()["properties"]["spec"]["properties"]["backend"]
    assert backend["properties"]["batchSize"]["default"] == 32
    rules = [rule["rule"] for rule in profile["x-kubernetes-validations"]]
    assert "self.kind != 'concurrent' || (has(self.streams))" in rules
    assert "!has(self.streams) || self.kind in ['concurrent']" in rules


def test_vllm_config_stays_free_form() -> None:
    backend = openapi_schema()["properties"]["spec"]["properties"]["backend"]
    assert backend["properties"]["vllmConfig"]["x-kubernetes-preserve-unknown-fields"] is True


def test_printer_columns_and_names() -> None:
    crd = custom_resource_definition()
    version = crd["spec"]["versions"][0]
    columns = [(column["name"], column.get("priority", 0)) for column in version["additionalPrinterColumns"]]
    assert columns == [
        ("Phase", 0),
        ("Model", 0),
        ("Batch", 0),
        ("Replicas", 0),
        ("Tok/s", 0),
        ("Req/s", 0),
        ("P50", 0),
        ("Age", 0),
        ("P99", 1),
        ("Engine", 1),
        ("Best-Batch", 1),
        ("Queue-Pos", 1),
    ]
    assert version["subresources"] == {"status": {}}
    assert crd["spec"]["names"]["shortNames"] == ["bb"]
    assert crd["spec"]["names"]["categories"] == ["batchmark"]


def test_a_union_member_without_a_tag_is_refused() -> None:
    from pydantic import BaseModel, Field

    class A(BaseModel):
        x: int = Field(description="x")

    class B(BaseModel):
        y: str = Field(description="y")

    class Holder(BaseModel):
        value: A | B = Field(description="either")

    with pytest.raises(SchemaError, match="value"):
        structural_schema(Holder)


BACKEND = "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=0.01"
DATA = "kind=synthetic_text,prompt_tokens=64,output_tokens=16,prompt_tokens_min=32"
CONSTRAINTS = ["kind=max_requests,count=40", "kind=max_error_rate,rate=0.5"]


@pytest.mark.parametrize(
    ("profile", "expected_concurrency"),
    [("kind=throughput", 512), ("kind=constant,rate=5", None), ("kind=sweep,sweep_size=3", 512)],
)
def test_cli_config_file_and_custom_resource_give_the_same_run_config(
    tmp_path: Path, profile: str, expected_concurrency: int | None
) -> None:
    parser = build_parser()
    cli_args = ["run", "--name", "same", "--backend", BACKEND, "--data", DATA, "--profile", profile]
    for constraint in CONSTRAINTS:
        cli_args += ["--constraint", constraint]
    from_cli = load_config(parser.parse_args(cli_args))

    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(from_cli.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    from_file = load_config(parser.parse_args(["run", "--config", str(config_file)]))

    manifest = _manifest(parser.parse_args(["manifest", *cli_args[1:]]), from_cli)
    from_cr = BatchBenchmarkSpec.model_validate(manifest["spec"]).run_config(manifest["metadata"]["name"])

    assert from_cli == from_file == from_cr
    assert getattr(from_cr.profile, "max_concurrency", None) == expected_concurrency


def _manifest(args: argparse.Namespace, config: RunConfig) -> dict[str, Any]:
    from batchmark.operator.client.manifest import manifest

    document: dict[str, Any] = json.loads(json.dumps(manifest(config, args)))
    return document


def test_integer_bounds_are_ones_the_api_server_can_read() -> None:
    """It reads bounds as float64: a bound past 2**53 (e.g. a seed's int64 maximum) makes it refuse the CRD."""
    too_large: list[str] = []

    def visit(path: str, node: Schema) -> None:
        if node.get("type") == "integer":
            too_large.extend(f"{path}.{b}" for b in ("minimum", "maximum") if abs(node.get(b, 0)) > 2**53)

    walk(openapi_schema(), visit)
    assert too_large == []
