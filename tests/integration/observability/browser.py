"""Headless Chromium (Debian's) driven over the Chrome DevTools protocol, with the network cut off.

The protocol, not --dump-dom, so that "no console errors" is observed rather than inferred: every console
message, uncaught exception, browser log entry and network request of the page arrives as an event.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

from tests.integration.observability.servers import require, stop

FLAGS = [
    "--headless",
    "--no-sandbox",  # as root, Chromium refuses to start with its sandbox
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",  # Chromium picks a free port and writes it to DevToolsActivePort
]


@dataclass
class PageLoad:
    """What one page did while loading: the problems and every URL it requested."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [*self.console_errors, *self.exceptions, *self.log_errors, *self.failed_requests]


class Chromium:
    """One browser process; ``open`` loads a page in a fresh tab with the network emulated offline."""

    def __init__(self, profile: Path) -> None:
        self.process = subprocess.Popen(
            [require("chromium"), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                stop(self.process)
                raise RuntimeError(f"chromium did not start (exit code {self.process.returncode})")
            time.sleep(0.1)
        port, path = active.read_text().splitlines()[:2]
        self.socket = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=30)
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send a command and wait for its answer, keeping the events that arrive meanwhile."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv())
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def _wait_for(self, method: str, session: str, timeout: float) -> None:
        if any(e.get("method") == method and e.get("sessionId") == session for e in self._events):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.socket.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                event = json.loads(self.socket.recv())
            except websocket.WebSocketTimeoutException:
                break
            self._events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                self.socket.settimeout(30)
                return
        self.socket.settimeout(30)
        raise TimeoutError(f"no {method} within {timeout} s")

    def _drain(self, seconds: float) -> None:
        """Collect late events (a script's console.error after load) for a moment."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.socket.settimeout(left)
            try:
                self._events.append(json.loads(self.socket.recv()))
            except websocket.WebSocketTimeoutException:
                break
        self.socket.settimeout(30)

    @contextlib.contextmanager
    def open(self, url: str, width: int = 1400, height: int = 1000) -> Iterator[Page]:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable", session=session)
            self.call(
                "Network.emulateNetworkConditions",
                {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
                session=session,
            )
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            self._events.clear()
            self.call("Page.navigate", {"url": url}, session=session)
            self._wait_for("Page.loadEventFired", session, timeout=30)
            self._drain(0.5)
            yield Page(self, session, _page_load(self._events, session))
        finally:
            self.call("Target.closeTarget", {"targetId": target})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        with contextlib.suppress(Exception):
            self.socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        stop(self.process)


@dataclass
class Page:
    browser: Chromium
    session: str
    load: PageLoad

    def evaluate(self, expression: str) -> Any:
        result = self.browser.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.session
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.browser.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=self.session
        )["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


def _page_load(events: list[dict[str, Any]], session: str) -> PageLoad:
    load = PageLoad()
    for event in events:
        if event.get("sessionId") != session:
            continue
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"])
            load.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            load.exceptions.append(f"uncaught: {details.get('exception', {}).get('description', details.get('text'))}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            load.log_errors.append(f"log: {params['entry']['text']} ({params['entry'].get('url', '')})")
        elif method == "Network.requestWillBeSent":
            load.requests.append(params["request"]["url"])
        elif method == "Network.loadingFailed":
            load.failed_requests.append(f"request failed: {params.get('errorText')} ({params.get('requestId')})")
    return load


@contextlib.contextmanager
def chromium() -> Iterator[Chromium]:
    with tempfile.TemporaryDirectory(prefix="batchmark-chromium-") as profile:
        browser = Chromium(Path(profile))
        try:
            yield browser
        finally:
            browser.close()
