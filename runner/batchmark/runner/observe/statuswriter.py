"""The run's status writer: one more observer, switched on inside a BatchBenchmark's pod by its environment.

The operator sets the resource's identity in the pod's environment (``POD_ENVIRONMENT`` of
batchmark.runner.contract, which also names the status fields this side writes; BATCHMARK_RESULTS_CONFIGMAP,
which it does not set, overrides the results ConfigMap's name, ``<pod>-results`` by default). With them, this
writer

- patches ``status.progress`` (and ``status.engine`` once it is loaded), a few seconds apart, from a thread of
  its own so that the benchmark's loop never waits on the API server;
- at the end creates the results ConfigMap with the full report (gzip-compressed when it would not fit in
  1 MiB), owned by the resource (under a name the API server makes unique when its name is taken: a 409 never
  passes for its own), and patches ``status.engine``, ``status.results``, ``status.headline``,
  ``status.runId`` and ``status.resultsConfigMap``. It creates it rather than patching one the operator made:
  the runner may create ConfigMaps but read or change none (so neither it nor the operator needs the right to
  change ConfigMaps), and each attempt of a retried or preempted benchmark (one pod each) keeps its own report;
- always writes the compact summary to the termination message, so the results survive an API server it
  cannot reach;
- before the run's report is judged and written, reads back ``status.runnerImage`` (the operator's, from the
  kubelet's report) into the report's ``environment["image"]``: in its pod the runner has no other way to learn
  its image's digest. Where the status names no image of this pod, or cannot be read, the image is unknown.

In a benchmark over several pods (``ENV_MEMBER`` and ``ENV_MEMBERS`` set: one pod of a JobSet), each pod's
report is one part of the benchmark's: every pod creates its own results ConfigMap and writes its termination
message; the others send their reports to pod 0 (batchmark.runner.observe.members), and pod 0 alone patches the
status: its progress, and at the end the pods' reports merged (into a ConfigMap of its own, ``<pod>-results-merged``).
Where a pod's report never came (it failed, it was stopped), pod 0 writes no results: an aggregate over fewer
replicas than the benchmark asked for would pass for the benchmark's.

Writes are retried on conflicts (409), throttling and dropped connections; one that still fails is logged and
never fails the run. Without the environment (a laptop) nothing here runs, and the ``kubernetes`` package is
imported only when it is switched on.
"""

from __future__ import annotations

import base64
import gzip
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from batchmark.runner.contract import (
    COMPRESSED_REPORT_KEY,
    ENV_ENGINE_NODES,
    ENV_LEADER,
    ENV_MEMBER,
    ENV_MEMBERS,
    ENV_NAME,
    ENV_NAMESPACE,
    ENV_POD,
    ENV_RESULTS,
    ENV_TERMINATION,
    ENV_UID,
    GROUP,
    KIND,
    MEMBER_REPORT_PORT,
    PLURAL,
    REPORT_KEY,
    RUNNER_STATUS_FIELDS,
    VERSION,
    check_status_writes,
)
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.engines.registry import engine_summary
from batchmark.runner.observe.members import ReportGatherer, reporting_members, send_report
from batchmark.runner.results.merge import MergeError, merge_reports
from batchmark.runner.results.report import RunReport
from batchmark.runner.results.summary import engine_status, regression_status, run_summary, termination_message
from batchmark.runner.run.events import Progress, RunObserver
from batchmark.runner.run.profiles import Strategy
from batchmark.runner.statusfields import EngineStatus, ProgressStatus, RunnerImageStatus, headline

log = logging.getLogger(__name__)


PROGRESS_INTERVAL_SECONDS = 3.0
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 4.0)
# How long pod 0 waits for the other pods' reports after its own run, and they try to send theirs: a run that
# ended as planned waits for the slowest pod; one stopped early (cancel, deletion) has the grace period only.
MEMBER_WAIT_SECONDS = 600.0
MEMBER_WAIT_STOPPED_SECONDS = 30.0
# A ConfigMap holds at most 1 MiB; keys and metadata need a little of it.
CONFIG_MAP_LIMIT = 1_000_000
MERGE_PATCH = "application/merge-patch+json"
_RETRIED_STATUS = frozenset({409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class StatusTarget:
    """Which resource this pod reports to."""

    namespace: str
    name: str
    uid: str
    results_config_map: str | None
    pod_name: str | None
    termination_message_path: Path | None
    member: int = 0  # this pod's index among the benchmark's pods
    members: int = 1  # the benchmark's pods
    leader: str | None = None  # pod 0's stable name, where the others send their reports
    engine_nodes: int = 1  # pods each engine spans: only the first of each runs a benchmark and reports

    @property
    def reporting(self) -> range:
        """The pods that run the benchmark and report, this one among them (pod 0 first)."""
        return reporting_members(self.members, self.engine_nodes)

    @property
    def writes_status(self) -> bool:
        """Pod 0 (the only pod of most benchmarks) writes the status; the others send it their reports."""
        return self.member == 0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> StatusTarget | None:
        environ = os.environ if environ is None else environ
        if not environ.get(ENV_NAME) or not environ.get(ENV_NAMESPACE):
            return None
        termination = environ.get(ENV_TERMINATION)
        pod = environ.get(ENV_POD) or None
        member, members = _membership(environ)
        return cls(
            namespace=environ[ENV_NAMESPACE],
            name=environ[ENV_NAME],
            uid=environ.get(ENV_UID, ""),
            results_config_map=environ.get(ENV_RESULTS) or (f"{pod}-results" if pod else None),
            pod_name=pod,
            termination_message_path=Path(termination) if termination else None,
            member=member,
            members=members,
            engine_nodes=int(environ.get(ENV_ENGINE_NODES) or 1),
            leader=environ.get(ENV_LEADER) or None,
        )


def _membership(environ: Mapping[str, str]) -> tuple[int, int]:
    """(index, count) of this pod among the benchmark's; (0, 1) where the operator set neither (one pod)."""
    try:
        members = int(environ.get(ENV_MEMBERS) or 1)
        member = int(environ.get(ENV_MEMBER) or 0)
    except ValueError as error:
        raise ValueError(f"{ENV_MEMBER} and {ENV_MEMBERS} must be whole numbers: {error}") from None
    if members < 1 or not 0 <= member < members:
        raise ValueError(f"{ENV_MEMBER} ({member}) must lie in 0..{ENV_MEMBERS} - 1 ({members - 1})")
    return member, members


def report_config_map_data(report: RunReport, limit: int = CONFIG_MAP_LIMIT) -> dict[str, dict[str, str]]:
    """The report as ConfigMap data: plain JSON when it fits, else gzip'd in binaryData."""
    text = report.model_dump_json()
    if len(text.encode()) <= limit:
        return {"data": {REPORT_KEY: text}, "binaryData": {}}
    packed = base64.b64encode(gzip.compress(text.encode(), compresslevel=9)).decode("ascii")
    if len(packed) > limit:
        # Still too large: the per-request samples and timelines go, the figures stay.
        slim = report.model_copy(
            update={"benchmarks": [b.model_copy(update={"samples": [], "timeline": []}) for b in report.benchmarks]}
        )
        packed = base64.b64encode(gzip.compress(slim.model_dump_json().encode(), compresslevel=9)).decode("ascii")
    return {"data": {}, "binaryData": {COMPRESSED_REPORT_KEY: packed}}


def read_report_config_map(config_map: Mapping[str, Any]) -> RunReport | None:
    """The report a results ConfigMap holds (as ``batchmark results`` reads it), or None while it is empty."""
    data = config_map.get("data") or {}
    binary = config_map.get("binaryData") or config_map.get("binary_data") or {}
    if REPORT_KEY in data:
        return RunReport.model_validate_json(data[REPORT_KEY])
    if COMPRESSED_REPORT_KEY in binary:
        return RunReport.model_validate_json(gzip.decompress(base64.b64decode(binary[COMPRESSED_REPORT_KEY])))
    return None


class StatusApi:
    """The four calls the writer makes, through the official client, logged in as kubectl would be."""

    def __init__(self) -> None:
        from kubernetes import client, config  # noqa: PLC0415 - only inside a BatchBenchmark's pod
        from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415

        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api = client.ApiClient()
        except ConfigException:
            configuration = client.Configuration()
            # KUBECONFIG as it is now (the client reads it once, at import).
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
            )
            api = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def read_status(self, target: StatusTarget) -> dict[str, Any]:
        found = self.custom.get_namespaced_custom_object_status(GROUP, VERSION, target.namespace, PLURAL, target.name)
        return cast(dict[str, Any], found)

    def patch_status(self, target: StatusTarget, body: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, target.namespace, PLURAL, target.name, dict(body), _content_type=MERGE_PATCH
        )

    def create_config_map(self, target: StatusTarget, name: str, body: Mapping[str, Any]) -> str:
        """Create the ConfigMap, owned by the resource (garbage-collected with it); returns its name.

        A 409 says that a ConfigMap of that name exists, not whose it is, and the runner may read none to find out:
        it may be this pod's own, from an earlier try whose answer was lost, or one someone else put there. It is
        never taken for this run's: the report goes into a ConfigMap named ``<name>-<suffix>`` by the API server
        (generateName), which no one can have made before; an earlier try's copy, if there was one, is
        garbage-collected with the resource."""
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - only inside a BatchBenchmark's pod

        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": target.name, "uid": target.uid}
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": target.namespace,
            "labels": {"app.kubernetes.io/name": "batchmark", "batchmark.dev/benchmark": target.name},
        }
        if target.uid:
            metadata["ownerReferences"] = [owner]
        try:
            # A dict, as the client accepts (and the patches above send).
            created = self.core.create_namespaced_config_map(
                target.namespace, cast(Any, {**dict(body), "metadata": metadata})
            )
        except ApiException as error:
            if error.status != 409:
                raise
            unique = {key: value for key, value in metadata.items() if key != "name"} | {"generateName": f"{name}-"}
            created = self.core.create_namespaced_config_map(
                target.namespace, cast(Any, {**dict(body), "metadata": unique})
            )
        answered = created.metadata.name if created.metadata is not None else None
        if not answered:
            raise RuntimeError(f"the API server's answer to the creation of {name} names no ConfigMap")
        return str(answered)


def _retryable(error: BaseException) -> bool:
    status = getattr(error, "status", None)
    if isinstance(status, int):
        return status in _RETRIED_STATUS
    # Connection refused or reset, timeouts, TLS hiccups: urllib3's errors and OSErrors.
    return isinstance(error, OSError) or type(error).__module__.startswith("urllib3")


class StatusWriter(RunObserver):
    """Reports the run to its BatchBenchmark; every failure is logged, none reaches the run."""

    def __init__(
        self,
        target: StatusTarget,
        api_factory: Callable[[], StatusApi] = StatusApi,
        interval: float = PROGRESS_INTERVAL_SECONDS,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        member_address: tuple[str, int] = ("0.0.0.0", MEMBER_REPORT_PORT),
        member_waits: tuple[float, float] = (MEMBER_WAIT_SECONDS, MEMBER_WAIT_STOPPED_SECONDS),
    ) -> None:
        self.target = target
        self.member_port = member_address[1]
        self.member_waits = member_waits
        self.interval = interval
        self.retry_delays = retry_delays
        self._api_factory = api_factory
        self._api: StatusApi | None = None
        self._engine: EngineStatus | None = None
        self._benchmark = 0
        self._benchmarks = 0
        self._strategy: str | None = None
        self._pending: dict[str, Any] | None = None
        self._last_sent = 0.0
        self._condition = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._send_loop, name="batchmark-status", daemon=True)
        self._thread.start()
        self._gatherer: ReportGatherer | None = None
        if len(target.reporting) > 1 and target.writes_status:
            # From the start: a pod whose run was short sends its report while pod 0 still runs.
            try:
                self._gatherer = ReportGatherer(
                    target.members, port=member_address[1], host=member_address[0], step=target.engine_nodes
                )
            except OSError as error:
                log.warning("cannot take the other pods' reports (port in use?): %s", error)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> StatusWriter | None:
        target = StatusTarget.from_environment(environ)
        return cls(target) if target is not None else None

    # --- observer -------------------------------------------------------------------------------------------

    def on_engine_loaded(self, info: EngineInfo, load_seconds: float) -> None:
        # The load time to a tenth of a millisecond here; the end-of-run status gives it to 4 significant digits.
        loaded = engine_status(engine_summary(info, load_seconds))
        self._engine = loaded.model_copy(update={"load_seconds": round(load_seconds, 4)})
        # At once: this is what moves the phase from LoadingEngine to Running.
        self._queue(self._progress(None), urgent=True)

    def on_benchmark_start(self, strategy: Strategy, position: int, known_total: int) -> None:
        self._benchmark = position + 1
        self._benchmarks = known_total
        self._strategy = strategy.label
        self._queue(self._progress(None), urgent=True)

    def on_progress(self, progress: Progress) -> None:
        self._queue(self._progress(progress), urgent=False)

    def finish_report(self, report: RunReport) -> RunReport:
        image = self._own_image()
        if image is None:
            return report
        described = {"image": image.image, "imageID": image.image_id, "digest": image.digest}
        return report.model_copy(update={"environment": {**report.environment, "image": described}})

    def _own_image(self) -> RunnerImageStatus | None:
        """This pod's image as the status names it, or None: a failed read (logged), no image yet, or one of
        another pod (a retry's earlier attempt, which a mutable tag may have pulled another digest for)."""
        read: list[Mapping[str, Any]] = []
        if not self._attempt("the runner image", lambda api: read.append(api.read_status(self.target)), "read"):
            return None
        resource = read[-1]
        if self.target.uid and (resource.get("metadata") or {}).get("uid") not in (None, self.target.uid):
            return None
        written = (resource.get("status") or {}).get("runnerImage")
        try:
            image = RunnerImageStatus.model_validate(written) if written is not None else None
        except ValidationError:  # the status is writable by more than the operator: never fail on it
            image = None
        # A runner started by hand (no pod name) runs on no kubelet: the benchmark's pod's image is not its own.
        if image is None or self.target.pod_name is None or image.pod_name != self.target.pod_name:
            log.info("the status names no image of pod %s: the run's image is unknown", self.target.pod_name)
            return None
        return image

    def on_run_end(self, report: RunReport) -> None:
        self.close()
        self._write_termination_message(report)
        if len(self.target.reporting) > 1:
            self._create_results_config_map(report, str(self.target.results_config_map or ""))
            wait = self.member_waits[0] if report.complete else self.member_waits[1]
            if not self.target.writes_status:
                if self.target.leader is None:
                    log.warning(
                        "the operator did not say where pod 0 is (%s): this pod's report stays here", ENV_LEADER
                    )
                else:
                    send_report(self.target.leader, self.target.member, report, wait, self.member_port)
                return
            merged = self._merged(report, wait)
            if merged is None:
                return
            name = f"{self.target.results_config_map}-merged" if self.target.results_config_map else None
            self._write_results(merged, name)
            return
        self._write_results(report, self.target.results_config_map)

    def _merged(self, report: RunReport, wait: float) -> RunReport | None:
        """This pod's report merged with the other pods', or None (logged) where one is missing or they differ."""
        others = self._gatherer.wait(wait) if self._gatherer is not None else {}
        if self._gatherer is not None:
            self._gatherer.close()
        missing = [str(index) for index in self.target.reporting[1:] if index not in others]
        if missing:
            log.warning(
                "no report from pod(s) %s of %d: the benchmark's results are not written (each pod's own are in its"
                " ConfigMap)",
                ", ".join(missing),
                self.target.members,
            )
            return None
        runs = [("pod 0", report), *((f"pod {index}", others[index]) for index in sorted(others))]
        try:
            return merge_reports(runs)
        except MergeError as error:
            log.warning("the pods' reports cannot be merged: %s", error)
            return None

    def _create_results_config_map(self, report: RunReport, name: str) -> str | None:
        """The ConfigMap of the report (its name, which the API server may have made unique), or None."""
        if not name:
            return None
        created: list[str] = []
        self._attempt(
            "the results ConfigMap",
            lambda api: created.append(api.create_config_map(self.target, name, report_config_map_data(report))),
        )
        return created[-1] if created else None

    def _write_results(self, report: RunReport, config_map: str | None) -> None:
        summary = run_summary(report)
        status: dict[str, Any] = {
            "runId": report.run_id,
            "engine": engine_status(report.engine).model_dump(mode="json", by_alias=True, exclude_none=True),
            "results": [entry.model_dump(mode="json", by_alias=True, exclude_none=True) for entry in summary.results],
        }
        best = headline(summary)
        if best is not None:
            status["headline"] = best.model_dump(mode="json", by_alias=True, exclude_none=True)
        if report.regression is not None:
            verdict = regression_status(report.regression)
            status["regression"] = verdict.model_dump(mode="json", by_alias=True, exclude_none=True)
        created = self._create_results_config_map(report, config_map or "")
        if created:
            status["resultsConfigMap"] = created
        self._attempt("the status", lambda api: self._patch_status(api, status))

    # --- sending --------------------------------------------------------------------------------------------

    def _progress(self, progress: Progress | None) -> dict[str, Any]:
        entry = ProgressStatus(
            pod_name=self.target.pod_name,
            benchmark=self._benchmark,
            benchmarks=self._benchmarks,
            strategy=self._strategy,
            requests_completed=progress.completed if progress else 0,
            requests_errored=progress.errored if progress else 0,
            elapsed_seconds=round(progress.elapsed, 3) if progress else 0.0,
            output_tokens_per_second=round(progress.output_tokens / progress.elapsed, 3)
            if progress and progress.elapsed > 0
            else 0.0,
        )
        fields: dict[str, Any] = {"progress": entry.model_dump(mode="json", by_alias=True, exclude_none=True)}
        if self._engine is not None:
            fields["engine"] = self._engine.model_dump(mode="json", by_alias=True, exclude_none=True)
        return fields

    def _queue(self, fields: dict[str, Any], urgent: bool) -> None:
        if not self.target.writes_status:
            return
        with self._condition:
            if self._closed:
                return
            self._pending = fields
            if urgent:
                self._last_sent = 0.0
            self._condition.notify()

    def _send_loop(self) -> None:
        while True:
            with self._condition:
                while not self._closed and (
                    self._pending is None or time.monotonic() - self._last_sent < self.interval
                ):
                    wait = None if self._pending is None else self.interval - (time.monotonic() - self._last_sent)
                    self._condition.wait(wait)
                if self._closed and self._pending is None:
                    return
                fields, self._pending = self._pending, None
                self._last_sent = time.monotonic()
            if fields is not None:
                self._attempt("progress", lambda api, body=fields: self._patch_status(api, body))  # type: ignore[misc]
            with self._condition:
                if self._closed and self._pending is None:
                    return

    def close(self) -> None:
        """Send what is pending, then stop the sending thread."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout=30)

    def _patch_status(self, api: StatusApi, fields: Mapping[str, Any]) -> None:
        """Patch on the version just read, so a write never lands on a resource it did not see (409: again)."""
        check_status_writes("runner", fields, RUNNER_STATUS_FIELDS)
        current = api.read_status(self.target)
        metadata = current.get("metadata") or {}
        if self.target.uid and metadata.get("uid") not in (None, self.target.uid):
            raise RuntimeError(f"{self.target.name} is another resource now (uid {metadata.get('uid')})")
        body = {"metadata": {"resourceVersion": metadata.get("resourceVersion")}, "status": dict(fields)}
        api.patch_status(self.target, body)

    def _attempt(self, what: str, action: Callable[[StatusApi], None], doing: str = "write") -> bool:
        for attempt, delay in enumerate((*self.retry_delays, None)):
            try:
                if self._api is None:
                    self._api = self._api_factory()
                action(self._api)
                return True
            except Exception as error:
                if delay is None or not _retryable(error):
                    log.warning(
                        "could not %s %s of %s (attempt %d): %s", doing, what, self.target.name, attempt + 1, error
                    )
                    return False
                time.sleep(delay)
        return False

    def _write_termination_message(self, report: RunReport) -> None:
        if self.target.termination_message_path is not None:
            _write_termination_message(self.target.termination_message_path, report)


def record_output_failure(report: RunReport, failure: str, environ: Mapping[str, str] | None = None) -> None:
    """Say in this pod's termination message what could not be written once the run had ended (the results
    store, an output file): the operator's reason for the failed pod, beside results the status already has.
    Outside a benchmark's pod, nothing."""
    try:
        target = StatusTarget.from_environment(environ)
    except ValueError:
        return  # the run itself refused such an environment before it started
    if target is not None and target.termination_message_path is not None:
        _write_termination_message(target.termination_message_path, report, failure)


def _write_termination_message(path: Path, report: RunReport, output_failure: str | None = None) -> None:
    """The run's summary (termination_message) at ``path``; a failure is logged, never the run's."""
    try:
        path.write_text(termination_message(report, output_failure=output_failure), encoding="utf-8")
    except OSError as error:
        log.warning("could not write the termination message to %s: %s", path, error)
