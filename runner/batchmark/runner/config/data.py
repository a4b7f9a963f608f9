"""The data section (``--data``): synthetic prompts, or the user's own from a file, a dataset or ShareGPT."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from batchmark.runner.config.base import MAX_CONTEXT_TOKENS, MAX_SAMPLES, MAX_SEED, ConfigModel


class SyntheticTextDataConfig(ConfigModel):
    """Synthetic prompts of exact token lengths with pinned output lengths."""

    kind: Literal["synthetic_text"] = Field(default="synthetic_text", description="Data source type.")
    prompt_tokens: int = Field(ge=1, le=MAX_CONTEXT_TOKENS, description="Mean prompt length, tokens.")
    prompt_tokens_stdev: float = Field(
        default=0, ge=0, le=MAX_CONTEXT_TOKENS, description="Standard deviation of prompt length."
    )
    prompt_tokens_min: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Shortest prompt, tokens."
    )
    prompt_tokens_max: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Longest prompt, tokens."
    )
    output_tokens: int = Field(
        ge=1, le=MAX_CONTEXT_TOKENS, description="Mean output length, tokens (pinned with ignore_eos)."
    )
    output_tokens_stdev: float = Field(
        default=0, ge=0, le=MAX_CONTEXT_TOKENS, description="Standard deviation of output length."
    )
    output_tokens_min: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Shortest output, tokens."
    )
    output_tokens_max: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Longest output, tokens."
    )
    samples: int = Field(
        default=1000, ge=1, le=MAX_SAMPLES, description="Distinct length pairs drawn; requests cycle through them."
    )
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Seed for lengths and prompt content.")
    prefix_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_CONTEXT_TOKENS,
        description="Tokens of shared prefix at the start of each prompt (0: none).",
    )
    prefix_count: int = Field(default=1, ge=1, description="Number of distinct shared prefixes.")

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> SyntheticTextDataConfig:
        for name in ("prompt_tokens", "output_tokens"):
            low = getattr(self, f"{name}_min")
            high = getattr(self, f"{name}_max")
            if low is not None and high is not None and low > high:
                raise ValueError(f"{name}_min ({low}) is greater than {name}_max ({high})")
        # The shortest request the data can make must fit some model's context window.
        shortest = (
            self.prefix_tokens
            + min(self.prompt_tokens, self.prompt_tokens_max or self.prompt_tokens)
            + min(self.output_tokens, self.output_tokens_max or self.output_tokens)
        )
        if shortest > MAX_CONTEXT_TOKENS:
            raise ValueError(
                f"prefix_tokens + prompt_tokens + output_tokens = {shortest} tokens: more than any model's context"
                f" window ({MAX_CONTEXT_TOKENS})"
            )
        return self


# Column names tried, in this order, when prompt_column is not given (the spellings GuideLLM's users meet).
PROMPT_COLUMN_NAMES = ("prompt", "text", "input", "instruction", "question", "content", "query")


OUTPUT_TOKENS_COLUMN_NAMES = ("output_tokens_count", "output_tokens", "output_len")


class _RecordsDataConfig(ConfigModel):
    """What every kind of data read from records (files, datasets, conversations) shares."""

    path: str = Field(min_length=1, description="Where the data is: a file, a folder, or a Hugging Face dataset id.")
    prompt_column: str | None = Field(
        default=None,
        min_length=1,
        description="Column holding the prompt text (default: the first of " + ", ".join(PROMPT_COLUMN_NAMES) + ").",
    )
    output_tokens_count_column: str | None = Field(
        default=None,
        min_length=1,
        description="Column holding each request's output length, tokens (default: the first of "
        + ", ".join(OUTPUT_TOKENS_COLUMN_NAMES)
        + " present; none: output_tokens).",
    )
    output_tokens: int = Field(
        default=128,
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        description="Mean output length, tokens, for records that do not give one.",
    )
    output_tokens_stdev: float = Field(
        default=0, ge=0, le=MAX_CONTEXT_TOKENS, description="Standard deviation of the output length drawn."
    )
    output_tokens_min: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Shortest output drawn, tokens."
    )
    output_tokens_max: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Longest output drawn, tokens."
    )
    samples: int = Field(
        default=1000,
        ge=1,
        le=MAX_SAMPLES,
        description="Records taken from the data (fewer when it has fewer); requests cycle through them.",
    )
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Seed for shuffling and drawn output lengths.")
    shuffle: bool = Field(
        default=False,
        description="Take the samples as a seeded uniform draw from the whole data, in random order, instead of"
        " the data's first records in their own order (only the samples are held: memory stays bounded).",
    )
    too_long: Literal["refuse", "skip"] = Field(
        default="refuse",
        description="Records whose prompt and output exceed the model's context: 'refuse' the run, or 'skip'"
        " them (counted in the results). Never truncated.",
    )

    @model_validator(mode="after")
    def _output_bounds_are_ordered(self) -> _RecordsDataConfig:
        low, high = self.output_tokens_min, self.output_tokens_max
        if low is not None and high is not None and low > high:
            raise ValueError(f"output_tokens_min ({low}) is greater than output_tokens_max ({high})")
        return self


class FileDataConfig(_RecordsDataConfig):
    """A local file of prompts: .jsonl, .json, .csv, .parquet or .txt (a prompt a line), by its extension."""

    kind: Literal["file"] = Field(default="file", description="Data source type.")


class DatasetDataConfig(_RecordsDataConfig):
    """A Hugging Face dataset: a folder from save_to_disk, a folder of data files, or a hub id (HF_HOME cache)."""

    kind: Literal["dataset"] = Field(default="dataset", description="Data source type.")
    split: str | None = Field(
        default=None, min_length=1, description="Split to read (default: train, else the only or first split)."
    )
    config: str | None = Field(default=None, min_length=1, description="The dataset's configuration (subset) name.")


class ShareGptDataConfig(_RecordsDataConfig):
    """ShareGPT conversations (JSON, JSONL): first human turn = prompt, its answer's length = output length."""

    kind: Literal["sharegpt"] = Field(default="sharegpt", description="Data source type.")
    conversations_column: str = Field(
        default="conversations", min_length=1, description="Column holding each record's list of turns."
    )


RecordsDataConfig = FileDataConfig | DatasetDataConfig | ShareGptDataConfig


def _synthetic_by_default(data: Any) -> Any:
    """A data spec without a kind is synthetic text, as before there were other kinds."""
    if isinstance(data, dict) and "kind" not in data:
        return {"kind": "synthetic_text", **data}
    return data


DataConfig = Annotated[
    SyntheticTextDataConfig | FileDataConfig | DatasetDataConfig | ShareGptDataConfig,
    Field(discriminator="kind"),
    BeforeValidator(_synthetic_by_default),
]
