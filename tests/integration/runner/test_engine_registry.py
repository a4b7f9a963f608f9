"""Adding an engine is its registry entry (docs/architecture.md, "Adding an engine"): a throwaway entry, put in the
registry here only, runs `batchmark run` end to end, and the report, the status and the console show what it says.

The config allows only the engine names it knows (the CRD's enum comes from them), so the throwaway takes the
default engine's name, vllm, whose own entry does the most that is vLLM's alone: the availability check (vLLM is
not installed here), the model's tokenizer, the packages in the environment, the GPUs. None of it runs: nothing
outside the registry asks which engine this is. The worker is forked, so it sees the registry as the test left it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from batchmark.runner.cli import build_parser
from batchmark.runner.commands.run import run_command
from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.engines import registry
from batchmark.runner.engines.base import NO_TIMINGS, Completion, Engine, EngineClock, EngineInfo, WorkItem
from batchmark.runner.engines.entry import EngineEntry, PodNeeds
from batchmark.runner.engines.tokens import Tokens
from batchmark.runner.lifecycle.shutdown import Shutdown
from batchmark.runner.lifecycle.start_method import MP_CONTEXT_VARIABLE
from batchmark.runner.observe.statuswriter import StatusTarget, StatusWriter
from batchmark.runner.results.report import EngineSummary
from batchmark.runner.results.summary import engine_status
from tests.unit.runner.observe.test_status_writer import RecordingApi

pytestmark = pytest.mark.integration

SLOT = "vllm"


class EchoEngine:
    """Completes every request at once, with the output length it asked for."""

    def __init__(self, model: str) -> None:
        self.info = EngineInfo(kind=SLOT, model=model, version="0.0-throwaway", gpu_name="no device")
        self.info.details["echo"] = True
        self.clock = EngineClock()

    def prepare(self, item: WorkItem) -> WorkItem:
        return item

    def run_batch(self, items: Sequence[WorkItem]) -> list[Completion]:
        with self.clock:
            return [
                Completion(item.spec.request_id, item.spec.prompt_tokens, item.spec.output_tokens, None, NO_TIMINGS)
                for item in items
            ]

    def close(self) -> None:
        pass


def load_echo(config: BackendConfig, seed: int) -> Engine:
    return EchoEngine(config.model)


THROWAWAY = EngineEntry(
    name=SLOT,
    settings="vllm_config",
    simulated=True,
    loaded_label="THROWAWAY engine",
    banner="THROWAWAY ENGINE on {gpu}: nothing ran.",
    continuous_dispatch=False,
    versions=("pytest",),
    pod=PodNeeds(requests={"cpu": "1m", "memory": "1Mi"}, gpus=lambda arguments, where: 0),
    check_available=lambda config: None,
    check_argument=lambda name, value, vllm_names_checked: None,
    load=load_echo,
    count_tokens=lambda backend, asked: Tokens(len, min(asked, default=1000), "characters"),
    configured_device=lambda backend: "no device",
)


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ENGINES", MappingProxyType({**registry.ENGINES, SLOT: THROWAWAY}))
    monkeypatch.setenv(MP_CONTEXT_VARIABLE, "fork")


def run(argv: list[str], api: RecordingApi) -> int:
    writer = StatusWriter(StatusTarget("team", "bb", "uid-1", None, None, None), api_factory=lambda: api)
    return run_command(build_parser().parse_args(["run", "--quiet", *argv]), [writer], shutdown=Shutdown())


def test_a_throwaway_engine_runs_through_the_cli(
    throwaway: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": "x" * (10 + i), "output_tokens_count": 3}) + "\n" for i in range(8))
    )
    output = tmp_path / "report.json"
    api = RecordingApi()
    argv = ["--backend", f"model=m,engine={SLOT},batch_size=4", "--data", f"kind=file,path={prompts}"]
    argv += ["--profile", "kind=throughput", "--constraint", "kind=max_requests,count=8", "--output", str(output)]

    assert run(argv, api) == 0

    report: dict[str, Any] = json.loads(output.read_text())
    engine = report["engine"]
    assert engine["kind"] == SLOT
    assert engine["simulated"] is True
    assert (engine["version"], engine["gpu_name"], engine["details"]["echo"]) == ("0.0-throwaway", "no device", True)
    assert report["data"]["tokenizer"] == "characters"
    assert report["data"]["prompt_tokens"]["max"] == 17
    assert report["benchmarks"][0]["requests"]["completed"] == 8
    # The environment lists the packages the registry's entries name: here pytest, none of vLLM's.
    assert set(report["environment"]) == {"python", "platform", "machine", "pytest", "numpy", "pydantic"}
    summary = EngineSummary.model_validate(engine)
    assert api.status_patches[-1]["engine"] == engine_status(summary).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    printed = capsys.readouterr()
    assert "THROWAWAY engine: loaded m in" in printed.err
    assert "THROWAWAY ENGINE on no device: nothing ran." in printed.out


def test_a_throwaway_engine_without_continuous_dispatch_refuses_it(
    throwaway: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--backend",
        f"model=m,engine={SLOT},dispatch=continuous",
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=4",
    ]
    argv += [
        "--profile",
        "kind=throughput",
        "--constraint",
        "kind=max_requests,count=4",
        "--output",
        str(tmp_path / "report.json"),
    ]
    assert run(argv, RecordingApi()) == 3
    assert "backend.dispatch=continuous: the vllm engine cannot take requests while running" in capsys.readouterr().err
