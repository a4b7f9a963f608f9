"""What the tests need to know about the chart's PromQL (the dashboards' and the alert rules'): the queries,
their variables, and whether they name only the series and labels of the metrics contract
(batchmark.runner.series), read with a real PromQL parser."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import promql_parser as promql

from batchmark.runner import series as contract

# Series Prometheus writes itself for every target, which a query may read, with the labels it gives them.
PROMETHEUS_OWN: Final = {"up": frozenset(contract.SCRAPE_LABELS)}
# What a template or a dashboard variable stands for while its expression is parsed: any duration, any value.
_GRAFANA_DURATIONS: Final = re.compile(r"\$(?:__rate_interval|__range|__interval)\b")
_GRAFANA_VARIABLES: Final = re.compile(r"\$\{?\w+\}?")
_TEMPLATE_ACTIONS: Final = re.compile(r"\{\{.*?\}\}")


def parse(expr: str) -> promql.Expr:
    """The expression with Grafana's variables (a duration where it takes one, a value elsewhere) or Helm's
    template actions (a number, or a value in a string) put in."""
    expr = _TEMPLATE_ACTIONS.sub("1", expr)
    expr = _GRAFANA_DURATIONS.sub("5m", expr)
    return promql.parse(_GRAFANA_VARIABLES.sub("value", expr))


def series_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    names: set[str] = set()

    def visit(node: promql.Expr) -> None:
        if isinstance(node, promql.VectorSelector) and node.name is not None:
            names.add(node.name)

    promql.walk(parse(expr), visit)
    return names


def contract_problems(expr: str) -> list[str]:
    """What in an expression the contract does not declare: a series name, a label of a matcher, a `by`,
    `without`, `on`, `ignoring` or `group_left` clause, or one that the aggregated expression does not carry."""
    problems: list[str] = []
    _labels(parse(expr), problems)
    return problems


def _labels(node: promql.Expr, problems: list[str]) -> frozenset[str]:
    """The labels the expression's result may carry, the problems found on the way added to ``problems``."""
    if isinstance(node, promql.VectorSelector):
        return _selector_labels(node, problems)
    if isinstance(node, promql.MatrixSelector):
        return _selector_labels(node.vector_selector, problems)
    if isinstance(node, promql.ParenExpr | promql.UnaryExpr | promql.SubqueryExpr):
        return _labels(node.expr, problems)
    if isinstance(node, promql.AggregateExpr):
        return _aggregate_labels(node, problems)
    if isinstance(node, promql.BinaryExpr):
        return _binary_labels(node, problems)
    if isinstance(node, promql.Call):
        return _call_labels(node, problems)
    return frozenset()  # a number or a string


def _selector_labels(selector: promql.VectorSelector, problems: list[str]) -> frozenset[str]:
    name = selector.name
    matched = {matcher.name for matcher in selector.matchers.matchers} - {"__name__"}
    if name is None:
        problems.append(f"a selector without a series name: {matched}")
        return frozenset()
    if name in PROMETHEUS_OWN:
        candidates = [PROMETHEUS_OWN[name]]
    else:
        candidates = [declared.labels_of(name) for declared in contract.selected_by(name)]
    if not candidates:
        problems.append(f"{name} is not a declared series")
        return frozenset()
    # Two sides may export one series with different labels: the matchers pick those that have them all.
    fitting = [labels for labels in candidates if matched <= labels]
    if not fitting:
        problems.append(f"{name} has no label {sorted(matched - frozenset().union(*candidates))}")
        return frozenset().union(*candidates)
    return frozenset().union(*fitting)


def _aggregate_labels(node: promql.AggregateExpr, problems: list[str]) -> frozenset[str]:
    inner = _labels(node.expr, problems)
    if isinstance(node.param, promql.Expr):
        _labels(node.param, problems)
    if node.modifier is None:
        return frozenset()
    named = frozenset(node.modifier.labels)
    grouping = node.modifier.type == promql.AggModifierType.By
    if named - inner:
        clause = "by" if grouping else "without"
        problems.append(f"{node.op} {clause} {sorted(named - inner)}: not a label of {node.expr}")
    return named if grouping else inner - named


def _binary_labels(node: promql.BinaryExpr, problems: list[str]) -> frozenset[str]:
    lhs = _labels(node.lhs, problems)
    rhs = _labels(node.rhs, problems)
    modifier = node.modifier
    if modifier is not None and modifier.matching is not None:
        for side, labels in (("left", lhs), ("right", rhs)):
            missing = set(modifier.matching.labels) - labels
            if missing:
                problems.append(f"on/ignoring {sorted(missing)}: not a label of the {side} side of {node}")
    if modifier is not None and modifier.group_labels:
        missing = set(modifier.group_labels) - (lhs | rhs)
        if missing:
            problems.append(f"group_left/right {sorted(missing)}: not a label of either side of {node}")
    return lhs | rhs


def _call_labels(node: promql.Call, problems: list[str]) -> frozenset[str]:
    labels = frozenset().union(*(_labels(arg, problems) for arg in node.args if isinstance(arg, promql.Expr)))
    if node.func.name == "histogram_quantile":
        return labels - {"le"}
    if node.func.name == "label_replace" and isinstance(node.args[1], promql.StringLiteral):
        return labels | {node.args[1].val}
    return labels


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expr) for every PromQL expression of a dashboard's JSON: panel targets (rows' panels
    included), variable queries and annotations."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            yield from walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                yield f"panel {panel['title']!r} {target['refId']}", target["expr"]

    yield from walk(board.get("panels", []))
    for variable in board.get("templating", {}).get("list", []):
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["query"]["query"])
            assert match is not None, variable
            yield f"variable {variable['name']}", match.group(1)
    for annotation in board.get("annotations", {}).get("list", []):
        yield f"annotation {annotation['name']!r}", annotation["expr"]


def variable_labels(board: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(where, expr, label) for each variable that lists a label's values (``label_values(expr, label)``)."""
    for variable in board.get("templating", {}).get("list", []):
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["query"]["query"])
            assert match is not None, variable
            yield f"variable {variable['name']}", match.group(1), match.group(2)


def rule_queries(template: str) -> Iterator[tuple[str, str]]:
    """(alert, expr) for every rule of a Helm template of alert rules, its template actions left in: an
    ``expr:`` on one line or folded (``>-``) over the lines indented under it."""
    lines = template.splitlines()
    alert = ""
    for number, line in enumerate(lines):
        named = re.match(r"\s*- alert: (\S+)", line)
        if named:
            alert = named.group(1)
        found = re.match(r"(\s*)expr: *(.*)$", line)
        if found is None:
            continue
        indent, value = len(found.group(1)), found.group(2).strip()
        if value not in {">-", ">", "|", "|-"}:
            yield alert, value
            continue
        folded = []
        for following in lines[number + 1 :]:
            if len(following) - len(following.lstrip()) <= indent:
                break
            folded.append(following.strip())
        yield alert, " ".join(folded)


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's interpolation of `$name` and `${name}` (longest names first), as a data source would see it."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    leftover = re.findall(r"\$\{?\w+", expr)
    assert not leftover, f"unsubstituted {leftover} in {expr}"
    return expr
