"""The exit codes of ``batchmark`` (README, "Exit codes"), shared by every command and read by the operator.

0 the run ended as configured and every output was written; 1 an unexpected error; 2 bad input, found before any
work; 3 the engine failed to load or its process died mid-run (the results so far are written, marked incomplete
with the reason); 4 an output could not be written (the others were); 128 + N stopped by signal N (130 Ctrl-C,
143 SIGTERM; results written, marked incomplete). ``batchmark results`` adds 5: the cluster's API server could not be
reached or refused the request.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_ENGINE_FAILED: Final = 3
EXIT_OUTPUT_FAILED: Final = 4
EXIT_CLUSTER: Final = 5
