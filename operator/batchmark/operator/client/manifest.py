"""``batchmark manifest``: the BatchBenchmark that runs on a cluster what ``batchmark run`` runs here.

The spec holds what the user chose (the options given, the keys of --config), not every default: the models
and the CRD give the defaults back, so it runs the same benchmark. The user's data reaches the pod only through
a volume (--data-volume), and data.path is written as the pod reads it, under that volume.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import shlex
import sys
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import ErrorDetails
from rich.console import Console

from batchmark.operator.client.names import dns_label, dns_subdomain
from batchmark.operator.controller.children import SHM_PATH
from batchmark.operator.resource.api import API_VERSION, KIND, BatchBenchmarkSpec, DataVolume, ModelCache
from batchmark.runner.config.data import DatasetDataConfig, FileDataConfig, ShareGptDataConfig
from batchmark.runner.config.load import UsageError, load_config
from batchmark.runner.config.run import RunConfig
from batchmark.runner.contract import CONFIG_DIRECTORY, EXIT_USAGE
from batchmark.runner.observe.console import print_error

# What a pod runs as `batchmark run` options; --output, --store, --baseline, --quiet and --metrics-address are the
# laptop's (README, `batchmark manifest`), and the pod's own are set by the operator.
_BENCHMARK_FIELDS = {"backend", "data", "profile", "constraints", "sample_requests", "sweep", "slo", "cost", "repeats"}
# A ConfigMap's keys, which become the mounted files' names.
_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
# pydantic's words where they say less than these (the only pattern is mountPath's).
_VOLUME_MESSAGES = {"extra_forbidden": "unknown key", "string_pattern_mismatch": "must be an absolute path"}
_Volume = TypeVar("_Volume", DataVolume, ModelCache)


def manifest(config: RunConfig, args: argparse.Namespace) -> dict[str, Any]:
    """The BatchBenchmark for this run config and the pod-relevant run options."""
    dns_label("--name", config.name, "a BatchBenchmark")
    if args.namespace:
        dns_label("--namespace", args.namespace, "a namespace")
    spec: dict[str, Any] = config.model_dump(
        mode="json", by_alias=True, exclude_unset=True, exclude_none=True, include=_BENCHMARK_FIELDS
    )
    if not spec.get("slo"):
        spec.pop("slo", None)  # no budget: the spec leaves it out
    data_volume = _volume_option("--data-volume", args.data_volume, DataVolume)
    model_cache = _volume_option("--model-cache", args.model_cache, ModelCache)
    _mount_paths_apart(data_volume, model_cache)
    pod_path = _data_path_in_pod(config, data_volume)
    if pod_path is not None:
        spec["data"]["path"] = pod_path
    if data_volume is not None:
        spec["dataVolume"] = data_volume.model_dump(by_alias=True, exclude_unset=True, exclude_none=True)
    if model_cache is not None:
        spec["modelCache"] = model_cache.model_dump(by_alias=True, exclude_unset=True, exclude_none=True)
    if args.image is not None:
        spec["image"] = args.image
    metrics: dict[str, Any] = {}
    if args.metrics_port is not None:
        metrics["port"] = args.metrics_port
    if args.pushgateway:
        metrics["pushgateway"] = args.pushgateway
    if args.metrics_linger is not None:
        metrics["lingerSeconds"] = args.metrics_linger
    if metrics:
        spec["metrics"] = metrics
    try:
        BatchBenchmarkSpec.model_validate(spec)
    except ValidationError as error:  # e.g. a --pushgateway that is not a URL
        problem = error.errors()[0]
        raise UsageError(
            f"{'.'.join(map(str, problem['loc']))}: {problem['msg'].removeprefix('Value error, ')}"
        ) from None
    metadata: dict[str, Any] = {"name": config.name}
    if args.namespace:
        metadata["namespace"] = args.namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _volume_option(option: str, text: str | None, model: type[_Volume]) -> _Volume | None:
    """``configMap=NAME,mountPath=/data`` (either spelling) as the spec's model, checked. The values are names and
    paths, read as written (not as YAML, which would make ``123`` a number and ``[x]`` a list)."""
    if text is None:
        return None
    if not text.strip():
        raise UsageError(f"{option}: empty value; expected key=value,...")
    fields: dict[str, str] = {}
    spelling: dict[str, str] = {}
    for item in (part for part in text.split(",") if part.strip()):
        key, separator, value = item.partition("=")
        key = key.strip()
        if not separator or not key:
            raise UsageError(f"{option}: {item!r} is not key=value")
        name = to_camel(to_snake(key))
        if name in spelling:
            raise UsageError(f"{option}: {name}: given twice, as {spelling[name]} and {key}")
        spelling[name] = key
        fields[name] = value.strip()
    try:
        volume = model.model_validate(fields)
    except ValidationError as error:
        raise UsageError(f"{option}: {'; '.join(map(_volume_problem, error.errors()))}") from None
    for field, what in (("config_map", "a ConfigMap"), ("claim_name", "a PersistentVolumeClaim")):
        source = getattr(volume, field, None)
        if source is not None:
            dns_subdomain(f"{option}: {to_camel(field)}", source, what)
    mount_path = volume.mount_path
    if ".." in PurePosixPath(mount_path).parts or mount_path.strip("/") == "":
        raise UsageError(f"{option}: mountPath: {mount_path!r} must name a folder below / without '..'")
    return volume


def _volume_problem(problem: ErrorDetails) -> str:
    field = ".".join(map(str, problem["loc"]))
    message = _VOLUME_MESSAGES.get(problem["type"]) or problem["msg"].removeprefix("Value error, ")
    if problem["type"] != "extra_forbidden" and not isinstance(problem["input"], dict):
        message += f" (got {problem['input']!r})"
    return f"{field}: {message}" if field else message


def _mount_paths_apart(data_volume: DataVolume | None, model_cache: ModelCache | None) -> None:
    """The volumes must not hide the pod's config, its shared memory or each other."""
    taken = [("the runner's config", CONFIG_DIRECTORY), ("shared memory", SHM_PATH)]
    if model_cache is not None:
        _mount_path_free("--model-cache", model_cache.mount_path, taken)
        taken.append(("--model-cache", model_cache.mount_path))
    if data_volume is not None:
        _mount_path_free("--data-volume", data_volume.mount_path, taken)


def _mount_path_free(option: str, mount_path: str, taken: list[tuple[str, str]]) -> None:
    path = posixpath.normpath(mount_path)
    for what, other in taken:
        if posixpath.commonpath([path, other]) in (path, other):
            raise UsageError(f"{option}: mountPath: {mount_path!r} overlaps {other} ({what}); mount it elsewhere")


def _data_path_in_pod(config: RunConfig, volume: DataVolume | None) -> str | None:
    """data.path as the pod reads it (relative: under the data volume); None for data that reads no file."""
    data = config.data
    if not isinstance(data, FileDataConfig | ShareGptDataConfig | DatasetDataConfig):
        if volume is not None:
            raise UsageError(f"--data-volume: the data is {data.kind}, which reads no file; leave --data-volume out")
        return None
    given = data.path
    local = Path(given).expanduser()
    if isinstance(data, DatasetDataConfig) and volume is None and not _is_local(given, local):
        return given  # a Hugging Face hub id: the pod downloads it (into --model-cache, where given)
    if volume is None:
        suggested = f"{config.name}-data"
        raise UsageError(
            f"--data: path: {given!r} is on this machine, where the pod cannot read it: give --data-volume"
            f" configMap={suggested} after `kubectl create configmap {suggested} --from-file={_shell(given)}` (at"
            " most 1 MiB), or --data-volume claimName=CLAIM for a PersistentVolumeClaim holding it"
        )
    if volume.config_map is not None:
        return _config_map_key(given, local)
    return _path_on_claim(given, volume.mount_path)


def _is_local(given: str, local: Path) -> bool:
    """A path rather than a hub id (which reads as a relative path too): it exists here, or is written as one."""
    return local.exists() or local.is_absolute() or given.startswith((".", "~"))


def _config_map_key(given: str, local: Path) -> str:
    """The file's name in the ConfigMap (`kubectl create configmap --from-file` keys a file by its name, a folder's
    files by theirs): the mount holds them side by side."""
    if local.is_dir():
        return "."
    key = local.name
    if not _CONFIG_MAP_KEY.fullmatch(key):
        raise UsageError(
            f"--data: path: {given!r}: a ConfigMap names its files by keys of letters, digits, '-', '_' and '.':"
            " rename the file, or use --data-volume claimName=CLAIM"
        )
    return key


def _path_on_claim(given: str, mount_path: str) -> str:
    """The path under the claim's root: as given when relative, from the mount path when absolute under it."""
    path = PurePosixPath(posixpath.normpath(given))
    if path.is_absolute() or given.startswith("~"):
        mount = PurePosixPath(posixpath.normpath(mount_path))
        if not path.is_relative_to(mount):
            raise UsageError(
                f"--data: path: {given!r} is not under the data volume's mountPath {mount_path!r}: give it"
                " relative to the claim's root"
            )
        path = path.relative_to(mount)
    if ".." in path.parts:
        raise UsageError(f"--data: path: {given!r} leaves the data volume: give it relative to the claim's root")
    return str(path)


def _shell(text: str) -> str:
    """Text to paste into a shell, on one line."""
    return shlex.quote(text) if text.isprintable() else repr(text)


def manifest_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        config = load_config(args)
        document = manifest(config, args)
    except UsageError as error:
        print_error(console, "manifest", str(error))
        return EXIT_USAGE
    sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    return 0
