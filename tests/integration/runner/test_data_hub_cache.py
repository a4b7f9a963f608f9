"""`--data kind=dataset` with a Hugging Face hub id, read offline from the Hugging Face cache under HF_HOME, as on a
machine (or a pod with `modelCache`) where the dataset was downloaded once: `config`, `split` and `prompt_column`
pick what runs, and an id the cache does not hold is an exit 2 naming the field. Without HF_HUB_OFFLINE, a hub that
does not answer leaves the cache to read at once, or an exit 2 at once when the cache does not hold the id.

No hub is reachable here, so the test fills the cache the way `datasets` does after downloading a dataset of JSON
files: the hub's JSON builder prepares each configuration into `datasets/<owner>___<name>/<config>/<version>/
<commit>/` (Arrow files and dataset_info.json), which `load_dataset` finds by the id when offline.
The runner runs as its own program, so the Hugging Face libraries read this HF_HOME when they are imported.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli import Finished, read_results, run_program
from tests.integration.runner.harness import backend

pytestmark = pytest.mark.integration

REPOSITORY = "acme/support-tickets"
COMMIT = "3f1c0ffee0ddba11c0de5eed0fa11ed0b0a7cafe"  # the hub revision the cache holds
TRAIN: list[dict[str, Any]] = [
    {"question": f"my order {index} has not arrived " * (1 + index % 3), "answer_tokens": 2 + index % 5}
    for index in range(20)
]
TEST: list[dict[str, Any]] = [{"question": f"refund for invoice {index}", "answer_tokens": 7} for index in range(4)]
SHORT: list[dict[str, Any]] = [{"title": f"broken link {index}", "body": "x" * index} for index in range(6)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def fill_hub_cache(home: Path, downloads: Path) -> None:
    """Leave in HF_HOME's datasets cache what `load_dataset(REPOSITORY)` leaves after downloading it at COMMIT:
    configurations `default` (train, test splits) and `short` (train)."""
    from datasets.packaged_modules.json.json import Json

    configurations = {
        "default": {
            "train": write_jsonl(downloads / "train.jsonl", TRAIN),
            "test": write_jsonl(downloads / "test.jsonl", TEST),
        },
        "short": {"train": write_jsonl(downloads / "short" / "train.jsonl", SHORT)},
    }
    owner, name = REPOSITORY.split("/")
    cache = home / "datasets"
    for configuration, data_files in configurations.items():
        builder = Json(
            cache_dir=str(cache),
            dataset_name=name,
            config_name=configuration,
            config_id=configuration,
            data_files=data_files,
            hash=COMMIT,
        )
        builder.download_and_prepare(output_dir=str(cache / f"{owner}___{name}" / configuration / "0.0.0" / COMMIT))


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf-home")
    fill_hub_cache(home, tmp_path_factory.mktemp("downloaded"))
    return home


# A hub that is not there: its endpoint refuses connections, so nothing here reaches a network.
UNREACHABLE_HUB = "http://127.0.0.1:9"


def run_offline(
    hf_home: Path, tmp_path: Path, data: str, *, offline: bool = True
) -> tuple[Finished, dict[str, Any] | None]:
    """A run on ``data`` with only ``hf_home``'s cache to read from, with HF_HUB_OFFLINE set or (``offline``
    false) without it and a hub endpoint that does not answer; the results, if it wrote them (a bad id must not)."""
    output = tmp_path / "report.json"
    output.unlink(missing_ok=True)
    args = ["run", "--quiet", "--backend", backend(), "--data", data]
    args += ["--profile", "kind=throughput", "--constraint", "kind=max_requests,count=30"]
    args += ["--sample-requests", "100", "--output", str(output)]
    environment: dict[str, str | None] = {name: None for name in os.environ if name.startswith("HF_")}
    environment["HF_HOME"] = str(hf_home)
    if offline:
        environment.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    else:
        environment["HF_ENDPOINT"] = UNREACHABLE_HUB
    finished = run_program(args, env=environment)
    return finished, read_results(output) if output.exists() else None


def requests(report: dict[str, Any]) -> dict[int, tuple[int, int]]:
    return {s["request_id"]: (s["prompt_tokens"], s["output_tokens"]) for s in report["benchmarks"][0]["samples"]}


def test_a_hub_id_is_read_from_the_cache_with_its_config_split_and_columns(hf_home: Path, tmp_path: Path) -> None:
    spec = f"kind=dataset,path={REPOSITORY},config=default,prompt_column=question"
    finished, report = run_offline(hf_home, tmp_path, spec + ",output_tokens_count_column=answer_tokens")
    assert finished.code == 0, finished.stderr
    assert report is not None
    assert report["data"]["kind"] == "dataset"
    assert report["data"]["source"] == REPOSITORY
    assert report["data"]["samples"] == len(TRAIN)  # the default split: train
    assert report["data"]["output_lengths_from"] == "column 'answer_tokens'"
    for request_id, lengths in requests(report).items():
        row = TRAIN[request_id % len(TRAIN)]
        assert lengths == (len(row["question"].encode()), row["answer_tokens"])

    finished, report = run_offline(hf_home, tmp_path, spec + ",split=test,output_tokens=3")
    assert finished.code == 0, finished.stderr
    assert report is not None
    assert report["data"]["samples"] == len(TEST)
    for request_id, lengths in requests(report).items():
        assert lengths == (len(TEST[request_id % len(TEST)]["question"].encode()), 3)

    finished, report = run_offline(
        hf_home, tmp_path, f"kind=dataset,path={REPOSITORY},config=short,prompt_column=title"
    )
    assert finished.code == 0, finished.stderr
    assert report is not None
    assert report["data"]["samples"] == len(SHORT)
    assert requests(report)[1][0] == len(SHORT[1]["title"].encode())


@pytest.mark.parametrize(
    ("data", "names"),
    [
        # Two configurations cached: datasets asks which one, and so does the message.
        (f"kind=dataset,path={REPOSITORY}", ["path", REPOSITORY, "short", "default"]),
        (f"kind=dataset,path={REPOSITORY},config=long", ["path", REPOSITORY, "long"]),
        (f"kind=dataset,path={REPOSITORY},config=default,split=validation", ["split", "'validation'", "train, test"]),
        (
            f"kind=dataset,path={REPOSITORY},config=default,prompt_column=title",
            ["prompt_column", "'title'", "question"],
        ),
        ("kind=dataset,path=acme/not-downloaded", ["path", "acme/not-downloaded", "Hub"]),
    ],
)
def test_what_the_cache_does_not_hold_exits_2_naming_the_field(
    hf_home: Path, tmp_path: Path, data: str, names: list[str]
) -> None:
    finished, report = run_offline(hf_home, tmp_path, data)
    assert finished.code == 2, finished.stderr
    assert report is None
    message = finished.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert "Traceback" not in message
    assert "--data" in message, message
    for name in names:
        assert name in message, (name, message)


def test_a_hub_that_does_not_answer_leaves_the_cache_to_read_at_once(hf_home: Path, tmp_path: Path) -> None:
    spec = f"kind=dataset,path={REPOSITORY},config=default,prompt_column=question,output_tokens=3"
    offline, offline_report = run_offline(hf_home, tmp_path, spec)
    assert offline.code == 0, offline.stderr
    assert offline_report is not None
    started = time.monotonic()
    finished, report = run_offline(hf_home, tmp_path, spec, offline=False)
    assert finished.code == 0, finished.stderr
    assert report is not None
    assert time.monotonic() - started < 20  # datasets alone retried for 26 s before it looked in the cache
    assert report["data"]["content_hash"] == offline_report["data"]["content_hash"]


def test_without_the_hub_or_a_cache_a_hub_id_fails_at_once_in_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    finished, report = run_offline(
        tmp_path / "empty-hf-home", tmp_path, f"kind=dataset,path={REPOSITORY}", offline=False
    )
    assert time.monotonic() - started < 20  # it took 26 s and printed ten lines of retries
    assert finished.code == 2, finished.stderr
    assert report is None
    message = finished.stderr.strip()
    assert len(message.splitlines()) == 1, message
    for name in (
        "--data",
        "path",
        REPOSITORY,
        "not in the Hugging Face cache",
        "the Hub does not answer",
        UNREACHABLE_HUB,
    ):
        assert name in message, (name, message)
