"""The ``batchmark`` program (and ``python -m batchmark.runner``): signal handling first, then everything else.

Importing the command line's modules takes a second or more (pydantic, numpy, rich); a SIGTERM or Ctrl-C in
that second is handled like any other, because the handlers are installed before those imports.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from batchmark.runner.lifecycle.shutdown import Shutdown


def main(argv: Sequence[str] | None = None) -> int:
    shutdown = Shutdown.install()
    from batchmark.runner import cli  # noqa: PLC0415 - deliberately after the handlers

    code = cli.main(argv, shutdown=shutdown)
    shutdown.ignore_from_now_on()
    return code


if __name__ == "__main__":
    sys.exit(main())
