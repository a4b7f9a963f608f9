"""The BatchBenchmark CustomResourceDefinition, generated from the API models (``batchmark crd`` prints it).

The committed copy is crds/batchmark.dev_batchbenchmarks.yaml; a test fails when it is stale.
"""

from __future__ import annotations

from typing import Any

import yaml

from batchmark.operator.resource.api import (
    CATEGORY,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    VERSION,
    BatchBenchmarkSpec,
    BatchBenchmarkStatus,
)
from batchmark.operator.resource.schema import Schema, structural_schema

CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILE = f"crds/{GROUP}_{PLURAL}.yaml"

# Every field of the spec but this one is immutable: changing one after creation would make the status and
# results describe a benchmark the object no longer shows (or a Job made from another spec).
MUTABLE_FIELDS = ("cancel",)
_BOUNDING = "['max_requests', 'max_duration', 'min_requests']"

# The runner's cross-field rules (RunConfig and its models' validators), for the API server to check first.
_SPEC_RULES: list[Schema] = [
    {
        "rule": f"self.constraints.exists(c, c.kind in {_BOUNDING})",
        "message": "constraints: add max_requests, max_duration or min_requests so that the run ends",
        "fieldPath": ".constraints",
    },
    {
        "rule": "!has(self.profile.cooldown) || !has(self.profile.cooldown.requests)"
        " || self.constraints.exists(c, c.kind == 'max_requests')",
        "message": "profile.cooldown.requests needs a max_requests constraint to count back from",
        "fieldPath": ".profile.cooldown.requests",
    },
    {
        "rule": "!has(self.profile.cooldown) || !has(self.profile.cooldown.seconds)"
        " || self.constraints.exists(c, c.kind == 'max_duration')",
        "message": "profile.cooldown.seconds needs a max_duration constraint to count back from",
        "fieldPath": ".profile.cooldown.seconds",
    },
    *(
        {
            "rule": f"!has(self.profile.{phase}) || (!has(self.profile.{phase}.fraction)"
            f" && !has(self.profile.{phase}.amount))"
            " || self.constraints.exists(c, c.kind in ['max_requests', 'max_duration'])",
            "message": f"profile.{phase} as a fraction or amount needs max_requests or max_duration to measure against",
            "fieldPath": f".profile.{phase}",
        }
        for phase in ("warmup", "cooldown")
    ),
]
_PHASE_RULES: list[Schema] = [
    {
        "rule": "[has(self.requests), has(self.seconds), has(self.fraction), has(self.amount)]"
        ".filter(given, given).size() <= 1",
        "message": "give one of requests, seconds, fraction or amount",
    }
]
_DATA_RULES: list[Schema] = [
    {
        "rule": f"!has(self.{name}Min) || !has(self.{name}Max) || self.{name}Min <= self.{name}Max",
        "message": f"{name}Min is greater than {name}Max",
        "fieldPath": f".{name}Min",
    }
    for name in ("promptTokens", "outputTokens")
]

# ResultsStore's validator: a claim or a bucket, each with its own fields.
_STORE_RULES: list[Schema] = [
    {
        "rule": "has(self.claimName) != has(self.url)",
        "message": "give one of claimName (a PersistentVolumeClaim) or url (an S3 bucket, s3://BUCKET[/PREFIX])",
    },
    {
        "rule": "!has(self.path) || has(self.claimName)",
        "message": "path is the store's folder in claimName: in an S3 bucket, give it as url's PREFIX",
        "fieldPath": ".path",
    },
    {
        "rule": "has(self.url) || !(has(self.endpoint) || has(self.region) || has(self.credentialsSecret))",
        "message": "endpoint, region and credentialsSecret go only with url (an S3 bucket), not with claimName",
    },
]


def spec_schema() -> Schema:
    schema = structural_schema(BatchBenchmarkSpec)
    properties = schema["properties"]
    for phase in ("warmup", "cooldown"):
        properties["profile"]["properties"][phase]["x-kubernetes-validations"] = list(_PHASE_RULES)
    data = properties["data"]
    data.setdefault("x-kubernetes-validations", []).extend(_DATA_RULES)
    # A data spec without a kind is synthetic text (as the runner reads it): manifests from before other kinds.
    data["properties"]["kind"]["default"] = "synthetic_text"
    properties["dataVolume"]["x-kubernetes-validations"] = [
        {"rule": "has(self.configMap) != has(self.claimName)", "message": "give one of configMap or claimName"}
    ]
    properties["results"]["properties"]["store"]["x-kubernetes-validations"] = list(_STORE_RULES)
    required = set(schema.get("required") or [])
    presence: list[Schema] = []
    for name, field in properties.items():
        if name in MUTABLE_FIELDS:
            continue
        message = (
            f"{name} is immutable: the benchmark cannot change after creation (only cancel may); create a new"
            " BatchBenchmark"
        )
        # A transition rule on a field runs only when both versions have it: adding or removing an optional
        # field is caught one level up.
        field.setdefault("x-kubernetes-validations", []).append({"rule": "self == oldSelf", "message": message})
        if name not in required:
            presence.append(
                {"rule": f"has(self.{name}) == has(oldSelf.{name})", "message": message, "fieldPath": f".{name}"}
            )
    schema["x-kubernetes-validations"] = [*_SPEC_RULES, *presence]
    return schema


def status_schema() -> Schema:
    """The status' schema, with what Kubernetes tools expect of it: conditions a list keyed by type (a
    server-side apply merges them by type), and times declared as date-times."""
    schema = structural_schema(BatchBenchmarkStatus)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    _declare_times(schema)
    return schema


def _declare_times(schema: Schema) -> None:
    """``format: date-time`` on every string the models describe as an RFC 3339 time."""
    if schema.get("type") == "string" and "RFC 3339" in str(schema.get("description") or ""):
        schema["format"] = "date-time"
    for child in (schema.get("properties") or {}).values():
        _declare_times(child)
    if isinstance(schema.get("items"), dict):
        _declare_times(schema["items"])


def custom_resource_definition() -> dict[str, Any]:
    status = status_schema()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/name": "batchmark"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A vLLM batch-throughput benchmark, run as a Job; results in its status.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": "batchmark.dev/v1alpha1"},
                                "kind": {"type": "string", "description": "BatchBenchmark"},
                                "metadata": {"type": "object"},  # the API server allows nothing more here
                                "spec": spec_schema(),
                                "status": status,
                            },
                            "x-kubernetes-validations": [
                                {
                                    "rule": "self.metadata.name.size() <= 63",
                                    "message": "metadata.name must be at most 63 characters: it names the Job"
                                    " and labels its pods",
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def _printer_columns() -> list[dict[str, Any]]:
    def column(name: str, kind: str, path: str, description: str, priority: int = 0) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path, "description": description}
        if priority:
            entry["priority"] = priority
        return entry

    return [
        column("Phase", "string", ".status.phase", "Where the benchmark is."),
        column("Model", "string", ".spec.backend.model", "Model benchmarked."),
        column("Batch", "integer", ".spec.backend.batchSize", "Micro-batch size."),
        column("Replicas", "integer", ".status.replicas", "Engine replicas measured at once, over all pods."),
        column("Tok/s", "number", ".status.headline.outputTokensPerSecond", "Output tokens per second (best)."),
        column("Req/s", "number", ".status.headline.requestsPerSecond", "Requests per second (best)."),
        column("P50", "number", ".status.headline.latencyP50Seconds", "Median request latency, seconds."),
        column("Age", "date", ".metadata.creationTimestamp", "Time since creation."),
        column("P99", "number", ".status.headline.latencyP99Seconds", "p99 request latency, seconds.", 1),
        column("Engine", "string", ".spec.backend.engine", "vllm or simulated.", 1),
        column(
            "Best-Batch",
            "integer",
            ".status.headline.batchSize",
            "Batch size of the headline benchmark (a sweep's recommended point).",
            1,
        ),
        column(
            "Queue-Pos",
            "integer",
            ".status.queue.position",
            "While Queued: its position in its Kueue LocalQueue (0: next to be admitted).",
            1,
        ),
    ]


def crd_yaml() -> str:
    """The CRD as YAML, exactly as committed in crds/."""
    # The module's name from before the package had rooms (now resource.api), kept: the CRD stays byte for byte.
    header = "# Generated by `batchmark crd` from batchmark.operator.api; do not edit.\n"
    return header + yaml.dump(custom_resource_definition(), Dumper=_NoAliases, sort_keys=False, width=120)


class _NoAliases(yaml.SafeDumper):
    """Repeated rules are written out each time: a CRD is read by people and tools that expect no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
