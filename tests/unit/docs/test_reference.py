"""docs/reference/ is what docs/generate.py makes from the sources now, and leaves nothing of them out."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from batchmark.runner.config.run import RunConfig
from docs.generate import COMMAND, REFERENCE, render_all, run_parser

ROOT = Path(__file__).resolve().parents[3]


def test_the_committed_reference_is_fresh() -> None:
    pages = render_all()
    assert sorted(path.name for path in pages) == sorted(path.name for path in REFERENCE.glob("*.md"))
    for path, text in pages.items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `{COMMAND}`"
        assert path.read_text(encoding="utf-8") == text, f"{path.relative_to(ROOT)} is stale: run `{COMMAND}`"


def test_every_option_of_run_is_in_the_reference() -> None:
    page = (REFERENCE / "run.md").read_text(encoding="utf-8")
    flags = [flag for action in run_parser()._actions for flag in action.option_strings if flag not in {"-h", "--help"}]
    assert len(flags) > 15
    assert [flag for flag in flags if f"`{flag}" not in page] == []


def models_under(model: type[BaseModel]) -> set[type[BaseModel]]:
    """The model and every model its fields hold, through lists, optionals and unions."""
    found = {model}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.add(annotation)
                for field in annotation.model_fields.values():
                    visit(field.annotation)
            return
        for argument in typing.get_args(annotation):
            visit(argument)

    for field in model.model_fields.values():
        visit(field.annotation)
    return found


def test_every_field_of_every_config_model_is_in_the_reference() -> None:
    page = (REFERENCE / "run.md").read_text(encoding="utf-8")
    models = models_under(RunConfig)
    assert len(models) > 20
    missing = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if f"| `{name}` |" not in page or not field.description or " ".join(field.description.split()) not in page
    ]
    assert missing == []


def schema_paths(node: dict[str, Any], path: str) -> list[str]:
    """Every field's path in an OpenAPI schema, as the reference writes it (`spec.constraints[].kind`)."""
    while node.get("type") == "array" and isinstance(node.get("items"), dict):
        node, path = node["items"], f"{path}[]"
    paths = []
    for name, child in node.get("properties", {}).items():
        paths += [f"{path}.{name}".lstrip("."), *schema_paths(child, f"{path}.{name}".lstrip("."))]
    return paths


def test_every_field_of_the_committed_crd_is_in_the_reference() -> None:
    page = (REFERENCE / "crd.md").read_text(encoding="utf-8")
    (crd,) = [document for path in (ROOT / "crds").glob("*.yaml") for document in yaml.safe_load_all(path.read_text())]
    paths = schema_paths(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "")
    assert len(paths) > 100
    assert [path for path in paths if f"| `{path}` |" not in page] == []


def test_every_value_of_the_chart_is_in_the_reference() -> None:
    page = (REFERENCE / "chart-values.md").read_text(encoding="utf-8")

    def paths(values: Any, prefix: str) -> list[str]:
        if not isinstance(values, dict) or not values:
            return [prefix]
        return [prefix, *(path for name, value in values.items() for path in paths(value, f"{prefix}.{name}"))]

    values = yaml.safe_load((ROOT / "charts" / "batchmark" / "values.yaml").read_text(encoding="utf-8"))
    every = [path for name, value in values.items() for path in paths(value, name)]
    assert len(every) > 80
    assert [path for path in every if f"| `{path}` |" not in page] == []
