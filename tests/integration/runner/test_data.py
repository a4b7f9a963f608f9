"""`--data` over the user's own prompts, on the simulated engine: every kind of file, a saved dataset, a folder of
data files and ShareGPT conversations, made here offline; the results say which data ran, and bad data is an
exit 2 before any work, naming the option, the file and the field.

The simulated engine's tokens are UTF-8 bytes, so every length here is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchmark.runner.cli import main
from tests.integration.runner.harness import backend

pytestmark = pytest.mark.integration

PROMPTS = [f"prompt number {index}: " + "word " * (index % 7) for index in range(30)]
OUTPUTS = [1 + index % 5 for index in range(30)]


def cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse's own errors
        return int(exit_.code or 0)


def run(tmp_path: Path, data: str, *, requests: int = 40, name: str = "r") -> dict[str, Any]:
    output = tmp_path / f"{name}.json"
    argv = ["run", "--quiet", "--backend", backend(), "--data", data, "--profile", "kind=throughput"]
    argv += ["--constraint", f"kind=max_requests,count={requests}", "--sample-requests", "100"]
    argv += ["--output", str(output)]
    assert cli(argv) == 0
    report: dict[str, Any] = json.loads(output.read_text())
    return report


def records() -> list[dict[str, Any]]:
    return [
        {"prompt": p, "output_tokens_count": o, "other": i}
        for i, (p, o) in enumerate(zip(PROMPTS, OUTPUTS, strict=True))
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """The same thirty records in every format."""
    import datasets
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.parquet

    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "prompts.jsonl", records())
    (folder / "prompts.json").write_text(json.dumps(records()), encoding="utf-8")
    table = pa.Table.from_pylist(records())
    pyarrow.csv.write_csv(table, folder / "prompts.csv")
    pyarrow.parquet.write_table(table, folder / "prompts.parquet")
    (folder / "prompts.txt").write_text("".join(p + "\n" for p in PROMPTS), encoding="utf-8")
    datasets.Dataset.from_list(records()).save_to_disk(str(folder / "saved"))
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(records()), "test": datasets.Dataset.from_list(records()[:3])}
    ).save_to_disk(str(folder / "saved_splits"))
    (folder / "files").mkdir()
    write_jsonl(folder / "files" / "train.jsonl", records())
    conversations = [
        {
            "id": str(index),
            "conversations": [
                {"from": "human", "value": prompt},
                {"from": "gpt", "value": "a" * (10 + index)},
                {"from": "human", "value": "and then?"},
            ],
        }
        for index, prompt in enumerate(PROMPTS)
    ]
    conversations.append({"id": "alone", "conversations": [{"from": "human", "value": "no answer"}]})
    (folder / "sharegpt.json").write_text(json.dumps(conversations), encoding="utf-8")
    return folder


def by_request(report: dict[str, Any]) -> dict[int, tuple[int, int]]:
    return {s["request_id"]: (s["prompt_tokens"], s["output_tokens"]) for s in report["benchmarks"][0]["samples"]}


def expected(index: int) -> tuple[int, int]:
    record = index % len(PROMPTS)
    return len(PROMPTS[record].encode()), OUTPUTS[record]


@pytest.mark.parametrize("name", ["prompts.jsonl", "prompts.json", "prompts.csv", "prompts.parquet"])
def test_a_file_runs_its_prompts_and_output_lengths(tmp_path: Path, data: Path, name: str) -> None:
    report = run(tmp_path, f"kind=file,path={data / name}")
    summary = report["data"]
    assert summary["kind"] == "file"
    assert summary["samples"] == len(PROMPTS)
    assert summary["output_lengths_from"] == "column 'output_tokens_count'"
    assert summary["forced_output_lengths"] is True
    assert summary["tokenizer"] == "utf-8 bytes"
    assert summary["content_hash"].startswith("sha256:")
    assert summary["prompt_tokens"]["max"] == max(len(p.encode()) for p in PROMPTS)
    # Requests cycle through the records in the file's order; the engine saw exactly those lengths.
    for request_id, lengths in by_request(report).items():
        assert lengths == expected(request_id)


def test_every_format_of_the_same_records_has_the_same_content_hash(tmp_path: Path, data: Path) -> None:
    hashes = {
        name: run(tmp_path, f"kind=file,path={data / name}", requests=5, name=name)["data"]["content_hash"]
        for name in ("prompts.jsonl", "prompts.csv", "prompts.parquet")
    }
    hashes["saved"] = run(tmp_path, f"kind=dataset,path={data / 'saved'}", requests=5)["data"]["content_hash"]
    assert len(set(hashes.values())) == 1, hashes


def test_a_text_file_is_a_prompt_a_line_with_drawn_output_lengths(tmp_path: Path, data: Path) -> None:
    report = run(tmp_path, f"kind=file,path={data / 'prompts.txt'},output_tokens=3,samples=10")
    assert report["data"]["samples"] == 10
    assert report["data"]["output_lengths_from"] == "output_tokens"
    for request_id, (prompt, output) in by_request(report).items():
        assert (prompt, output) == (len(PROMPTS[request_id % 10].encode()), 3)


def test_prompt_column_and_output_column_by_name(tmp_path: Path, data: Path) -> None:
    rows = [{"question": p, "answer_length": o} for p, o in zip(PROMPTS, OUTPUTS, strict=True)]
    path = write_jsonl(tmp_path / "named.jsonl", rows)
    report = run(tmp_path, f"kind=file,path={path},output_tokens_count_column=answer_length")
    assert report["data"]["output_lengths_from"] == "column 'answer_length'"
    for request_id, lengths in by_request(report).items():
        assert lengths == expected(request_id)
    path = write_jsonl(tmp_path / "custom.jsonl", [{"body_text": p} for p in PROMPTS])
    report = run(tmp_path, f"kind=file,path={path},prompt_column=body_text,output_tokens=2")
    assert by_request(report)[0] == (len(PROMPTS[0].encode()), 2)


def test_a_saved_dataset_with_splits_and_a_folder_of_files(tmp_path: Path, data: Path) -> None:
    report = run(tmp_path, f"kind=dataset,path={data / 'saved_splits'},split=test")
    assert report["data"]["samples"] == 3
    assert run(tmp_path, f"kind=dataset,path={data / 'saved_splits'}")["data"]["samples"] == 30  # train
    report = run(tmp_path, f"kind=dataset,path={data / 'files'}")
    for request_id, lengths in by_request(report).items():
        assert lengths == expected(request_id)


def test_sharegpt_takes_the_first_human_turn_and_its_answer(tmp_path: Path, data: Path) -> None:
    report = run(tmp_path, f"kind=sharegpt,path={data / 'sharegpt.json'}")
    summary = report["data"]
    assert summary["samples"] == 30
    assert summary["skipped_without_answer"] == 1
    assert summary["output_lengths_from"] == "the first answer's length"
    for request_id, lengths in by_request(report).items():
        record = request_id % 30
        assert lengths == (len(PROMPTS[record].encode()), 10 + record)


def test_chat_messages_in_the_prompt_column(tmp_path: Path) -> None:
    conversations = [
        [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": prompt}] for prompt in PROMPTS
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"prompt": messages} for messages in conversations])
    report = run(tmp_path, f"kind=file,path={path},output_tokens=3")
    assert report["data"]["samples"] == len(PROMPTS)
    # Without a chat template (the simulated engine has none) the contents are the text, a line each.
    for request_id, lengths in by_request(report).items():
        assert lengths == (len(("Answer briefly.\n" + PROMPTS[request_id % len(PROMPTS)]).encode()), 3)


def test_the_same_seed_gives_the_same_requests(tmp_path: Path, data: Path) -> None:
    spec = f"kind=file,path={data / 'prompts.jsonl'},shuffle=true,samples=12"
    first, second = run(tmp_path, spec + ",seed=7", name="a"), run(tmp_path, spec + ",seed=7", name="b")
    other = run(tmp_path, spec + ",seed=8", name="c")
    assert first["data"]["content_hash"] == second["data"]["content_hash"]
    assert by_request(first) == by_request(second)
    assert first["data"]["content_hash"] != other["data"]["content_hash"]
    unshuffled = run(tmp_path, f"kind=file,path={data / 'prompts.jsonl'},samples=12", name="d")
    assert unshuffled["data"]["content_hash"] != first["data"]["content_hash"]


def test_a_relative_path_is_read_under_the_pods_data_volume(
    tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    laptop = run(tmp_path, f"kind=file,path={data / 'prompts.jsonl'}", name="laptop")
    monkeypatch.setenv("BATCHMARK_DATA_DIR", str(data))
    pod = run(tmp_path, "kind=file,path=prompts.jsonl", name="pod")
    assert pod["data"]["source"] == "prompts.jsonl"
    assert pod["data"]["content_hash"] == laptop["data"]["content_hash"]
    assert by_request(pod) == by_request(laptop)


def test_too_long_prompts_are_skipped_when_asked_and_counted(tmp_path: Path, data: Path) -> None:
    rows = [{"prompt": "x" * 100, "output_tokens_count": 10}, *records()]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    output = tmp_path / "skip.json"
    argv = ["run", "--quiet", "--backend", backend(**{"vllm_config.max_model_len": 60}), "--profile"]
    argv += ["kind=throughput", "--constraint", "kind=max_requests,count=10", "--output", str(output)]
    assert cli([*argv, "--data", f"kind=file,path={path},too_long=skip"]) == 0
    summary = json.loads(output.read_text())["data"]
    assert summary["skipped_too_long"] == 1
    assert summary["samples"] == 30
    assert summary["prompt_tokens"]["max"] < 60


# Each bad case: the data spec (given the data folder and tmp_path) and what the one-line message must name.
def _undecodable(tmp_path: Path) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9 \xff\xfe"}\n')
    return path


def write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    return path


def _long(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "long.jsonl", [{"prompt": "y" * 5000}, {"prompt": "z" * 10}, {"prompt": "w" * 6000}])


BAD: dict[str, tuple[Any, list[str]]] = {
    "missing file": (lambda d, t: "kind=file,path=" + str(t / "nowhere.jsonl"), ["path", "nowhere.jsonl", "no such"]),
    "missing dataset folder": (lambda d, t: f"kind=dataset,path={t / 'nothing'}", ["path", "no such"]),
    "unknown extension": (lambda d, t: f"kind=file,path={d / 'sharegpt.json'}x", ["path"]),
    "a folder given as a file": (lambda d, t: f"kind=file,path={d / 'files'}", ["path", "kind=dataset"]),
    "unknown prompt column": (
        lambda d, t: f"kind=file,path={d / 'prompts.csv'},prompt_column=nope",
        ["prompt_column", "prompts.csv", "'nope'", "prompt, output_tokens_count, other"],
    ),
    "no usual prompt column": (
        lambda d, t: f"kind=file,path={write_jsonl(t / 'odd.jsonl', [{'body': 'x'}])}",
        ["prompt_column", "odd.jsonl", "body"],
    ),
    "unknown output column": (
        lambda d, t: f"kind=file,path={d / 'prompts.parquet'},output_tokens_count_column=len",
        ["output_tokens_count_column", "prompts.parquet", "'len'", "other"],
    ),
    "bad output length": (
        lambda d, t: f"kind=file,path={write_jsonl(t / 'neg.jsonl', [{'prompt': 'x', 'output_tokens': -3}])}",
        ["output_tokens_count_column", "neg.jsonl", "record 1", "-3"],
    ),
    "missing prompt text": (
        lambda d, t: f"kind=file,path={write_jsonl(t / 'null.jsonl', [{'prompt': 'a'}, {'prompt': None}])}",
        ["prompt_column", "null.jsonl", "record 2"],
    ),
    "chat messages without content": (
        lambda d, t: "kind=file,path=" + str(write_jsonl(t / "chat.jsonl", [{"prompt": [{"role": "user"}]}])),
        ["prompt_column", "chat.jsonl", "record 1", "role and a content"],
    ),
    "empty data set": (lambda d, t: f"kind=file,path={_empty(t)}", ["path", "empty.jsonl", "empty"]),
    "undecodable bytes": (lambda d, t: f"kind=file,path={_undecodable(t)}", ["path", "bad.jsonl", "not UTF-8"]),
    "undecodable CSV column": (
        lambda d, t: "kind=file,path=" + str(write(t / "bad.csv", b"prompt,n\n\xff\xfe,1\n")),
        ["prompt_column", "bad.csv", "record 1", "not UTF-8"],
    ),
    "undecodable text file": (
        lambda d, t: "kind=file,path=" + str(write(t / "bad.txt", b"fine\n\xff\xfe\n")),
        ["path", "bad.txt", "not UTF-8"],
    ),
    "prompts longer than the context": (
        lambda d, t: f"kind=file,path={_long(t)},output_tokens=8",
        ["too_long", "long.jsonl", "2 of the 3 records", "4096", "record 1", "too_long=skip"],
    ),
    "every prompt too long, skipped": (
        lambda d, t: f"kind=file,path={write_jsonl(t / 'long.jsonl', [{'prompt': 'y' * 5000}])},too_long=skip",
        ["path", "long.jsonl", "no usable records", "1 too long"],
    ),
    "unknown split": (
        lambda d, t: f"kind=dataset,path={d / 'saved_splits'},split=dev",
        ["split", "'dev'", "train, test"],
    ),
    "sharegpt without conversations": (
        lambda d, t: f"kind=sharegpt,path={d / 'prompts.jsonl'}",
        ["conversations_column", "prompts.jsonl", "'conversations'", "prompt"],
    ),
    "unknown data option": (
        lambda d, t: f"kind=file,path={d / 'prompts.jsonl'},prompt_col=x",
        ["--data", "prompt_col"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_data_exits_2_naming_option_file_and_field(
    case: str, tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec, names = BAD[case]
    output = tmp_path / "never.json"
    argv = ["run", "--quiet", "--backend", backend(**{"vllm_config.max_model_len": 4096}), "--profile"]
    argv += ["kind=throughput", "--constraint", "kind=max_requests,count=5", "--output", str(output)]
    assert cli([*argv, "--data", make_spec(data, tmp_path)]) == 2
    message = capsys.readouterr().err.strip()
    assert "Traceback" not in message
    assert len(message.splitlines()) == 1, message
    assert "--data" in message, message
    for name in names:
        assert name in message, (name, message)
    assert not output.exists()
