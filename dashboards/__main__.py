"""Write the dashboards into the chart: `.venv/bin/python -m dashboards` (`--check` only compares)."""

from __future__ import annotations

import argparse
import sys

from dashboards.build import CHART_DASHBOARDS, render_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed file differs; write nothing")
    arguments = parser.parse_args(argv)
    stale = []
    for file_name, text in render_all().items():
        path = CHART_DASHBOARDS / file_name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(file_name)
        if not arguments.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    verb = "stale" if arguments.check else "wrote"
    for file_name in stale:
        print(f"{verb}: {CHART_DASHBOARDS / file_name}")
    return 1 if arguments.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
