"""``request_format``: how a request's messages become the prompt the engine sees.

* ``plain``: message contents joined; our synthetic requests carry one message whose content already is token
  ids, so the prompt goes to the engine as those ids (``TokensPrompt``) and keeps its exact length.
* ``default-template``: the tokenizer's own chat template with ``add_generation_prompt``.
* a Jinja2 chat template, inline (recognised by ``{{``, ``{%`` or ``{#``) or a file path, rendered in a
  sandboxed environment (a template is user input: it must not reach Python internals).

Templated prompts are rendered to text, then tokenized once here, so the engine still receives token ids and
does no tokenization of its own inside the timed ``generate()``.

A synthetic request's content in a template is text, and the text of random token ids does not tokenize back
to as many tokens: 256 random ids came back as 299 on average on the tests' tokenizer (bytes that are no
character on their own, pieces that merge). So the content is fitted: its text tokenizes to exactly the
requested count, as a user's prompt of that many tokens would, and the template's own tokens come on top (the
report's prompt tokens are what the engine got, template included; the config holds what was asked).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import jinja2
import jinja2.sandbox

from batchmark.runner.data.records import prompt_text
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.prompts import TokenPromptFactory

_JINJA_MARKERS = ("{{", "{%", "{#")
# What a template is rendered against when checked before a run: the shape of our synthetic requests.
_PROBE_MESSAGES = [{"role": "user", "content": "batchmark request-format check"}]


class RequestFormatError(ValueError):
    """``request_format`` cannot be used; raised before any timing starts."""


@dataclass(frozen=True)
class RequestFormat:
    kind: Literal["plain", "default-template", "jinja"]
    template: str | None = None  # the Jinja2 source for kind "jinja"
    origin: str = ""  # "inline" or the file it came from, for messages


def parse_request_format(value: str) -> RequestFormat:
    """Read the option; a Jinja2 template must parse (file read and syntax checked, nothing rendered)."""
    if value == "plain":
        return RequestFormat(kind="plain")
    if value == "default-template":
        return RequestFormat(kind="default-template")
    if any(marker in value for marker in _JINJA_MARKERS):
        source, origin = value, "inline"
    else:
        path = Path(value).expanduser()
        if not path.is_file():
            raise RequestFormatError(
                f"backend.request_format={value!r}: expected 'plain', 'default-template', an inline Jinja2 "
                "template (containing '{{', '{%' or '{#') or the path of a template file, and no such file exists"
            )
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise RequestFormatError(f"backend.request_format: cannot read {path}: {error}") from error
        origin = str(path)
    compile_template(source, origin)
    return RequestFormat(kind="jinja", template=source, origin=origin)


def _raise_exception(message: str) -> None:
    # Chat templates call raise_exception() to reject bad conversations (as Hugging Face's renderer allows).
    raise jinja2.TemplateError(message)


def compile_template(source: str, origin: str = "inline") -> jinja2.Template:
    # The same settings Hugging Face uses for chat templates, so templates written for it render the same.
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise_exception
    try:
        return environment.from_string(source)
    except jinja2.TemplateError as error:
        raise RequestFormatError(f"backend.request_format ({origin}): invalid Jinja2 template: {error}") from error


def render_template(
    template: jinja2.Template, messages: list[dict[str, str]], bos_token: str = "", eos_token: str = ""
) -> str:
    return template.render(messages=messages, add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token)


def check_request_format(value: str) -> None:
    """Cheap check for the main process: the option parses and a Jinja2 template renders a probe request."""
    request_format = parse_request_format(value)
    if request_format.template is None:
        return
    template = compile_template(request_format.template, request_format.origin)
    try:
        render_template(template, _PROBE_MESSAGES)
    except Exception as error:  # any failure of a user template is a config error, reported as such
        raise RequestFormatError(
            f"backend.request_format ({request_format.origin}): the template fails to render: "
            f"{type(error).__name__}: {error}"
        ) from error


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer that prompt building uses."""

    bos_token: Any
    eos_token: Any

    def decode(self, token_ids: list[int], **kwargs: Any) -> str: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


class ChatPromptBuilder:
    """Builds ``TokensPrompt``s in the configured format; the key (the final token ids) identifies the output."""

    def __init__(
        self,
        request_format: RequestFormat,
        tokenizer: Tokenizer,
        factory: TokenPromptFactory,
        tokens_prompt: Any,
    ) -> None:
        self.request_format = request_format
        self._tokenizer = tokenizer
        self._factory = factory
        self._tokens_prompt = tokens_prompt
        self._template = (
            compile_template(request_format.template, request_format.origin)
            if request_format.template is not None
            else None
        )

    def token_ids(self, spec: RequestSpec) -> list[int]:
        if spec.prompt is not None:
            # The user's own prompt: tokenized as the main process counted it (no special tokens added).
            if self.request_format.kind == "plain":
                return list(self._tokenizer.encode(prompt_text(spec.prompt), add_special_tokens=False))
            if isinstance(spec.prompt, str):
                messages = [{"role": "user", "content": spec.prompt}]
            else:
                messages = [{"role": role, "content": content} for role, content in spec.prompt]
        else:
            content_ids = self._factory.token_ids(spec)
            if self.request_format.kind == "plain":
                return content_ids
            messages = [{"role": "user", "content": fitted_text(self._tokenizer, content_ids)}]
        if self._template is None:
            text = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = render_template(
                self._template, messages, _token_text(self._tokenizer.bos_token), _token_text(self._tokenizer.eos_token)
            )
        if not isinstance(text, str):
            raise RequestFormatError(f"the chat template rendered {type(text).__name__}, not text")
        # The template writes any special tokens itself; the tokenizer must not add a second BOS.
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def build(self, spec: RequestSpec) -> tuple[Any, Hashable]:
        token_ids = self.token_ids(spec)
        return self._tokens_prompt(prompt_token_ids=token_ids), tuple(token_ids)

    def output_key(self, output: Any) -> Hashable:
        return tuple(output.prompt_token_ids)

    def probe(self) -> None:
        """Render one request now, so a template that fails is a config error before any timing starts."""
        try:
            token_ids = self.token_ids(RequestSpec(0, 8, 1, -1, 0))
        except Exception as error:  # a failing template (or tokenizer) is a config error, whatever it raises
            raise RequestFormatError(
                f"backend.request_format={self.request_format.kind}"
                f"{' (' + self.request_format.origin + ')' if self.request_format.origin else ''}: "
                f"building a prompt failed: {type(error).__name__}: {error}"
            ) from error
        if not token_ids:
            raise RequestFormatError(f"backend.request_format={self.request_format.kind}: the prompt came out empty")


# Rounds of encode and cut (or extend): the first leaves the tokenizer's own tokens, which decode and encode to
# themselves but where a cut splits a character's bytes.
_FIT_ROUNDS = 4
# What decoding writes for bytes that are no character (random ids are often parts of one): no content of ours.
_NOT_A_CHARACTER = "\ufffd"


def fitted_text(tokenizer: Tokenizer, token_ids: list[int]) -> str:
    """Text made from ``token_ids`` that tokenizes to as many tokens as they are: their text without the
    pieces of characters they split, encoded, cut to the count (or extended with its own start) and decoded
    again until it holds. After ``_FIT_ROUNDS`` the closest text is kept (the engine's count is what the
    report shows)."""
    wanted = len(token_ids)
    text = tokenizer.decode(token_ids).replace(_NOT_A_CHARACTER, "")
    first: list[int] | None = None
    for _ in range(_FIT_ROUNDS):
        encoded = list(tokenizer.encode(text, add_special_tokens=False))
        if len(encoded) == wanted or not encoded:
            return text
        first = encoded if first is None else first
        text = tokenizer.decode((encoded + first * (wanted // len(first) + 1))[:wanted]).replace(_NOT_A_CHARACTER, "")
    return text


def _token_text(token: Any) -> str:
    return token if isinstance(token, str) else ""
