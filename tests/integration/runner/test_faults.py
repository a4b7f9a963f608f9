"""Faults while `batchmark run` works: signals at chosen moments, the engine's process dying, an output that cannot
be written at the end, a Pushgateway that never answers, the main process killed. Whatever happens, the
results so far are written (marked incomplete with the reason), the exit code says what happened, no
traceback is printed and no process is left behind.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchmark.runner.lifecycle.shutdown import SHUTDOWN_SECONDS
from tests.cli import read_results
from tests.integration.runner.harness import (
    Outcome,
    Program,
    assert_clean,
    assert_outputs,
    backend,
    batchmark,
    run_args,
)

pytestmark = pytest.mark.integration

SIGINT, SIGTERM, SIGKILL = signal.SIGINT, signal.SIGTERM, signal.SIGKILL
# Slack for a loaded two-core machine on top of the bounds under test.
SLACK = 5.0
LONG_RUN = "kind=max_duration,seconds=120"
LOADING = {"simulation.load_seconds": 120}


def every_format(tmp_path: Path) -> list[Path]:
    return [tmp_path / "r.json", tmp_path / "r.yaml", tmp_path / "r.csv", tmp_path / "r.html"]


def assert_report_reads(tmp_path: Path, results: Path) -> None:
    """`batchmark report` renders whatever `run` wrote, an incomplete or empty result included."""
    rendered = tmp_path / "again.html"
    outcome = batchmark(tmp_path, ["report", str(results), "-o", str(rendered)])
    assert outcome.code == 0, outcome.stderr
    assert rendered.read_text().rstrip().endswith("</html>")


def send(program: Program, number: int) -> None:
    """SIGINT as a terminal sends it (to the whole process group); SIGTERM as Kubernetes does (to the process)."""
    if number == SIGINT:
        if program.signalled_at is None:
            program.signalled_at = time.monotonic()
        os.killpg(program.pid, SIGINT)
    else:
        program.send(number)


def finish_after_signal(program: Program, signals: list[int]) -> Outcome:
    """The exit code names the signal; of two different signals sent back to back the process may see either
    first (Python runs pending handlers in signal-number order)."""
    outcome = program.finish(timeout=SHUTDOWN_SECONDS + 30)
    assert outcome.code in {128 + number for number in signals}, outcome.stderr
    assert_clean(outcome)
    assert outcome.seconds_after_signal is not None
    assert outcome.seconds_after_signal < SHUTDOWN_SECONDS + SLACK
    return outcome


# --- signals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [SIGTERM, SIGINT])
def test_a_signal_at_start_up_writes_an_empty_incomplete_result(tmp_path: Path, number: int) -> None:
    outputs = every_format(tmp_path)
    program = Program(tmp_path, run_args(outputs=outputs))
    program.wait_for_handlers()  # the first moment the program can act on it: before its slow imports
    send(program, number)
    finish_after_signal(program, [number])
    name = signal.Signals(number).name
    assert_outputs(outputs, complete=False, benchmarks=0, stop_reason=f"interrupted by {name} before the engine")
    assert read_results(outputs[0])["engine"]["loaded"] is False
    assert_report_reads(tmp_path, outputs[0])


@pytest.mark.parametrize("signals", [[SIGTERM], [SIGINT], [SIGINT, SIGINT], [SIGTERM, SIGTERM]])
def test_signals_while_the_engine_loads_stop_it_and_keep_an_empty_result(tmp_path: Path, signals: list[int]) -> None:
    outputs = every_format(tmp_path)
    program = Program(tmp_path, run_args(backend(**LOADING), outputs=outputs))
    program.worker()  # the engine's process exists: it is loading (for 120 s)
    for number in signals:
        send(program, number)
    outcome = finish_after_signal(program, signals)
    assert outcome.seconds_after_signal is not None
    assert outcome.seconds_after_signal < 60  # far from the 120 s the load would take
    assert_outputs(outputs, complete=False, benchmarks=0, stop_reason="before the engine had loaded")
    engine = read_results(outputs[0])["engine"]
    assert engine["loaded"] is False
    assert engine["model"] == "m"
    assert_report_reads(tmp_path, outputs[0])


def test_ctrl_c_again_and_again_while_the_process_exits_keeps_exit_code_130(tmp_path: Path) -> None:
    """A Ctrl-C that arrives while the interpreter shuts down (after the results were written) must not end the
    process by the signal: the parent would see -2, not 130, and take a finished run for a killed one."""
    output = tmp_path / "r.json"
    program = Program(tmp_path, run_args(backend(time_scale=1), constraint=LONG_RUN, outputs=[output]))
    program.wait_for("benchmark 1")
    send(program, SIGINT)
    deadline = time.monotonic() + SHUTDOWN_SECONDS + 30
    while "wrote" not in program.stderr() and program.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    # From the moment the results are written to the process's end, as fast as a held-down key repeats and faster.
    while program.process.poll() is None:
        try:
            os.killpg(program.pid, SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.001)
    outcome = program.finish(timeout=30)
    assert outcome.code == 128 + SIGINT, outcome.stderr
    assert_clean(outcome)
    assert_outputs([output], complete=False, benchmarks=1, stop_reason="interrupted by SIGINT")


@pytest.mark.parametrize("dispatch", ["batch", "continuous", "stream"])
@pytest.mark.parametrize("signals", [[SIGTERM], [SIGINT, SIGINT], [SIGTERM, SIGINT]])
def test_signals_mid_run_keep_the_results_so_far(tmp_path: Path, dispatch: str, signals: list[int]) -> None:
    outputs = every_format(tmp_path)
    program = Program(
        tmp_path, run_args(backend(dispatch=dispatch, time_scale=1), constraint=LONG_RUN, outputs=outputs)
    )
    program.wait_for("benchmark 1")
    time.sleep(1.0)
    for number in signals:  # twice: back to back, as fast as a script (or an impatient user) can
        send(program, number)
    finish_after_signal(program, signals)
    assert_outputs(outputs, complete=False, benchmarks=1, stop_reason="interrupted by SIG")
    [benchmark] = read_results(outputs[0])["benchmarks"]
    assert benchmark["interrupted"] is True
    assert benchmark["requests"]["completed"] > 0
    assert_report_reads(tmp_path, outputs[0])


# --- the engine's process dying -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dispatch", "killer", "context"),
    [
        ("batch", SIGKILL, "spawn"),
        ("continuous", SIGKILL, "spawn"),
        ("batch", SIGTERM, "spawn"),
        ("continuous", SIGTERM, "fork"),  # a forked worker starts with the main process's signal handlers
        ("stream", SIGKILL, "spawn"),
    ],
)
def test_the_engine_dying_mid_run_keeps_what_completed(
    tmp_path: Path, dispatch: str, killer: int, context: str
) -> None:
    outputs = every_format(tmp_path)
    args = run_args(backend(dispatch=dispatch, time_scale=1), constraint=LONG_RUN, outputs=outputs)
    program = Program(tmp_path, args, env={"BATCHMARK_MP_CONTEXT": context})
    program.wait_for("benchmark 1")
    worker = program.worker()
    time.sleep(1.0)
    os.kill(worker, killer)  # as the kernel's out-of-memory killer (SIGKILL) or a stray kill would
    outcome = program.finish()
    assert outcome.code == 3, outcome.stderr
    assert_clean(outcome)
    # SIGKILL always reads as such; a SIGTERM the worker may handle itself (ending what it started).
    how = "killed by SIGKILL" if killer == SIGKILL else "the engine worker process exited unexpectedly"
    assert "the engine failed: the engine worker process exited unexpectedly" in outcome.message
    assert_outputs(outputs, complete=False, benchmarks=1, stop_reason=how)
    [benchmark] = read_results(outputs[0])["benchmarks"]
    assert benchmark["interrupted"] is True
    assert how in benchmark["stop_reason"]
    assert benchmark["requests"]["completed"] > 0
    assert_report_reads(tmp_path, outputs[0])


def test_the_engine_dying_while_it_loads_is_reported_with_an_empty_result(tmp_path: Path) -> None:
    outputs = every_format(tmp_path)
    program = Program(tmp_path, run_args(backend(**LOADING), outputs=outputs))
    os.kill(program.worker(), SIGKILL)
    outcome = program.finish()
    assert outcome.code == 3, outcome.stderr
    assert_clean(outcome)
    assert "the engine failed to load" in outcome.message
    assert_outputs(outputs, complete=False, benchmarks=0, stop_reason="the engine failed to load")
    assert_report_reads(tmp_path, outputs[0])


@pytest.mark.parametrize("dispatch", ["batch", "continuous", "stream"])
def test_the_engine_exits_quietly_when_the_main_process_is_killed(tmp_path: Path, dispatch: str) -> None:
    program = Program(tmp_path, run_args(backend(dispatch=dispatch, time_scale=1), constraint=LONG_RUN))
    program.wait_for("benchmark 1")
    worker = program.worker()
    time.sleep(0.5)
    os.kill(program.pid, SIGKILL)
    program.process.wait(timeout=10)
    left = program.wait_for_descendants_to_end()
    if left:
        program.kill_descendants()
    assert not left, "the engine's process outlived the main process"
    assert not os.path.exists(f"/proc/{worker}/stat") or "Z" in Path(f"/proc/{worker}/stat").read_text()
    stderr = program.stderr()
    assert "Traceback" not in stderr
    assert "Error" not in stderr


# --- outputs ------------------------------------------------------------------------------------------------


def test_an_output_that_fails_at_the_end_leaves_the_others_written(tmp_path: Path) -> None:
    good = [tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.csv"]
    bad = tmp_path / "d.json"
    args = run_args(backend(time_scale=1), constraint="kind=max_duration,seconds=3", outputs=[good[0], bad, *good[1:]])
    program = Program(tmp_path, args)
    program.wait_for("benchmark 1")
    bad.mkdir()  # the path was fine when the run began; now it cannot be written
    outcome = program.finish()
    assert outcome.code == 4, outcome.stderr
    assert_clean(outcome)
    assert f"could not write {bad}" in outcome.message
    assert_outputs(good, complete=True, benchmarks=1)
    assert bad.is_dir()
    assert not list(tmp_path.glob(".*partial"))


# --- the Pushgateway ----------------------------------------------------------------------------------------


@pytest.fixture
def silent_gateway() -> Iterator[str]:
    """A port that takes connections and never answers: every push attempt waits for its full timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("signals", [[SIGTERM], [SIGTERM, SIGTERM], [SIGINT]])
def test_a_signal_during_the_push_abandons_it_at_once(tmp_path: Path, silent_gateway: str, signals: list[int]) -> None:
    output = tmp_path / "r.json"
    program = Program(tmp_path, run_args(outputs=[output], extra=["--pushgateway", silent_gateway]))
    program.wait_for(f"wrote {output}")  # the results come first, then the push
    time.sleep(0.5)
    for number in signals:
        send(program, number)
    outcome = finish_after_signal(program, signals)
    assert outcome.seconds_after_signal is not None
    assert outcome.seconds_after_signal < 1 + SLACK  # not the push's 10 s timeout, nor its retries
    assert "gave up pushing to the Pushgateway" in outcome.message
    assert_outputs([output], complete=True, benchmarks=1)


def test_shutdown_after_sigterm_ends_within_its_bound_whatever_is_pending(tmp_path: Path, silent_gateway: str) -> None:
    """SIGTERM mid-run with everything that can delay an exit: an engine in mid-batch, a push that can only time
    out, a 60 s metrics linger. The process still ends within SHUTDOWN_SECONDS (20 s), well inside
    Kubernetes' default 30 s grace period."""
    output = tmp_path / "r.json"
    extra = ["--pushgateway", silent_gateway, "--metrics-port", "0", "--metrics-linger", "60"]
    program = Program(tmp_path, run_args(backend(time_scale=1), constraint=LONG_RUN, outputs=[output], extra=extra))
    program.wait_for("benchmark 1")
    time.sleep(1.0)
    send(program, SIGTERM)
    outcome = finish_after_signal(program, [SIGTERM])
    assert outcome.seconds_after_signal is not None
    assert outcome.seconds_after_signal < SHUTDOWN_SECONDS  # the bound itself, no slack
    assert_outputs([output], complete=False, benchmarks=1, stop_reason="interrupted by SIGTERM")
    assert "serving the final metrics" in outcome.message  # the linger ran, cut to the deadline
