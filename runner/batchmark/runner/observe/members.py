"""The pods of one benchmark over several pods (a JobSet) hand their reports to pod 0, which reports for them all.

Each pod runs the whole benchmark on its own engine replicas and ends with its own report. The benchmark's result
is their merge over the window all of them measured (batchmark.runner.results.merge), and one writer must make
it: pod 0, the one the operator names as the benchmark's leader (``ENV_LEADER``: its stable name under the
JobSet's headless Service). Pod 0 listens on ``MEMBER_REPORT_PORT`` from its start; every other pod, once its run
ended, sends its report there (HTTP PUT of the gzip-compressed JSON to ``/reports/<index>``), retrying while pod 0's
name does not resolve yet or it does not answer. Pod 0 waits for them after its own run, up to a bound.

Why not through the API server: the runner may create ConfigMaps but read none (nor may the operator), so no
pod can read another's report there; pod-to-pod is the one path the pods already have (JobSet gives each a
stable name for it, as for a distributed engine's workers).
"""

from __future__ import annotations

import gzip
import http.server
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from batchmark.runner.contract import MEMBER_REPORT_PORT
from batchmark.runner.results.report import RunReport

log = logging.getLogger(__name__)

_PATH = re.compile(r"^/reports/(\d+)$")
# The most a report may weigh on the wire (compressed): a report with its samples is well below.
MAX_REPORT_BYTES = 64 * 1024 * 1024
SEND_RETRY_SECONDS = 1.0


class ReportGatherer:
    """Pod 0's side: an HTTP server taking the other pods' reports, from its construction to ``close``."""

    def __init__(self, members: int, port: int = MEMBER_REPORT_PORT, host: str = "0.0.0.0", step: int = 1) -> None:
        """``members`` pods in all, of which every ``step``-th reports (where each engine spans ``step`` pods, its
        first pod runs the benchmark and the others only its workers)."""
        self.members = members
        self.expected = reporting_members(members, step)[1:]
        self._reports: dict[int, RunReport] = {}
        self._condition = threading.Condition()
        gatherer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                code, text = gatherer._take(self.path, self.headers.get("Content-Length"), self.rfile.read)
                body = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("member reports: " + format, *args)

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="batchmark-members", daemon=True)
        self._thread.start()

    def _take(self, path: str, length: str | None, read: Callable[[int], bytes]) -> tuple[int, str]:
        match = _PATH.match(path)
        if match is None:
            return 404, "PUT /reports/<index>\n"
        index = int(match.group(1))
        if index not in self.expected:
            return 400, f"index {index} is not a reporting member's: {', '.join(map(str, self.expected))}\n"
        try:
            size = int(length or "")
        except ValueError:
            return 411, "Content-Length required\n"
        if not 0 < size <= MAX_REPORT_BYTES:
            return 413, f"a report of {size} bytes is not taken\n"
        try:
            report = RunReport.model_validate_json(gzip.decompress(read(size)))
        except (OSError, EOFError, ValueError) as error:
            return 400, f"not a gzip-compressed report: {error}\n"
        with self._condition:
            self._reports[index] = report
            self._condition.notify_all()
        return 200, "taken\n"

    def wait(self, timeout: float) -> dict[int, RunReport]:
        """The reports of the other pods, by index: all of them, or those that came within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while len(self._reports) < len(self.expected):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._condition.wait(left)
            return dict(self._reports)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def reporting_members(members: int, step: int = 1) -> range:
    """The members that run a benchmark and report, pod 0 first: every ``step``-th (each engine's node rank 0)."""
    return range(0, members, step)


def send_report(leader: str, index: int, report: RunReport, timeout: float, port: int = MEMBER_REPORT_PORT) -> bool:
    """Another pod's side: PUT the report to pod 0, retrying for up to ``timeout`` seconds; whether it was taken."""
    body = gzip.compress(report.model_dump_json().encode())
    url = f"http://{leader}:{port}/reports/{index}"
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "application/gzip"})
        try:
            with urllib.request.urlopen(request, timeout=max(1.0, min(30.0, deadline - time.monotonic()))) as answer:
                if answer.status == 200:
                    return True
        except urllib.error.HTTPError as error:
            # An answer that will not change: the leader refused this report.
            log.warning("pod 0 (%s) refused this pod's report: %s %s", leader, error.code, error.read()[:200])
            return False
        except (TimeoutError, urllib.error.URLError, OSError) as error:
            if time.monotonic() + SEND_RETRY_SECONDS >= deadline:
                log.warning("could not send this pod's report to pod 0 (%s): %s", leader, error)
                return False
        time.sleep(SEND_RETRY_SECONDS)
