"""Reading the user's records: JSONL a line at a time (records of any length, blank lines, a last line without its
newline, Windows line ends, columns of mixed types the run does not use), CSV with quoted newlines, a JSON list
one item at a time, errors at the file's own line; the seeded shuffle a uniform draw from the whole file."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from batchmark.runner.config.data import FileDataConfig, ShareGptDataConfig
from batchmark.runner.data.records import DataError, LoadedRecords, load_records


def utf8_bytes(text: str) -> int:
    return len(text.encode())


def load(path: Path, **options: object) -> LoadedRecords:
    return load_records(FileDataConfig(path=str(path), **options), utf8_bytes, None)


def prompts(path: Path, **options: object) -> list[str]:
    return [sample.prompt for sample in load(path, **options).samples]  # type: ignore[misc]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_record_of_several_megabytes_is_read_whole(tmp_path: Path) -> None:
    long = "w" * (3 << 20)
    path = write_jsonl(tmp_path / "long.jsonl", [{"prompt": text} for text in ("first", long, "after")])
    assert prompts(path, output_tokens=1) == ["first", long, "after"]


def test_blank_lines_crlf_and_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b'{"prompt": "a"}\r\n\r\n{"prompt": "b"}\n\n{"prompt": "c"}')
    assert prompts(path, output_tokens=1) == ["a", "b", "c"]


def test_every_line_of_a_large_file_is_read_in_order(tmp_path: Path) -> None:
    texts = [f"record {index} " + "x" * (index % 97) for index in range(30_000)]
    path = write_jsonl(tmp_path / "many.jsonl", [{"prompt": text} for text in texts])
    assert prompts(path, samples=30_000, output_tokens=1) == texts


def test_a_column_of_mixed_types_the_run_does_not_use_is_read(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"prompt": f"p{index}", "meta": index if index % 2 else "text"} for index in range(6)
    ]
    rows.append({"prompt": "last", "meta": {"nested": [1, "two"]}})
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    assert prompts(path, output_tokens=1) == [str(row["prompt"]) for row in rows]


def test_a_bad_line_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "broken.jsonl", [{"prompt": f"p{index}"} for index in range(30_000)])
    with path.open("a", encoding="utf-8") as file:
        file.write('{"prompt": "cut off\n')
    with pytest.raises(DataError, match=r"broken\.jsonl: cannot read it: line 30001: not JSON"):
        load(path, samples=50_000, output_tokens=1)


def test_a_line_that_is_no_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "list.jsonl"
    path.write_text('{"prompt": "a"}\n\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 3: a JSON list where a record \(an object\) belongs"):
        load(path, output_tokens=1)


def test_a_csv_with_quoted_newlines_as_pythons_csv_writes_it(tmp_path: Path) -> None:
    rows = [(f'line one of {index}\nline two, with a comma\r\nand "quotes"', 1 + index % 5) for index in range(40_000)]
    path = tmp_path / "multiline.csv"
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["prompt", "output_tokens_count", "meta"])
        writer.writerows(
            (prompt, output, index if index % 2 else "text") for index, (prompt, output) in enumerate(rows)
        )
    assert path.stat().st_size > 2 << 20  # quoted newlines across any reader's blocks of 1 MiB
    loaded = load(path, samples=40_000)
    assert [(sample.prompt, sample.output_tokens) for sample in loaded.samples] == rows
    assert loaded.read == 40_000


def test_a_bad_csv_row_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    path.write_text('prompt,n\n"a\nb",1\nc,2\nd\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"short\.csv: cannot read it: line 5: 1 values where the header names 2"):
        load(path, output_tokens=1)


def test_a_csv_output_length_that_is_no_number_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "words.csv"
    path.write_text("prompt,output_tokens\na,3\nb,three\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"record 2 has 'three' in 'output_tokens'"):
        load(path)


def test_a_json_list_and_json_lines_in_a_json_file(tmp_path: Path) -> None:
    rows = [
        {"prompt": f"p{index}", "output_tokens_count": 1 + index, "meta": [index] if index % 2 else None}
        for index in range(40)
    ]
    listed = tmp_path / "list.json"
    listed.write_text("\ufeff \n" + json.dumps(rows, indent=1), encoding="utf-8")
    lines = write_jsonl(tmp_path / "lines.json", rows)
    assert load(listed, samples=40).content_hash == load(lines, samples=40).content_hash
    assert [(s.prompt, s.output_tokens) for s in load(listed, samples=40).samples] == [
        (row["prompt"], row["output_tokens_count"]) for row in rows
    ]
    not_records = tmp_path / "numbers.json"
    not_records.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DataError, match="item 1 of the list: a JSON int"):
        load(not_records)


def test_a_json_list_is_streamed_without_datasets(tmp_path: Path) -> None:
    conversations = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}] * 3
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations), encoding="utf-8")
    script = (
        "import sys\n"
        "from batchmark.runner.config.data import ShareGptDataConfig\n"
        "from batchmark.runner.data.records import load_records\n"
        f"loaded = load_records(ShareGptDataConfig(path={str(path)!r}), len, None)\n"
        "print(len(loaded.samples), 'datasets' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["3", "False"]
    assert len(load_records(ShareGptDataConfig(path=str(path)), len, None).samples) == 3


def test_the_shuffle_of_a_small_file_is_a_seeded_permutation_of_all_of_it(tmp_path: Path) -> None:
    texts = [f"prompt {index}" for index in range(500)]
    path = write_jsonl(tmp_path / "small.jsonl", [{"prompt": text} for text in texts])
    first = prompts(path, samples=500, shuffle=True, seed=1, output_tokens=1)
    assert sorted(first) == sorted(texts)
    assert first != texts
    assert first == prompts(path, samples=500, shuffle=True, seed=1, output_tokens=1)
    assert first != prompts(path, samples=500, shuffle=True, seed=2, output_tokens=1)
    # Records from the whole file come first, not only from its beginning.
    first_fifty = [int(text.split()[1]) for text in first[:50]]
    assert max(first_fifty) > 400
    assert 150 < sum(first_fifty) / 50 < 350


def test_the_shuffle_draws_uniformly_from_the_whole_of_a_sorted_file(tmp_path: Path) -> None:
    # 50,000 prompts of 1 to 50 tokens (UTF-8 bytes), sorted by length: the file's mean is 25.5.
    lengths = [1 + index * 50 // 50_000 for index in range(50_000)]
    path = write_jsonl(tmp_path / "sorted.jsonl", [{"prompt": "x" * length} for length in lengths])
    for seed in (1, 2, 3):
        loaded = load(path, samples=1000, shuffle=True, seed=seed, output_tokens=1)
        mean = sum(sample.prompt_tokens for sample in loaded.samples) / len(loaded.samples)
        assert abs(mean - 25.5) / 25.5 < 0.04, (seed, mean)
        assert loaded.read == 50_000  # the whole file was read to draw from it
        assert len(loaded.samples) == 1000
    # In the file's order only the head is read.
    assert load(path, samples=1000, output_tokens=1).read == 1000


def test_the_shuffle_skips_what_does_not_fit_and_still_takes_its_samples(tmp_path: Path) -> None:
    rows = [{"prompt": "y" * (200 if index % 3 == 0 else 10)} for index in range(3000)]
    path = write_jsonl(tmp_path / "some_long.jsonl", rows)
    config = FileDataConfig(path=str(path), samples=500, shuffle=True, too_long="skip", output_tokens=5)
    loaded = load_records(config, utf8_bytes, 100)
    assert len(loaded.samples) == 500
    assert {sample.prompt_tokens for sample in loaded.samples} == {10}
    assert loaded.skipped_too_long > 0
    assert loaded.read == 3000
