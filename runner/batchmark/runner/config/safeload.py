"""YAML and JSON that a person or a cluster hands over, read so that it cannot exhaust memory or hide a mistake.

A file named by an option (a run config, a kubeconfig, the operator's defaults) is read by ``read_document``: at
most ``MAX_CONFIG_BYTES``, UTF-8, parsed with the bounds below, every problem one line that names the option and
the file as the user wrote them.

A few hundred bytes of YAML anchors and aliases can stand for billions of nodes ("billion laughs"): the parser
shares them, but everything that walks the result copies them. So the size a document has once its aliases are
expanded is measured on the parsed node graph, before any Python object is built, and bounded; an alias that
holds itself is refused. A key given twice in one mapping is an error, as on the command line, instead of the
last one silently winning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_MERGE_TAG = "tag:yaml.org,2002:merge"

# A config is small: a ConfigMap holds at most 1 MiB, and a file larger than that is not a config. Its YAML
# aliases may expand it to a few times its size, never to the billions of nodes a few of them can stand for.
MAX_CONFIG_BYTES = 2**20
MAX_CONFIG_EXPANDED = 4 * MAX_CONFIG_BYTES


class DocumentError(ValueError):
    """A document that is valid syntax but too big once expanded, or that gives one key twice."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (``<<`` merges may still be overridden)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the safe loader's own error names it
                continue
            if duplicate:
                raise DocumentError(f"found key {key!r} twice in one mapping (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, max_expanded: int) -> Any:
    """The document's value; ``max_expanded`` bounds its nodes plus its scalars' characters with every alias
    expanded. yaml.YAMLError for bad syntax, DocumentError beyond the bound or for a key given twice."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        size = _expanded_size(root, max_expanded)
        if size > max_expanded:
            raise DocumentError(
                f"expands to more than {max_expanded:,} nodes and characters once its aliases are expanded"
            )
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _expanded_size(root: Node, limit: int) -> int:
    """Nodes plus scalar characters, each alias counted as the whole of what it stands for; stops past ``limit``."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise DocumentError(f"an alias holds itself (line {node.start_mark.line + 1})")
        open_nodes.add(key)
        total = 1
        if isinstance(node, ScalarNode):
            total += len(node.value)
        elif isinstance(node, SequenceNode):
            for item in node.value:
                total += size(item)
                if total > limit:
                    break
        elif isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                total += size(key_node) + size(value_node)
                if total > limit:
                    break
        open_nodes.discard(key)
        sizes[key] = total
        return total

    return size(root)


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what is wrong and where, without its excerpt of the text."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{error.problem}{where}"
    return " ".join(str(error).split())


def load_json(text: str) -> Any:
    """The document's value; json.JSONDecodeError for bad syntax, DocumentError for a key given twice."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DocumentError(f"found key {key!r} twice in one object")
        result[key] = value
    return result


class UnusableFile(ValueError):
    """A file named by an option that cannot be read or parsed; the message is one line and names both."""


def read_document(path: Path, option: str, what: str) -> Any:
    """The value of the file ``option`` names: JSON if its name ends in .json, else YAML; ``what`` says what it
    should be ("a kubeconfig") in the messages. UnusableFile for a file that cannot be read, is larger than
    MAX_CONFIG_BYTES, is not UTF-8, is not valid, expands past MAX_CONFIG_EXPANDED, gives a key twice or nests
    too deeply for the parser."""
    where = f"{option}: {path}"
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise UnusableFile(f"{where}: cannot read it: {error.strerror or error}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UnusableFile(f"{where}: larger than {MAX_CONFIG_BYTES // 2**20} MiB, too large for {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnusableFile(f"{where}: not {what}: not UTF-8 text (byte {error.start})") from None
    try:
        return load_json(text) if path.suffix.lower() == ".json" else load_yaml(text, MAX_CONFIG_EXPANDED)
    except json.JSONDecodeError as error:
        raise UnusableFile(f"{where}: not {what}: not JSON: {error}") from None
    except yaml.YAMLError as error:
        raise UnusableFile(f"{where}: not {what}: not YAML: {describe_yaml_error(error)}") from None
    except DocumentError as error:
        raise UnusableFile(f"{where}: not {what}: {error}") from None
    except RecursionError:
        raise UnusableFile(f"{where}: not {what}: nested too deeply") from None
