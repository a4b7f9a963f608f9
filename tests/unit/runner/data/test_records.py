"""Reading JSONL in blocks of whole lines: records longer than a block, blank lines, a last line without its newline
and Windows line ends read as pyarrow's own reader reads them; the seeded shuffle still mixes a small file whole."""

from __future__ import annotations

import json
from pathlib import Path

from batchmark.runner.config.data import FileDataConfig
from batchmark.runner.data import records
from batchmark.runner.data.records import load_records


def utf8_bytes(text: str) -> int:
    return len(text.encode())


def prompts(path: Path, **options: object) -> list[str]:
    loaded = load_records(FileDataConfig(path=str(path), **options), utf8_bytes, None)
    return [sample.prompt for sample in loaded.samples]  # type: ignore[misc]


def test_a_record_longer_than_a_block_is_read_whole(tmp_path: Path) -> None:
    long = "w" * (3 * records._BLOCK_BYTES)
    lines = [json.dumps({"prompt": text}) for text in ("first", long, "after")]
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert prompts(path, output_tokens=1) == ["first", long, "after"]


def test_blank_lines_crlf_and_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b'{"prompt": "a"}\r\n\r\n{"prompt": "b"}\n\n{"prompt": "c"}')
    assert prompts(path, output_tokens=1) == ["a", "b", "c"]


def test_blocks_split_only_at_line_ends(tmp_path: Path) -> None:
    texts = [f"record {index} " + "x" * (index % 97) for index in range(30_000)]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in texts), encoding="utf-8")
    assert path.stat().st_size > 2 * records._BLOCK_BYTES
    assert b"".join(records._line_blocks(path)) == path.read_bytes()
    assert all(block.endswith(b"\n") for block in records._line_blocks(path))
    assert prompts(path, samples=30_000, output_tokens=1) == texts


def test_the_shuffle_of_a_small_file_is_a_seeded_permutation_of_all_of_it(tmp_path: Path) -> None:
    texts = [f"prompt {index}" for index in range(500)]
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in texts), encoding="utf-8")
    first = prompts(path, samples=500, shuffle=True, seed=1, output_tokens=1)
    assert sorted(first) == sorted(texts)
    assert first != texts
    assert first == prompts(path, samples=500, shuffle=True, seed=1, output_tokens=1)
    assert first != prompts(path, samples=500, shuffle=True, seed=2, output_tokens=1)
    # Records from the whole file come first, not only from its beginning.
    first_fifty = [int(text.split()[1]) for text in first[:50]]
    assert max(first_fifty) > 400
    assert 150 < sum(first_fifty) / 50 < 350
