"""A structural OpenAPI v3 schema (what a CRD must carry) from a pydantic model's JSON schema.

pydantic writes JSON Schema 2020-12: ``$ref``s, ``anyOf [X, null]`` for optional fields, ``const`` for tags,
numeric ``exclusiveMinimum``s and discriminated ``oneOf``s. Kubernetes accepts none of these in a structural
schema, so this rewrites them:

- ``$ref`` is inlined; ``anyOf [X, null]`` becomes X (an absent field is null; the API server prunes nulls);
  ``anyOf [integer, string]`` becomes ``x-kubernetes-int-or-string`` (a quantity).
- ``const`` becomes a one-value ``enum``; numeric ``exclusiveMinimum``/``exclusiveMaximum`` become OpenAPI
  v3.0's boolean form next to ``minimum``/``maximum``.
- ``dict[str, Any]`` becomes a free-form object (``x-kubernetes-preserve-unknown-fields``).
- A discriminated union becomes one object in Kubernetes' style: the ``kind`` discriminator as an enum, every
  member's fields side by side, and CEL rules (``x-kubernetes-validations``) that keep each member's contract:
  which fields each kind requires and allows, and bounds that differ between kinds. A default goes into the
  schema only where every kind shares it; per-kind defaults are written in the field's description and applied
  by the runner's models (so ``maxConcurrency`` stays unset for a constant profile and is 512 for throughput).

Every field must have a description (``kubectl explain`` shows it): a field without one is an error here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

_DROPPED = frozenset({"title", "discriminator"})
_NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_KEPT = frozenset(
    {
        "type",
        "description",
        "default",
        "enum",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
        "format",
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-validations",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
    }
)


_FLOAT_EXACT_INTEGERS = 2**53


class SchemaError(ValueError):
    """The model uses something a structural schema cannot express; the message names where."""


def structural_schema(model: type[BaseModel]) -> Schema:
    """The model's schema (camelCase, as validated) in the structural form a CRD needs."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions: Mapping[str, Schema] = raw.pop("$defs", {})
    return _Converter(definitions).convert(raw, model.__name__)


class _Converter:
    def __init__(self, definitions: Mapping[str, Schema]) -> None:
        self.definitions = definitions

    def resolve(self, node: Schema) -> Schema:
        """Inline a ``$ref`` (or pydantic's single-member ``allOf`` around one), keeping the sibling keys."""
        node = dict(node)
        if "allOf" in node and len(node["allOf"]) == 1:
            node = {**node.pop("allOf")[0], **node}
        reference = node.pop("$ref", None)
        if reference is None:
            return node
        target = self.definitions[reference.rsplit("/", 1)[-1]]
        # The field's own keys (its description, its default) win over the referenced model's.
        return {**self.resolve(target), **node}

    def convert(self, node: Schema, where: str, inherited: str | None = None) -> Schema:
        """``inherited``: the description of the list or map whose items or values ``node`` describes."""
        node = self.resolve(node)
        if inherited is not None and "description" not in node:
            node["description"] = inherited
        if "anyOf" in node:
            node = self._any_of(node, where)
        if "oneOf" in node:
            return self._union(node, where)
        out: Schema = {}
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key == "const":
                out["enum"] = [value]
            elif key == "default":
                if value is not None:
                    out["default"] = value
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                out[key] = True
            elif key == "properties":
                out["properties"] = {name: self.convert(child, f"{where}.{name}") for name, child in value.items()}
            elif key == "items":
                if not isinstance(value, dict):
                    raise SchemaError(f"{where}: tuples have no structural schema")
                out["items"] = self.convert(value, f"{where}[]", node.get("description"))
            elif key == "additionalProperties":
                if value is True or value == {}:
                    out["x-kubernetes-preserve-unknown-fields"] = True
                elif isinstance(value, dict):
                    out["additionalProperties"] = self.convert(value, f"{where}.*", node.get("description"))
                # False: unknown fields are rejected by the API server's strict field validation.
            elif key in ("prefixItems",):
                raise SchemaError(f"{where}: tuples have no structural schema")
            elif key in _KEPT:
                out[key] = value
            else:
                raise SchemaError(f"{where}: JSON Schema keyword {key!r} has no structural form")
        if out.get("type") == "integer":
            # The API server reads bounds as float64: past 2**53 they are not integers any more and the CRD is
            # refused. Such a bound only restates int64, which the API server enforces anyway.
            for bound in ("minimum", "maximum"):
                if abs(out.get(bound, 0)) > _FLOAT_EXACT_INTEGERS:
                    del out[bound]
        if "description" not in out:
            raise SchemaError(f"{where}: every field needs a description (kubectl explain shows it)")
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "type" not in out and not out.get("x-kubernetes-int-or-string"):
            raise SchemaError(f"{where}: no type")
        return out

    def _any_of(self, node: Schema, where: str) -> Schema:
        node = dict(node)
        members = [self.resolve(member) for member in node.pop("anyOf")]
        members = [member for member in members if member.get("type") != "null"]
        types = sorted(str(member.get("type")) for member in members)
        if len(members) == 1:
            return {**members[0], **node}
        if types == ["integer", "string"]:
            merged = {key: value for member in members for key, value in member.items() if key != "type"}
            return {**merged, **node, "x-kubernetes-int-or-string": True}
        raise SchemaError(f"{where}: a union of {types} has no structural form; use a discriminated union")

    def _union(self, node: Schema, where: str) -> Schema:
        node = dict(node)
        members = [self.convert(member, where) for member in node.pop("oneOf")]
        discriminator = "kind"
        kinds = []
        for member in members:
            enum = member.get("properties", {}).get(discriminator, {}).get("enum")
            if not enum or len(enum) != 1:
                raise SchemaError(f"{where}: a union member without a one-value {discriminator!r}")
            kinds.append(enum[0])
        properties: dict[str, Schema] = {
            discriminator: {
                "type": "string",
                "enum": kinds,
                "maxLength": max(len(kind) for kind in kinds),  # bounds the cost of the CEL rules on it
                "description": f"Which kind of {where.rsplit('.', 1)[-1].rstrip('[]')}: one of {', '.join(kinds)}."
                " It decides which other fields apply.",
            }
        }
        rules: list[Schema] = []
        names = [name for member in members for name in member["properties"] if name != discriminator]
        for name in dict.fromkeys(names):
            having = [
                (kind, m["properties"][name]) for kind, m in zip(kinds, members, strict=True) if name in m["properties"]
            ]
            properties[name] = _merge_member_fields(name, having, len(having) == len(kinds), rules)
        for kind, member in zip(kinds, members, strict=True):
            required = [name for name in member.get("required", []) if name != discriminator]
            if required:
                present = " && ".join(f"has(self.{name})" for name in required)
                rules.append(
                    {
                        "rule": f"self.{discriminator} != {_cel(kind)} || ({present})",
                        "message": f"kind {kind} requires {', '.join(required)}",
                    }
                )
        out: Schema = {
            "type": "object",
            "description": _union_description(node.get("description"), kinds, members),
            "properties": properties,
            "required": [discriminator],
        }
        if rules:
            out["x-kubernetes-validations"] = rules
        return out


def _merge_member_fields(
    name: str, having: Sequence[tuple[str, Schema]], everywhere: bool, rules: list[Schema]
) -> Schema:
    """One property for a field that several union members have, plus the rules that keep each one's contract."""
    kinds = [kind for kind, _ in having]
    shapes = [_without(schema, ("description", "default", *_NUMERIC_BOUNDS)) for _, schema in having]
    if any(json.dumps(shape, sort_keys=True) != json.dumps(shapes[0], sort_keys=True) for shape in shapes):
        raise SchemaError(f"field {name!r} has different types in kinds {', '.join(kinds)}")
    merged = copy.deepcopy(shapes[0])
    # The loosest bounds go into the schema; a kind with stricter ones gets a rule of its own.
    for bound, pick in (("minimum", min), ("maximum", max)):
        values = [schema[bound] for _, schema in having if bound in schema]
        if len(values) == len(having):
            merged[bound] = pick(values)
            exclusive = f"exclusive{bound[0].upper()}{bound[1:]}"
            if all(schema.get(exclusive) and schema[bound] == merged[bound] for _, schema in having):
                merged[exclusive] = True
    for kind, schema in having:
        for condition, text in _stricter_bounds(name, schema, merged):
            rules.append(
                {
                    "rule": f"self.kind != {_cel(kind)} || !has(self.{name}) || {condition}",
                    "message": f"{name} {text} when kind is {kind}",
                    "fieldPath": f".{name}",
                }
            )
    if not everywhere:
        rules.append(
            {
                "rule": f"!has(self.{name}) || self.kind in [{', '.join(_cel(kind) for kind in kinds)}]",
                "message": f"{name} applies only when kind is {' or '.join(kinds)}",
                "fieldPath": f".{name}",
            }
        )
    descriptions = {kind: schema["description"] for kind, schema in having}
    defaults = {kind: schema["default"] for kind, schema in having if "default" in schema}
    if len(set(descriptions.values())) == 1:
        text = next(iter(descriptions.values()))
    else:
        text = " ".join(f"({kind}) {description}" for kind, description in descriptions.items())
    if not everywhere:
        text += f" Only for kind {', '.join(kinds)}."
    shared = {json.dumps(value) for value in defaults.values()}
    if everywhere and len(defaults) == len(having) and len(shared) == 1:
        merged["default"] = next(iter(defaults.values()))
    elif defaults:
        by_value: dict[str, list[str]] = {}
        for kind, value in defaults.items():
            by_value.setdefault(json.dumps(value), []).append(kind)
        unset = [kind for kind in kinds if kind not in defaults]
        text += " Default: " + "; ".join(f"{value} for kind {', '.join(ks)}" for value, ks in by_value.items())
        text += f"; unset for kind {', '.join(unset)}." if unset else "."
    merged["description"] = text
    return merged


def _stricter_bounds(name: str, schema: Schema, merged: Schema) -> list[tuple[str, str]]:
    checks: list[tuple[str, str]] = []
    number = _literal_maker(schema.get("type"))
    for bound, operator, strict_operator, words in (
        ("minimum", ">=", ">", ("at least", "greater than")),
        ("maximum", "<=", "<", ("at most", "less than")),
    ):
        if bound not in schema:
            continue
        exclusive = bool(schema.get(f"exclusive{bound[0].upper()}{bound[1:]}"))
        merged_exclusive = bool(merged.get(f"exclusive{bound[0].upper()}{bound[1:]}"))
        if merged.get(bound) == schema[bound] and merged_exclusive == exclusive:
            continue
        op = strict_operator if exclusive else operator
        checks.append((f"self.{name} {op} {number(schema[bound])}", f"must be {words[exclusive]} {schema[bound]}"))
    return checks


def _literal_maker(kind: Any) -> Callable[[Any], str]:
    if kind == "number":
        return lambda value: repr(float(value))
    return lambda value: str(int(value))


def _without(schema: Schema, keys: Sequence[str]) -> Schema:
    return {key: value for key, value in schema.items() if key not in keys}


def _union_description(description: str | None, kinds: Sequence[str], members: Sequence[Schema]) -> str:
    lines = [description or "One of several kinds, chosen by kind."]
    lines += [f"kind {kind}: {member['description']}" for kind, member in zip(kinds, members, strict=True)]
    return " ".join(line if line.endswith(".") else line + "." for line in lines)


def _cel(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def walk(schema: Schema, visit: Callable[[str, Schema], None], path: str = "") -> None:
    """Call ``visit(path, node)`` on every node of a converted schema (properties, items, map values)."""
    visit(path, schema)
    for name, child in schema.get("properties", {}).items():
        walk(child, visit, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        walk(schema["items"], visit, f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        walk(schema["additionalProperties"], visit, f"{path}.*")
