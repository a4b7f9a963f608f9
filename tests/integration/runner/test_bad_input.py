"""Every bad input to `batchmark run`, `report` and `compare`: exit code 2 before any work, one message that names
the field, no traceback, nothing written, no process started.

Most cases run the command line in this process (milliseconds each; an exception would fail the test as a
traceback would); a few run the installed program to show the same from the outside.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from batchmark.operator.client import fetch
from batchmark.runner.engines.engine_args import vllm_engine_arg_names
from tests.cli import read_results, run_in_process
from tests.integration.runner.harness import DATA, assert_clean, backend, batchmark, children, run_args

pytestmark = pytest.mark.integration

NESTED = 5000  # beyond Python's recursion limit for every parser on the way


def assert_no_dump(message: str) -> None:
    """The message is batchmark's own: no traceback, no library's validation dump."""
    assert "Traceback" not in message, message
    assert "errors.pydantic.dev" not in message, message
    assert "input_value=" not in message, message


def nested_json(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def config_file(tmp_path: Path, **changes: object) -> Path:
    config: dict[str, object] = {
        "backend": {"kind": "vllm_python_batch", "model": "m", "engine": "simulated", "simulation": {"timeScale": 0}},
        "data": {"kind": "synthetic_text", "promptTokens": 64, "outputTokens": 16},
        "profile": {"kind": "throughput", "maxConcurrency": 8},
        "constraints": [{"kind": "max_requests", "count": 20}],
    }
    config.update(changes)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


# Each case: the arguments after `run` (given tmp_path) and what the message must name.
RunCase = Callable[[Path], list[str]]


def model_with_heads(folder: Path, heads: int) -> Path:
    """A model folder whose config.json gives its attention heads (all the check reads)."""
    model = folder / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"num_attention_heads": heads}), encoding="utf-8")
    return model


RUN_CASES: dict[str, tuple[RunCase, list[str]]] = {
    "negative data seed": (lambda t: run_args(extra=["--data", DATA + ",seed=-1"]), ["--data", "seed"]),
    "negative poisson seed": (
        lambda t: run_args(profile="kind=poisson,rate=5,seed=-3"),
        ["--profile", "seed"],
    ),
    "huge error-rate window": (
        lambda t: run_args(
            extra=[
                "--constraint",
                "kind=max_requests,count=5",
                "--constraint",
                "kind=max_error_rate,rate=0.5,window=1e30",
            ]
        ),
        ["--constraint", "window"],
    ),
    "enormous error-rate window": (
        lambda t: run_args(
            extra=[
                "--constraint",
                "kind=max_requests,count=5",
                "--constraint",
                "kind=max_error_rate,rate=0.5,window=1000000000000",
            ]
        ),
        ["--constraint", "window"],
    ),
    "samples=10**12": (lambda t: run_args(extra=["--data", DATA + ",samples=1000000000000"]), ["--data", "samples"]),
    "infinite linger": (lambda t: run_args(extra=["--metrics-linger", "inf"]), ["--metrics-linger"]),
    "enormous linger": (lambda t: run_args(extra=["--metrics-linger", "1e300"]), ["--metrics-linger"]),
    "NaN linger": (lambda t: run_args(extra=["--metrics-linger", "nan"]), ["--metrics-linger"]),
    "infinite batch_timeout": (lambda t: run_args(backend(batch_timeout=".inf")), ["--backend", "batch_timeout"]),
    "enormous batch_timeout": (lambda t: run_args(backend(batch_timeout="1e300")), ["--backend", "batch_timeout"]),
    "infinite time_scale": (lambda t: run_args(backend(time_scale=".inf")), ["--backend", "time_scale"]),
    "zero repeats": (lambda t: run_args(extra=["--repeats", "0"]), ["--repeats", "greater than or equal to 1"]),
    "too many repeats": (lambda t: run_args(extra=["--repeats", "31"]), ["--repeats", "less than or equal to 30"]),
    "repeats not a number": (lambda t: run_args(extra=["--repeats", "three"]), ["--repeats"]),
    "repeats times the sweep over the bound": (
        lambda t: run_args(
            extra=["--repeats", "30", "--sweep", "batch_size=" + ",".join(str(n) for n in range(1, 11))]
        ),
        ["--repeats", "10 benchmarks x 30 repeats = 300"],
    ),
    "batch_size auto with reversed bounds": (
        lambda t: run_args(extra=["--sweep", "batch_size=auto:9-3"]),
        ["--sweep", "min (9) is greater than max (3)"],
    ),
    "batch_size auto from zero": (
        lambda t: run_args(extra=["--sweep", "batch_size=auto:0-8"]),
        ["--sweep", "batch_size_search.min"],
    ),
    "batch_size auto beyond the bound": (
        lambda t: run_args(extra=["--sweep", "batch_size=auto:1-99999999"]),
        ["--sweep", "batch_size_search.max"],
    ),
    "batch_size auto misspelt": (
        lambda t: run_args(extra=["--sweep", "batch_size=automatic"]),
        ["--sweep", "'automatic' is not auto or auto:LOW-HIGH"],
    ),
    "batch_size auto with a second field": (
        lambda t: run_args(extra=["--sweep", "batch_size=auto", "--sweep", "dispatch=batch,continuous"]),
        ["--sweep", "searches the batch size alone"],
    ),
    "batch_size auto with the sweep profile": (
        lambda t: run_args(profile="kind=sweep,sweep_size=3", extra=["--sweep", "batch_size=auto"]),
        ["--sweep", "use a profile other than kind=sweep"],
    ),
    "step_time_noise above 1": (
        lambda t: run_args(backend(**{"simulation.step_time_noise": "2"})),
        ["--backend", "step_time_noise"],
    ),
    "negative noise_seed": (
        lambda t: run_args(backend(**{"simulation.noise_seed": "-1"})),
        ["--backend", "noise_seed"],
    ),
    "NaN step cost": (
        lambda t: run_args(backend(**{"simulation.step_fixed_seconds": ".nan"})),
        ["--backend", "step_fixed_seconds"],
    ),
    "infinite prompt tokens": (
        lambda t: run_args(extra=["--data", "kind=synthetic_text,prompt_tokens=.inf,output_tokens=4"]),
        ["--data", "prompt_tokens"],
    ),
    "prompt beyond any context": (
        lambda t: run_args(extra=["--data", "kind=synthetic_text,prompt_tokens=20000000,output_tokens=4"]),
        ["--data", "prompt_tokens"],
    ),
    "output beyond any context": (
        lambda t: run_args(extra=["--data", "kind=synthetic_text,prompt_tokens=4,output_tokens=1000000000"]),
        ["--data", "output_tokens"],
    ),
    "prefix and prompt beyond any context": (
        lambda t: run_args(
            extra=["--data", "kind=synthetic_text,prompt_tokens=6000000,output_tokens=1,prefix_tokens=6000000"]
        ),
        ["--data", "prefix_tokens + prompt_tokens + output_tokens"],
    ),
    "infinite length stdev": (
        lambda t: run_args(extra=["--data", DATA + ",prompt_tokens_stdev=.inf"]),
        ["--data", "prompt_tokens_stdev"],
    ),
    "infinite rate": (lambda t: run_args(profile="kind=constant,rate=.inf"), ["--profile", "rate"]),
    "NaN duration": (lambda t: run_args(constraint="kind=max_duration,seconds=.nan"), ["--constraint", "seconds"]),
    "warm-up and cool-down requests cover the count": (
        lambda t: run_args(profile="kind=throughput,warmup.requests=30,cooldown.requests=10"),
        ["profile.warmup", "nothing would be measured"],
    ),
    "warm-up and cool-down fractions cover the count": (
        lambda t: run_args(profile="kind=throughput,warmup=0.6,cooldown=0.5"),
        ["profile.warmup", "nothing would be measured"],
    ),
    "warm-up seconds cover the duration": (
        lambda t: run_args(profile="kind=throughput,warmup.seconds=5", constraint="kind=max_duration,seconds=5"),
        ["profile.warmup", "nothing would be measured"],
    ),
    "empty Pushgateway": (lambda t: run_args(extra=["--pushgateway", ""]), ["--pushgateway"]),
    "Pushgateway without scheme": (lambda t: run_args(extra=["--pushgateway", "localhost:9091"]), ["--pushgateway"]),
    "Pushgateway not http": (lambda t: run_args(extra=["--pushgateway", "ftp://host/x"]), ["--pushgateway"]),
    "Pushgateway bad port": (lambda t: run_args(extra=["--pushgateway", "http://host:99999"]), ["--pushgateway"]),
    "zero max_num_seqs": (
        lambda t: run_args(backend(**{"vllm_config.max_num_seqs": 0})),
        ["--backend", "vllm_config", "max_num_seqs"],
    ),
    "negative max_num_batched_tokens": (
        lambda t: run_args(backend(**{"vllm_config.max_num_batched_tokens": -4})),
        ["--backend", "vllm_config", "max_num_batched_tokens"],
    ),
    "GPU memory share above 1": (
        lambda t: run_args(backend(**{"vllm_config.gpu_memory_utilization": 1.5})),
        ["--backend", "vllm_config", "gpu_memory_utilization"],
    ),
    "zero tensor parallelism": (
        lambda t: run_args(backend(**{"vllm_config.tensor_parallel_size": 0})),
        ["--backend", "vllm_config", "tensor_parallel_size"],
    ),
    "tensor parallelism not dividing the model's heads": (
        lambda t: run_args(backend(model=str(model_with_heads(t, 14)), **{"vllm_config.tensor_parallel_size": 4})),
        ["--backend", "vllm_config.tensor_parallel_size (4)", "14 attention heads"],
    ),
    "simulated max_model_len the engine cannot use": (
        lambda t: run_args(backend(**{"vllm_config.max_model_len": -1})),
        ["--backend", "vllm_config.max_model_len"],
    ),
    "typo in vllm_config": (
        lambda t: run_args(backend(**{"vllm_config.max_num_seq": 8})),
        ["--backend", "vllm_config.max_num_seq", "did you mean max_num_seqs"],
    ),
    "one key twice in a spec, two spellings": (
        lambda t: run_args(backend() + ",batchSize=64"),
        ["--backend", "batch_size", "given twice", "batchSize"],
    ),
    "one key twice in a config file, two spellings": (
        lambda t: ["run", "--config", str(config_file(t, name="x", **{"sampleRequests": 3, "sample_requests": 4}))],
        ["--config", "sample_requests", "given twice"],
    ),
    "config file not UTF-8": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", b"backend: {model: \xff\xfe}\n"))],
        ["--config", "UTF-8"],
    ),
    "deeply nested spec": (lambda t: run_args(nested_json(NESTED)), ["--backend", "nested"]),
    "deeply nested YAML config": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", "[" * NESTED + "]" * NESTED))],
        ["--config", "nested"],
    ),
    "deeply nested JSON config": (
        lambda t: ["run", "--config", str(write(t / "run.json", nested_json(NESTED)))],
        ["--config", "nested"],
    ),
    "nested config just past the limit": (
        lambda t: run_args(backend() + ",vllm_config=" + nested_json(40).replace('"a"', '"compilation_config"')),
        ["--backend", "nested more than 32 levels"],
    ),
    "non-string key in a config file": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", "backend: {1: 2}\n"))],
        ["--config", "backend", "key 1 is not a string"],
    ),
    "bad BATCHMARK_MP_CONTEXT": (lambda t: run_args(), ["BATCHMARK_MP_CONTEXT"]),
    "output is a directory": (
        lambda t: run_args(outputs=[t / "out.json", t / "d.json"]),
        ["--output", "d.json", "is a directory"],
    ),
    "output in /proc": (lambda t: run_args(outputs=[Path("/proc/x.json")]), ["--output", "/proc/x.json"]),
    "output under a file": (
        lambda t: run_args(outputs=[write(t / "file.json", "{}") / "r.json"]),
        ["--output", "is not a directory"],
    ),
    "output replaces the config": (
        lambda t: ["run", "--config", str(config_file(t)), "--output", str(t / "run.yaml")],
        ["--output", "run.yaml", "also an input"],
    ),
    "output of an unknown kind": (lambda t: run_args(outputs=[t / "r.txt"]), ["--output", "r.txt"]),
    # Sizes that multiply into a run no machine holds: refused before any work, not a MemoryError after it.
    "sweep warm-up of 10**12 requests": (
        lambda t: run_args(extra=["--sweep", "batch_size=4,8", "--sweep-warmup", "1000000000000"]),
        ["--sweep-warmup", "warmup_requests"],
    ),
    "sweep profile of 10**12 benchmarks": (
        lambda t: run_args(profile="kind=sweep,sweep_size=1000000000000"),
        ["--profile", "sweep_size"],
    ),
    "sweep profile of 10**12 benchmarks with a sweep": (
        lambda t: run_args(profile="kind=sweep,sweep_size=1000000000000", extra=["--sweep", "batch_size=4,8"]),
        ["--profile", "sweep_size"],
    ),
    "10**12 sample requests": (lambda t: run_args(extra=["--sample-requests", "1000000000000"]), ["--sample-requests"]),
    "eleven constraints": (
        lambda t: run_args(extra=[arg for _ in range(10) for arg in ("--constraint", "kind=max_errors,count=1")]),
        ["--constraint", "at most 10"],
    ),
    "YAML alias bomb in a config file": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", alias_bomb()))],
        ["--config", "run.yaml", "aliases"],
    ),
    "YAML alias that holds itself": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", "backend: &loop {model: m, simulation: *loop}\n"))],
        ["--config", "run.yaml", "itself"],
    ),
    "config file beyond 1 MiB": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", "# padding\n" * 120_000))],
        ["--config", "run.yaml", "MiB"],
    ),
    # Two values for one thing: refused, never the last one silently kept.
    "one key twice in a YAML mapping": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", config_text(t) + "name: a\nname: b\n"))],
        ["--config", "name", "twice"],
    ),
    "one key twice in a nested YAML mapping": (
        lambda t: [
            "run",
            "--config",
            str(write(t / "run.yaml", config_text(t).replace("  model: m\n", "  model: m\n  model: n\n"))),
        ],
        ["--config", "model", "twice"],
    ),
    "one key twice in a JSON object": (
        lambda t: ["run", "--config", str(write(t / "run.json", '{"name": "a", "name": "b"}'))],
        ["--config", "name", "twice"],
    ),
    "one field swept twice": (
        lambda t: run_args(extra=["--sweep", "batch_size=4,8", "--sweep", "batch_size=16"]),
        ["--sweep", "batch_size", "twice"],
    ),
    "one field swept twice in two spellings": (
        lambda t: run_args(extra=["--sweep", "batch_size=4,8", "--sweep", "batchSize=16"]),
        ["--sweep", "batch_size", "twice"],
    ),
    "one vLLM argument swept twice": (
        lambda t: run_args(extra=["--sweep", "vllm_config.max_num_seqs=4", "--sweep", "vllm_config.max_num_seqs=8"]),
        ["--sweep", "vllm_config.max_num_seqs", "twice"],
    ),
    "one SLO statistic in two spellings": (
        lambda t: run_args(extra=["--slo", "ttft_p95=1,ttftP95=2"]),
        ["--slo", "ttft_p95", "ttftP95", "same"],
    ),
    "one SLO statistic by two names": (
        lambda t: run_args(extra=["--slo", "tpot_p50=1,time_per_output_token_median=2"]),
        ["--slo", "tpot_p50", "time_per_output_token_median", "same"],
    ),
    "an SLO on TTFT with vLLM's per-request stats turned off": (
        lambda t: run_args(
            backend(engine="vllm", **{"vllm_config.disable_log_stats": True}), extra=["--slo", "ttft_p95=1"]
        ),
        ["--slo", "ttft_p95", "disable_log_stats=true"],
    ),
    "an SLO on TPOT with a sweep that turns vLLM's per-request stats off": (
        lambda t: run_args(
            backend(engine="vllm"), extra=["--sweep", "vllm_config.disable_log_stats=false,true", "--slo", "tpot_p99=1"]
        ),
        ["--slo", "tpot_p99", "disable_log_stats=true"],
    ),
    # One line naming the option and the field, never a library's dump.
    "swept value beyond its bound": (
        lambda t: run_args(extra=["--sweep", "batch_timeout=1e300,1"]),
        ["--sweep", "batch_timeout", "1e+300"],
    ),
    "swept vLLM argument the engine refuses": (
        lambda t: run_args(extra=["--sweep", "vllm_config.max_num_seqs=0,8"]),
        ["--sweep", "vllm_config.max_num_seqs", "0"],
    ),
    "swept request format that is not text": (
        lambda t: run_args(extra=["--sweep", "request_format=[1,2]"]),
        ["--sweep", "request_format"],
    ),
    "no engine replica": (lambda t: run_args(backend(replicas=0)), ["--backend", "replicas", "0"]),
    "more engine replicas than the bound": (lambda t: run_args(backend(replicas=65)), ["--backend", "replicas", "64"]),
    "engine replicas that are not a whole number": (
        lambda t: run_args(backend(replicas=1.5)),
        ["--backend", "replicas", "1.5"],
    ),
    "a swept replica count of none": (
        lambda t: run_args(extra=["--sweep", "replicas=1,0"]),
        ["--sweep", "replicas", "0"],
    ),
    "more vLLM replicas than this machine's CPUs": (
        lambda t: run_args(backend(engine="vllm", replicas=64)),
        ["--backend", "replicas", "64 replicas"],
    ),
    "absurd GPU price": (lambda t: run_args(extra=["--gpu-cost-per-hour", "1e308"]), ["--gpu-cost-per-hour"]),
    "infinite GPU price": (lambda t: run_args(extra=["--gpu-cost-per-hour", "inf"]), ["--gpu-cost-per-hour"]),
    "10**21 GPUs": (
        lambda t: run_args(extra=["--gpu-cost-per-hour", "2", "--gpus", "1000000000000000000000"]),
        ["--gpus"],
    ),
    "store in an S3 bucket whose name is not one": (
        lambda t: run_args(extra=["--store", "s3://Bad_Bucket/x"]),
        ["--store", "'Bad_Bucket' is not a bucket's name"],
    ),
    "store in S3 with the credentials in its URL": (
        lambda t: run_args(extra=["--store", "s3://AKIAEXAMPLE:secret@bucket/x"]),
        ["--store", "an s3:// URL carries no credentials", "AWS_SECRET_ACCESS_KEY"],
    ),
    "store that is a file": (
        lambda t: run_args(extra=["--store", str(write(t / "f", "x"))]),
        ["--store", "is not a folder"],
    ),
    "store under /proc": (lambda t: run_args(extra=["--store", "/proc/runs"]), ["--store", "/proc/runs", "cannot"]),
    "store named by nothing": (lambda t: run_args(extra=["--store", " "]), ["--store", "names no folder"]),
    "baseline without a store": (lambda t: run_args(extra=["--baseline", "last"]), ["--baseline", "give --store"]),
    "baseline named by nothing": (
        lambda t: run_args(extra=["--baseline", "", "--store", str(t / "s")]),
        ["--baseline", "at least 1 character"],
    ),
}


def alias_bomb(levels: int = 9) -> str:
    """ "Billion laughs": each level refers to the one before ten times; under 1 kB, 10**9 nodes expanded."""
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]" for level in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def config_text(tmp_path: Path) -> str:
    return config_file(tmp_path).read_text()


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_run_refuses_bad_input(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_args, named = RUN_CASES[case]
    (tmp_path / "d.json").mkdir()
    if case == "bad BATCHMARK_MP_CONTEXT":
        monkeypatch.setenv("BATCHMARK_MP_CONTEXT", "threads")
    args = make_args(tmp_path)
    before = sorted(path.name for path in tmp_path.iterdir())
    # The session's own servers (a control plane started by another test's fixture) are children too.
    children_before = set(children(os.getpid()))
    finished = run_in_process(args)
    assert finished.code == 2
    message = finished.message
    for text in named:
        assert text in message, message
    assert_no_dump(message)
    assert sorted(path.name for path in tmp_path.iterdir()) == before  # nothing written
    assert set(children(os.getpid())) - children_before == set()  # no engine was started


def test_the_program_refuses_bad_input_from_the_outside(tmp_path: Path) -> None:
    output = tmp_path / "r.json"
    outcome = batchmark(tmp_path, run_args(backend(**{"vllm_config.max_num_seqs": 0}), outputs=[output]))
    assert outcome.code == 2
    assert "--backend: vllm_config: max_num_seqs: Input should be greater than or equal to 1" in outcome.message
    assert_clean(outcome)
    assert not output.exists()


def saved_results(tmp_path: Path) -> Path:
    """A real results file, from a short run."""
    path = tmp_path / "r.json"
    finished = run_in_process(run_args(outputs=[path]))
    assert finished.code == 0, finished.stderr
    return path


def altered(
    tmp_path: Path, results: Path, name: str, model: str | None = None, later: float = 0.0, unplaced: bool = False
) -> Path:
    """A copy of a results file as another run of it would be: its own id, and what the case changes."""
    document = json.loads(results.read_text())
    document["run_id"] = "another"
    if model is not None:
        document["engine"]["model"] = model
    for benchmark in document["benchmarks"]:
        benchmark["started_at"] += later
        if unplaced:
            del benchmark["measured_from"]
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


REPORT_CASES: dict[str, tuple[Callable[[Path, Path], list[str]], list[str]]] = {
    "report over its input": (lambda t, r: ["report", str(r), "-o", str(r)], ["--output", "also an input"]),
    "report over its input through a link": (
        lambda t, r: ["report", str(r), "-o", str(link(t / "link.html", r))],
        ["--output", "link.html", "also an input"],
    ),
    "report as CSV": (lambda t, r: ["report", str(r), "-o", str(t / "r.csv")], ["--output", "r.csv", ".html"]),
    "report into a directory": (lambda t, r: ["report", str(r), "-o", str(t / "d.html")], ["is a directory"]),
    "report into /proc": (lambda t, r: ["report", str(r), "-o", "/proc/r.html"], ["/proc/r.html"]),
    "report of a YAML syntax error": (
        lambda t, r: ["report", str(write(t / "bad.yaml", "a: [1, 2\n")), "-o", str(t / "o.html")],
        ["bad.yaml", "not valid JSON or YAML"],
    ),
    "report of deeply nested JSON": (
        lambda t, r: ["report", str(write(t / "deep.json", nested_json(NESTED))), "-o", str(t / "o.html")],
        ["deep.json", "nested"],
    ),
    "report of deeply nested YAML": (
        lambda t, r: ["report", str(write(t / "deep.yaml", "[" * NESTED + "]" * NESTED)), "-o", str(t / "o.html")],
        ["deep.yaml"],
    ),
    "report of a file that is not UTF-8": (
        lambda t, r: ["report", str(write(t / "bin.json", b"\xff\xfe{}")), "-o", str(t / "o.html")],
        ["bin.json", "UTF-8"],
    ),
    "report of something else": (
        lambda t, r: ["report", str(write(t / "other.json", '{"a": 1}')), "-o", str(t / "o.html")],
        ["other.json", "not a batchmark results file"],
    ),
    "report of a YAML alias bomb": (
        lambda t, r: ["report", str(write(t / "bomb.yaml", alias_bomb())), "-o", str(t / "o.html")],
        ["bomb.yaml", "aliases"],
    ),
    "report of a JSON object with a key twice": (
        lambda t, r: ["report", str(write(t / "twice.json", '{"name": "a", "name": "b"}')), "-o", str(t / "o.html")],
        ["twice.json", "'name' twice"],
    ),
    "compare over its second input": (
        lambda t, r: ["compare", str(r), str(shutil.copy(r, t / "b.json")), "-o", str(t / "b.json")],
        ["--output", "also an input"],
    ),
    "compare as YAML": (lambda t, r: ["compare", str(r), str(r), "-o", str(t / "c.yaml")], [".html"]),
    "merge of one file": (lambda t, r: ["merge", str(r)], ["at least two"]),
    "merge over its second input": (
        lambda t, r: ["merge", str(r), str(altered(t, r, "b.json")), "-o", str(t / "b.json")],
        ["--output", "b.json", "also an input"],
    ),
    "merge into a text file": (
        lambda t, r: ["merge", str(r), str(altered(t, r, "b.json")), "-o", str(t / "m.txt")],
        ["--output", "m.txt", ".json, .yaml, .csv or .html"],
    ),
    "merge of one run twice": (lambda t, r: ["merge", str(r), str(r)], ["r (2)", "the same run as r (1)"]),
    "merge of something else": (
        lambda t, r: ["merge", str(r), str(write(t / "other.json", '{"a": 1}'))],
        ["other.json", "not a batchmark results file"],
    ),
    "merge of another model's run": (
        lambda t, r: ["merge", str(r), str(altered(t, r, "b.json", model="org/other[/x]"))],
        ["b:", "model (org/other[/x])", "not one benchmark"],
    ),
    "merge of runs whose windows share no moment": (
        lambda t, r: ["merge", str(r), str(altered(t, r, "b.json", later=3600.0))],
        ["benchmark 1", "share no moment"],
    ),
    "merge of a result that does not place its window": (
        lambda t, r: ["merge", str(r), str(altered(t, r, "b.json", unplaced=True))],
        ["b: benchmark 1", "does not say where its measured window lies"],
    ),
    "compare of a YAML syntax error": (
        lambda t, r: ["compare", str(r), str(write(t / "bad.yaml", "{a: 1\n"))],
        ["bad.yaml", "not valid JSON or YAML"],
    ),
}


@pytest.mark.parametrize("case", list(REPORT_CASES))
def test_report_and_compare_refuse_bad_input_and_never_overwrite_one(case: str, tmp_path: Path) -> None:
    results = saved_results(tmp_path)
    (tmp_path / "d.html").mkdir()
    original = results.read_bytes()
    args = REPORT_CASES[case][0](tmp_path, results)
    before = sorted(path.name for path in tmp_path.iterdir())
    finished = run_in_process(args)
    assert finished.code == 2
    message = finished.message
    for text in REPORT_CASES[case][1]:
        assert text in message, message
    assert "Traceback" not in message
    assert results.read_bytes() == original
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_user_text_is_printed_literally(tmp_path: Path) -> None:
    """Brackets in a model, a GPU name or a path are the user's text, not console markup."""
    directory = tmp_path / "out[/x]"
    output = directory / "r[bold].json"
    args = run_args(backend(model="org/m[/x]", **{"simulation.gpu_name": "[red]gpu[/red]"}), outputs=[output])
    outcome = batchmark(tmp_path, args)
    assert outcome.code == 0, outcome.stderr
    assert_clean(outcome)
    assert f"wrote {output}" in outcome.message
    assert "org/m[/x]" in outcome.stdout
    assert "[red]gpu[/red]" in " ".join(outcome.stdout.split())
    assert read_results(output)["engine"]["model"] == "org/m[/x]"
    rendered = tmp_path / "[report].html"
    assert run_in_process(["report", str(output), "-o", str(rendered)]).code == 0
    assert "org/m[/x]" in rendered.read_text()


def test_a_missing_vllm_is_explained_with_the_extra_in_brackets(tmp_path: Path) -> None:
    if vllm_engine_arg_names() is not None:
        pytest.skip("vLLM is installed here")
    outcome = batchmark(tmp_path, run_args("kind=vllm_python_batch,model=m"))
    assert outcome.code == 2
    assert "pip install 'batchmark[vllm]'" in outcome.message
    assert_clean(outcome)


@pytest.mark.parametrize(
    ("file_key", "option"),
    [
        ({"sampleRequests": 3}, ["--sample-requests", "5"]),
        ({"sample_requests": 3}, ["--sample-requests", "5"]),
    ],
)
def test_command_line_overrides_either_spelling_in_the_file(
    tmp_path: Path, file_key: dict[str, int], option: list[str]
) -> None:
    output = tmp_path / "r.json"
    path = config_file(tmp_path, **file_key)
    assert run_in_process(["run", "--quiet", "--config", str(path), *option, "--output", str(output)]).code == 0
    assert read_results(output)["config"]["sample_requests"] == 5


def test_spec_overrides_camel_case_keys_in_the_file(tmp_path: Path) -> None:
    output = tmp_path / "r.json"
    path = config_file(tmp_path)
    args = ["run", "--quiet", "--config", str(path), "--profile", "max_concurrency=4", "--output", str(output)]
    assert run_in_process(args).code == 0
    results = read_results(output)
    assert results["config"]["profile"]["max_concurrency"] == 4
    assert results["benchmarks"][0]["requests"]["completed"] == 20


def test_a_sensible_nested_vllm_config_still_passes(tmp_path: Path) -> None:
    output = tmp_path / "r.json"
    config = config_file(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["backend"]["vllmConfig"] = {"max_num_seqs": 8, "compilation_config": {"level": 0, "cudagraph_sizes": [1, 2]}}
    config.write_text(json.dumps(data))
    assert run_in_process(["run", "--quiet", "--config", str(config), "--output", str(output)]).code == 0
    assert read_results(output)["config"]["backend"]["vllm_config"]["compilation_config"]["level"] == 0


# `batchmark manifest` takes run's options and Kubernetes names: each refused with one line, nothing printed on
# stdout (where `| kubectl apply -f -` would read it), user text printed as written.
MANIFEST_CASES: dict[str, tuple[Callable[[Path], list[str]], list[str]]] = {
    "name that is markup": (lambda t: [*run_args(), "--name", "[/x]"], ["--name", "'[/x]'"]),
    "name with a closing tag only": (lambda t: [*run_args(), "--name", "[/]"], ["--name", "'[/]'"]),
    "name in capitals": (lambda t: [*run_args(), "--name", "Bench"], ["--name", "'Bench'", "lower-case"]),
    "name of 64 characters": (lambda t: [*run_args(), "--name", "b" * 64], ["--name", "63 characters"]),
    "name that is no label value": (lambda t: [*run_args(), "--name", "a b"], ["--name", "'a b'", "63 characters"]),
    "namespace that is markup": (lambda t: [*run_args(), "--namespace", "[/x]"], ["--namespace", "'[/x]'"]),
    "namespace with an underscore": (lambda t: [*run_args(), "-n", "team_a"], ["--namespace", "'team_a'"]),
    "namespace that is a path": (lambda t: [*run_args(), "-n", "../kube-system"], ["--namespace", "../kube-system"]),
    "sweep warm-up of 10**12 requests": (
        lambda t: run_args(extra=["--sweep", "batch_size=4,8", "--sweep-warmup", "1000000000000"]),
        ["--sweep-warmup", "warmup_requests"],
    ),
    "one SLO statistic in two spellings": (
        lambda t: run_args(extra=["--slo", "ttft_p95=1,ttftP95=2"]),
        ["--slo", "ttft_p95", "ttftP95"],
    ),
    "no engine replica": (lambda t: run_args(backend(replicas=0)), ["--backend", "replicas", "0"]),
    "more engine replicas than the bound": (lambda t: run_args(backend(replicas=65)), ["--backend", "replicas", "64"]),
    "engine replicas that are not a whole number": (
        lambda t: run_args(backend(replicas=1.5)),
        ["--backend", "replicas", "1.5"],
    ),
    "a swept replica count of none": (
        lambda t: run_args(extra=["--sweep", "replicas=1,0"]),
        ["--sweep", "replicas", "0"],
    ),
    "absurd GPU price": (lambda t: run_args(extra=["--gpu-cost-per-hour", "1e308"]), ["--gpu-cost-per-hour"]),
    "YAML alias bomb in a config file": (
        lambda t: ["run", "--config", str(write(t / "run.yaml", alias_bomb()))],
        ["--config", "aliases"],
    ),
    "empty image": (lambda t: [*run_args(), "--image", ""], ["image"]),
    "negative metrics linger": (lambda t: run_args(extra=["--metrics-linger", "-1"]), ["--metrics-linger", "-1"]),
    "metrics linger over an hour": (lambda t: run_args(extra=["--metrics-linger", "3601"]), ["--metrics-linger"]),
    "NaN metrics linger": (lambda t: run_args(extra=["--metrics-linger", "nan"]), ["--metrics-linger", "nan"]),
    "a file on this machine without a data volume": (
        lambda t: [*run_args(), "--data", "kind=file,path=prompts.jsonl"],
        ["--data", "path", "'prompts.jsonl'", "kubectl create configmap", "--data-volume"],
    ),
    "ShareGPT on this machine without a data volume": (
        lambda t: [*run_args(), "--data", "kind=sharegpt,path=[/x].json"],
        ["--data", "path", "'[/x].json'", "--data-volume"],
    ),
    "a dataset folder on this machine without a data volume": (
        lambda t: [*run_args(), "--data", f"kind=dataset,path={t}"],
        ["--data", "path", "--data-volume"],
    ),
    "data volume whose ConfigMap is markup": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "configMap=[/x]"],
        ["--data-volume", "configMap", "'[/x]'"],
    ),
    "data volume with a ConfigMap and a claim": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "configMap=a,claimName=b"],
        ["--data-volume", "give one of configMap or claimName"],
    ),
    "data volume of no source": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "mountPath=/data"],
        ["--data-volume", "give one of configMap or claimName"],
    ),
    "data volume with an unknown key": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "configMap=a,secret=b"],
        ["--data-volume", "secret", "unknown key"],
    ),
    "data volume that is no key=value": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "prompts"],
        ["--data-volume", "'prompts'", "key=value"],
    ),
    "data volume's mount path relative": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "configMap=a,mountPath=data"],
        ["--data-volume", "mountPath", "'data'"],
    ),
    "data volume over the runner's config": (
        lambda t: [*run_args(), "--data", "kind=file,path=p.jsonl", "--data-volume", "claimName=a,mountPath=/etc"],
        ["--data-volume", "mountPath", "'/etc'", "/etc/batchmark"],
    ),
    "data volume's mount path in two spellings": (
        lambda t: [
            *run_args(),
            *("--data", "kind=file,path=p.jsonl"),
            *("--data-volume", "configMap=a,mountPath=/a,mount_path=/b"),
        ],
        ["--data-volume", "mountPath", "given twice"],
    ),
    "data volume for synthetic data": (
        lambda t: [*run_args(), "--data-volume", "configMap=prompts"],
        ["--data-volume", "synthetic_text"],
    ),
    "a file outside the claim's mount path": (
        lambda t: [*run_args(), "--data", "kind=file,path=/home/me/p.jsonl", "--data-volume", "claimName=corpus"],
        ["--data", "path", "'/home/me/p.jsonl'", "mountPath '/data'"],
    ),
    "a file that leaves the claim": (
        lambda t: [*run_args(), "--data", "kind=file,path=../p.jsonl", "--data-volume", "claimName=corpus"],
        ["--data", "path", "'../p.jsonl'", "leaves the data volume"],
    ),
    "a file that cannot be a ConfigMap key": (
        lambda t: [*run_args(), "--data", "kind=file,path=my prompts.jsonl", "--data-volume", "configMap=a"],
        ["--data", "path", "'my prompts.jsonl'", "ConfigMap"],
    ),
    "model cache in capitals": (
        lambda t: [*run_args(), "--model-cache", "claimName=Models"],
        ["--model-cache", "claimName", "'Models'"],
    ),
    "model cache from a ConfigMap": (
        lambda t: [*run_args(), "--model-cache", "configMap=models"],
        ["--model-cache", "configMap", "unknown key"],
    ),
    "model cache of no claim": (
        lambda t: [*run_args(), "--model-cache", "mountPath=/models"],
        ["--model-cache", "claimName"],
    ),
    "model cache over shared memory": (
        lambda t: [*run_args(), "--model-cache", "claimName=models,mountPath=/dev"],
        ["--model-cache", "mountPath", "'/dev'", "/dev/shm"],
    ),
    "data volume over the model cache": (
        lambda t: [
            *run_args(),
            *("--data", "kind=file,path=p.jsonl", "--data-volume", "claimName=a,mountPath=/models/data"),
            *("--model-cache", "claimName=models"),
        ],
        ["--data-volume", "mountPath", "overlaps /models"],
    ),
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_manifest_refuses_bad_input_and_prints_no_manifest(case: str, tmp_path: Path) -> None:
    make_args, named = MANIFEST_CASES[case]
    captured = run_in_process(["manifest", *make_args(tmp_path)[1:]])
    assert captured.code == 2
    message = captured.message
    for text in named:
        assert text in message, message
    assert_no_dump(message)
    assert captured.stdout == ""


# `batchmark results` against a cluster that is not there: every bad input is refused (2) before the first
# request, which would otherwise fail (5) and hide it; a server that refuses or never answers is named (5).
def kubeconfig(tmp_path: Path, server: str, namespace: str = "team-a") -> Path:
    return write(
        tmp_path / "kubeconfig",
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
                "current-context": "x",
            }
        ),
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


ResultsCase = Callable[[Path, Path], list[str]]  # (tmp_path, a kubeconfig of a closed port) -> arguments
RESULTS_CASES: dict[str, tuple[ResultsCase, int, list[str]]] = {
    "binary kubeconfig": (
        lambda t, k: ["results", "b", "--kubeconfig", str(write(t / "kc", bytes(range(256))))],
        2,
        ["--kubeconfig", "kc", "not a kubeconfig", "UTF-8"],
    ),
    "kubeconfig that is not YAML": (
        lambda t, k: ["results", "b", "--kubeconfig", str(write(t / "kc", "clusters: [\n"))],
        2,
        ["--kubeconfig", "kc", "not a kubeconfig", "not YAML"],
    ),
    "kubeconfig that is a list": (
        lambda t, k: ["results", "b", "--kubeconfig", str(write(t / "kc", "- a\n- b\n"))],
        2,
        ["--kubeconfig", "kc", "not a kubeconfig"],
    ),
    "kubeconfig that is an alias bomb": (
        lambda t, k: ["results", "b", "--kubeconfig", str(write(t / "kc", alias_bomb()))],
        2,
        ["--kubeconfig", "kc", "aliases"],
    ),
    "kubeconfig without a context": (
        lambda t, k: ["results", "b", "--kubeconfig", str(write(t / "kc", "apiVersion: v1\nkind: Config\n"))],
        2,
        ["--kubeconfig", "kc", "not a usable kubeconfig"],
    ),
    "kubeconfig that is missing": (
        lambda t, k: ["results", "b", "--kubeconfig", str(t / "absent")],
        2,
        ["--kubeconfig", "absent", "No such file"],
    ),
    "name that is markup": (lambda t, k: ["results", "[/x]", "--kubeconfig", str(k)], 2, ["NAME", "'[/x]'"]),
    "name in capitals": (lambda t, k: ["results", "Bench", "--kubeconfig", str(k)], 2, ["NAME", "'Bench'"]),
    "name that is a path": (lambda t, k: ["results", "../secrets", "--kubeconfig", str(k)], 2, ["NAME"]),
    "namespace that is markup": (
        lambda t, k: ["results", "b", "-n", "[/x]", "--kubeconfig", str(k)],
        2,
        ["--namespace", "'[/x]'"],
    ),
    "namespace with a dot": (
        lambda t, k: ["results", "b", "-n", "a.b", "--kubeconfig", str(k)],
        2,
        ["--namespace", "'a.b'"],
    ),
    "output into a directory": (
        lambda t, k: ["results", "b", "-o", str(t / "d.json"), "--kubeconfig", str(k)],
        2,
        ["--output", "d.json", "is a directory"],
    ),
    "output of an unknown kind": (
        lambda t, k: ["results", "b", "-o", str(t / "r.txt"), "--kubeconfig", str(k)],
        2,
        ["--output", "r.txt", ".json"],
    ),
    "output in /proc": (
        lambda t, k: ["results", "b", "-o", "/proc/r.json", "--kubeconfig", str(k)],
        2,
        ["--output", "/proc/r.json"],
    ),
    "output that is markup": (
        lambda t, k: [
            "results",
            "b",
            "-o",
            str(t / "[/x]" / "r.json"),
            "-o",
            "/proc/[/x].json",
            "--kubeconfig",
            str(k),
        ],
        2,
        ["--output", "/proc/[/x].json"],
    ),
    "a server that refuses the connection": (
        lambda t, k: ["results", "b", "--kubeconfig", str(k)],
        5,
        ["cannot reach the API server https://127.0.0.1:", "refused"],
    ),
}


@pytest.mark.parametrize("case", list(RESULTS_CASES))
def test_results_refuses_bad_input_before_asking_the_cluster(case: str, tmp_path: Path) -> None:
    make_args, code, named = RESULTS_CASES[case]
    (tmp_path / "d.json").mkdir()
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}")
    args = make_args(tmp_path, config)
    before = sorted(path.name for path in tmp_path.iterdir())
    captured = run_in_process(args)
    assert captured.code == code
    message = captured.message
    for text in named:
        assert text in message, message
    assert_no_dump(message)
    assert len(captured.stderr.strip().splitlines()) == 1, captured.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_results_reads_kubeconfig_from_the_environment_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write(tmp_path / "kc", b"\x00\x01binary\xff")))
    finished = run_in_process(["results", "b"])
    assert finished.code == 2
    message = finished.message
    assert f"KUBECONFIG: {tmp_path / 'kc'}: not a kubeconfig" in message
    assert_no_dump(message)


def test_results_gives_up_on_a_server_that_never_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "READ_SECONDS", 1.0)  # the bound under test, made short
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections queue in the backlog; none is ever accepted or answered
        port = silent.getsockname()[1]
        finished = run_in_process(
            ["results", "b", "--kubeconfig", str(kubeconfig(tmp_path, f"https://127.0.0.1:{port}"))]
        )
        assert finished.code == 5
    message = finished.message
    assert f"cannot reach the API server https://127.0.0.1:{port}" in message
    assert "timed out" in message
    assert_no_dump(message)


# `batchmark submit -f FILE` against a cluster that is not there: the manifest is checked as the operator would
# check it before the first request.
def benchmark_manifest(tmp_path: Path, **changes: object) -> Path:
    manifest: dict[str, object] = {
        "apiVersion": "batchmark.dev/v1alpha1",
        "kind": "BatchBenchmark",
        "metadata": {"generateName": "nightly-"},
        "spec": yaml.safe_load(config_text(tmp_path)),
    }
    manifest.update(changes)
    return write(tmp_path / "bb.yaml", yaml.safe_dump(manifest))


SUBMIT_CASES: dict[str, tuple[Callable[[Path], Path], int, list[str]]] = {
    "a file that is missing": (lambda t: t / "absent.yaml", 2, ["--file", "absent.yaml"]),
    "a file that is not YAML": (lambda t: write(t / "bad.yaml", "a: [1\n"), 2, ["--file", "bad.yaml", "not YAML"]),
    "a YAML alias bomb": (lambda t: write(t / "bomb.yaml", alias_bomb()), 2, ["--file", "bomb.yaml", "aliases"]),
    "another kind": (
        lambda t: benchmark_manifest(t, kind="Job"),
        2,
        ["--file", "not a BatchBenchmark of batchmark.dev/v1alpha1", "kind 'Job'"],
    ),
    "no name": (lambda t: benchmark_manifest(t, metadata={}), 2, ["metadata: give one of name or generateName"]),
    "a name that is markup": (
        lambda t: benchmark_manifest(t, metadata={"name": "[/x]"}),
        2,
        ["--file: metadata.name", "'[/x]'"],
    ),
    "a generateName in capitals": (
        lambda t: benchmark_manifest(t, metadata={"generateName": "Nightly-"}),
        2,
        ["--file: metadata.generateName"],
    ),
    "a spec the operator refuses": (
        lambda t: benchmark_manifest(t, spec={**yaml.safe_load(config_text(t)), "baseline": "last"}),
        2,
        ["bb.yaml: spec.", "results store"],
    ),
    "a server that refuses the connection": (
        benchmark_manifest,
        5,
        ["cannot reach the API server https://127.0.0.1:", "refused"],
    ),
}


@pytest.mark.parametrize("case", list(SUBMIT_CASES))
def test_submit_refuses_bad_input_before_asking_the_cluster(case: str, tmp_path: Path) -> None:
    make_file, code, named = SUBMIT_CASES[case]
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}")
    captured = run_in_process(["submit", "-f", str(make_file(tmp_path)), "--kubeconfig", str(config)])
    assert captured.code == code
    for text in named:
        assert text in captured.message, captured.message
    assert_no_dump(captured.message)
    assert len(captured.stderr.strip().splitlines()) == 1, captured.stderr
    assert captured.stdout == ""
