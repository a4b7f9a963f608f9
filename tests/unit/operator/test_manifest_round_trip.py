"""`batchmark manifest` and `batchmark run` describe the same benchmark: for any valid `run` command line, the
BatchBenchmark that `manifest` prints goes through the operator (spec -> ConfigMap and Job) and the pod's
`batchmark run` reads back exactly the run config that the laptop's `batchmark run` would have run."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
import yaml

from batchmark.operator.controller import children
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults
from batchmark.runner.cli import build_parser, main
from batchmark.runner.config.arguments import DEFAULT_LINGER_SECONDS
from batchmark.runner.config.data import FileDataConfig
from batchmark.runner.config.load import load_config
from batchmark.runner.config.run import RunConfig
from batchmark.runner.contract import CONFIG_KEY, CONFIG_PATH, ENV_DATA_DIRECTORY
from batchmark.runner.data.sources import data_path

BACKEND = "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated"
BASE = [
    "--backend",
    BACKEND,
    "--data",
    "kind=synthetic_text,prompt_tokens=256,output_tokens=128",
    "--profile",
    "kind=throughput,max_concurrency=20",
    "--constraint",
    "kind=max_requests,count=100",
]
CONFIG_FILE = {
    "name": "from-file",
    "backend": {"model": "m", "engine": "simulated", "batchTimeout": 0.5, "vllmConfig": {"max_num_seqs": 64}},
    "data": {"kind": "synthetic_text", "promptTokens": 64, "outputTokens": 16, "prefixTokens": 8, "seed": 7},
    "profile": {"kind": "poisson", "rate": 4, "warmup": {"requests": 3}, "cooldown": 0.1},
    "constraints": [{"kind": "max_duration", "seconds": 30}, {"kind": "max_error_rate", "rate": 0.5, "window": 10}],
    "sampleRequests": 5,
    "sweep": {"dispatch": ["batch", "continuous"], "warmupRequests": 2},
    "slo": {"requestLatencyP99": 3.0},
    "cost": {"gpuCostPerHour": 1.5},
}

# `run` command lines; together they give every option `run` takes (the last test checks that).
CASES: dict[str, list[str]] = {
    "the seed example": BASE,
    "a name": [*BASE, "--name", "qwen3-throughput"],
    "several constraints": [
        *BASE,
        "--constraint",
        "kind=max_errors,count=3",
        "--constraint",
        "kind=min_requests,count=9",
    ],
    "sample requests": [*BASE, "--sample-requests", "7"],
    "a grid sweep with a warm-up": [
        *BASE,
        "--sweep",
        "batch_size=4,8,16",
        "--sweep",
        "vllm_config.max_num_seqs=16,32",
        "--sweep-warmup",
        "3",
    ],
    "a sweep profile": [*BASE[:4], "--profile", "kind=sweep,sweep_size=4,strategy=poisson", *BASE[6:]],
    "a latency budget in both spellings": [*BASE, "--slo", "request_latency_p99=2,ttftP95=0.5,tpot_max=0.1"],
    "a price": [*BASE, "--gpu-cost-per-hour", "2.5"],
    "a price for two GPUs": [*BASE, "--gpu-cost-per-hour", "2.5", "--gpus", "2"],
    "repeats": [*BASE, "--repeats", "3"],
    "metrics and a Pushgateway": [*BASE, "--metrics-port", "9100", "--pushgateway", "http://gateway:9091"],
    "a metrics linger": [*BASE, "--metrics-port", "9100", "--metrics-linger", "2.5"],
    "no metrics linger": [*BASE, "--metrics-port", "9100", "--metrics-linger", "0"],
    "local-only options": [
        *BASE,
        "--output",
        "results.json",
        "--quiet",
        "--metrics-address",
        "0.0.0.0",
        "--store",
        "results",
        "--baseline",
        "last",
    ],
    "a config file": ["--config", "{config}"],
    "a config file with overrides": [
        "--config",
        "{config}",
        "--backend",
        "batch_size=12",
        "--sweep",
        "batch_size=4,8",
        "--slo",
        "ttft_p99=1",
        "--gpus",
        "4",
    ],
}
# Options of `run` that `manifest` leaves out: they have no meaning in a pod (docs/running.md, `batchmark manifest`).
LOCAL_ONLY = {"--output", "--quiet", "--metrics-address", "--store", "--baseline"}


def arguments(case: str, tmp_path: Path) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG_FILE))
    return [argument.replace("{config}", str(config)) for argument in CASES[case]]


def printed_manifest(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(["manifest", *args]) == 0, capsys.readouterr().err
    document = yaml.safe_load(capsys.readouterr().out)
    assert isinstance(document, dict)
    return document


def pod_config(spec: BatchBenchmarkSpec, name: str, tmp_path: Path) -> tuple[RunConfig, list[str]]:
    """What the pod's `batchmark run` runs: the operator's ConfigMap, read by the Job's command line."""
    owner = children.Owner("benchmarks", name, "uid-1")
    config_map = children.config_map(owner, spec.run_config(name))
    mounted = tmp_path / "mounted-config.yaml"
    mounted.write_text(config_map["data"][CONFIG_KEY])
    command = children.job(owner, spec)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["batchmark", "run"]
    pod_args = [str(mounted) if argument == CONFIG_PATH else argument for argument in command[1:]]
    return load_config(build_parser().parse_args(pod_args)), pod_args


@pytest.mark.parametrize("case", list(CASES))
def test_manifest_of_a_run_command_line_runs_the_same_benchmark_in_the_pod(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = arguments(case, tmp_path)
    laptop = load_config(build_parser().parse_args(["run", *args]))
    document = printed_manifest(args, capsys)
    metadata = document["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["name"] == laptop.name
    spec = OperatorDefaults().apply(BatchBenchmarkSpec.model_validate(document["spec"]))
    # Files and a store folder on the laptop; the pod writes its ConfigMap.
    expected = laptop.model_copy(update={"outputs": [], "store": None, "baseline": None})
    assert spec.run_config(metadata["name"]) == expected
    in_pod, pod_args = pod_config(spec, metadata["name"], tmp_path)
    assert in_pod == expected
    given = build_parser().parse_args(["run", *args])
    if given.metrics_port is not None:
        assert pod_args[pod_args.index("--metrics-port") + 1] == str(given.metrics_port)
    if given.pushgateway is not None:
        assert pod_args[pod_args.index("--pushgateway") + 1] == given.pushgateway
    # The pod lingers as long as the laptop would: what was given, else the same default.
    linger = DEFAULT_LINGER_SECONDS if given.metrics_linger is None else given.metrics_linger
    assert float(pod_args[pod_args.index("--metrics-linger") + 1]) == linger


def test_the_cases_give_every_option_of_run() -> None:
    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    run = commands.choices["run"]
    options = {option for action in run._actions for option in action.option_strings if option.startswith("--")}
    given = {argument for case in CASES.values() for argument in case if argument.startswith("--")}
    assert options - {"--help"} - given == set(), "add a case for each new option of run"
    assert given >= LOCAL_ONLY


# What the user chose is what the spec holds: the defaults come back from the models (and the CRD), so a spec
# for the real engine carries no simulated engine's cost model, and a config file's keys are the spec's.
def test_the_spec_holds_only_what_was_chosen(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*BASE, "--backend", "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,engine=vllm", "--metrics-linger", "0"]
    assert printed_manifest(args, capsys)["spec"] == {
        "backend": {"kind": "vllm_python_batch", "model": "Qwen/Qwen3-0.6B", "engine": "vllm"},
        "data": {"kind": "synthetic_text", "promptTokens": 256, "outputTokens": 128},
        "profile": {"kind": "throughput", "maxConcurrency": 20},
        "constraints": [{"kind": "max_requests", "count": 100}],
        "metrics": {"lingerSeconds": 0.0},
    }


def test_a_config_file_gives_the_spec_its_keys_and_nothing_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = printed_manifest(arguments("a config file", tmp_path), capsys)["spec"]
    assert isinstance(spec, dict)
    chosen = {key: value for key, value in CONFIG_FILE.items() if key != "name"}
    profile = chosen["profile"]
    assert isinstance(profile, dict)
    # A bare number is written in the form the runner reads it as (below 1: a fraction of the run).
    assert spec == {**chosen, "profile": {**profile, "cooldown": {"fraction": 0.1}}}


# The user's data reaches the pod through a volume only: manifest writes data.path as the pod reads it (under
# the volume, where the operator points BATCHMARK_DATA_DIR), and the pod reads the very file the laptop reads.
PROMPTS = '{"prompt": "Why is the sky blue?"}\n{"prompt": "Count to three."}\n'


def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "corpus" / "prompts.jsonl"
    path.parent.mkdir()
    path.write_text(PROMPTS)
    return path


def file_data_args(path: str) -> list[str]:
    return [*BASE[:2], "--data", f"kind=file,path={path},samples=2", *BASE[4:], "--name", "mine"]


def test_a_file_on_this_machine_without_a_volume_is_refused_with_the_command_that_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = prompts_file(tmp_path)
    assert main(["manifest", *file_data_args(str(path))]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    message = " ".join(captured.err.split())
    assert f"--data: path: '{path}'" in message
    assert f"kubectl create configmap mine-data --from-file={path}" in message
    assert "--data-volume configMap=mine-data" in message
    assert "claimName=" in message


def pod_reads(spec: BatchBenchmarkSpec, in_pod: RunConfig, mount: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the pod's runner opens, with ``mount`` standing for the data volume's folder in the pod."""
    pod = children.job(children.Owner("benchmarks", "mine", "uid-1"), spec)["spec"]["template"]["spec"]
    assert spec.data_volume is not None
    source = (
        {"configMap": {"name": spec.data_volume.config_map}}
        if spec.data_volume.config_map
        else {"persistentVolumeClaim": {"claimName": spec.data_volume.claim_name, "readOnly": True}}
    )
    assert {"name": "data", **source} in pod["volumes"]
    assert {"name": ENV_DATA_DIRECTORY, "value": spec.data_volume.mount_path} in pod["containers"][0]["env"]
    monkeypatch.setenv(ENV_DATA_DIRECTORY, str(mount))
    assert isinstance(in_pod.data, FileDataConfig)
    return data_path(in_pod.data.path)


@pytest.mark.parametrize(
    ("volume", "given", "in_pod"),
    [
        ("configMap=prompts", "{file}", "prompts.jsonl"),  # kubectl create configmap --from-file keys it by name
        ("configMap=prompts,mountPath=/prompts", "corpus/prompts.jsonl", "prompts.jsonl"),
        ("claimName=corpus", "corpus/prompts.jsonl", "corpus/prompts.jsonl"),  # relative to the claim's root
        ("claimName=corpus,mountPath=/mnt/c", "/mnt/c/corpus/prompts.jsonl", "corpus/prompts.jsonl"),
    ],
)
def test_a_data_volume_carries_the_file_into_the_pod(
    volume: str,
    given: str,
    in_pod: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    laptop_file = prompts_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = file_data_args(given.replace("{file}", str(laptop_file)))
    document = printed_manifest([*args, "--data-volume", volume], capsys)
    spec = OperatorDefaults().apply(BatchBenchmarkSpec.model_validate(document["spec"]))
    expected_volume = dict(item.split("=") for item in volume.split(","))
    assert document["spec"]["dataVolume"] == expected_volume  # type: ignore[index]
    assert document["spec"]["data"]["path"] == in_pod  # type: ignore[index]
    # The same benchmark but for where the file is read from.
    laptop = load_config(build_parser().parse_args(["run", *args]))
    assert isinstance(laptop.data, FileDataConfig)
    expected = laptop.model_copy(update={"data": laptop.data.model_copy(update={"path": in_pod})})
    pod, _ = pod_config(spec, "mine", tmp_path)
    assert pod == expected
    # The pod's folder as the volume fills it: a ConfigMap's keys side by side, a claim's tree as it is.
    mount = tmp_path / "mounted"
    if "configMap" in volume:
        mount.mkdir()
        shutil.copy(laptop_file, mount / laptop_file.name)
    else:
        mount.symlink_to(tmp_path)  # the claim holds corpus/prompts.jsonl at its root
    assert pod_reads(spec, pod, mount, monkeypatch).read_text() == laptop_file.read_text()


def test_a_model_cache_is_mounted_as_the_pods_hf_home(capsys: pytest.CaptureFixture[str]) -> None:
    document = printed_manifest([*BASE, "--model-cache", "claimName=models,mountPath=/cache"], capsys)
    assert document["spec"]["modelCache"] == {"claimName": "models", "mountPath": "/cache"}  # type: ignore[index]
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    pod = children.job(children.Owner("benchmarks", "mine", "uid-1"), spec)["spec"]["template"]["spec"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]
    assert {"name": "HF_HOME", "value": "/cache"} in pod["containers"][0]["env"]


def test_a_hub_dataset_needs_no_data_volume(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*BASE[:2], "--data", "kind=dataset,path=org/prompts", *BASE[4:]]
    spec = printed_manifest([*args, "--model-cache", "claimName=models"], capsys)["spec"]
    assert spec["data"] == {"kind": "dataset", "path": "org/prompts"}  # type: ignore[index]
    assert "dataVolume" not in spec  # type: ignore[operator]


def test_every_option_of_manifest_beyond_runs_is_tested() -> None:
    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    own = {option for action in commands.choices["manifest"]._actions for option in action.option_strings}
    run = {option for action in commands.choices["run"]._actions for option in action.option_strings}
    assert own - run == {"--namespace", "-n", "--image", "--data-volume", "--model-cache"}
