"""The control plane's admin requests: a GET that timed out, reading or shaking hands, or whose handshake the server
ended, is asked again; a write only when it was never sent; a refused connection never."""

from __future__ import annotations

import io
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from devtools.cluster.controlplane import REQUEST_ATTEMPTS, ControlPlane


class Answer(io.BytesIO):
    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def plane_answering(monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]) -> tuple[ControlPlane, list[str]]:
    """A control plane whose API server raises ``failures`` in turn, then answers a Pod."""
    asked: list[str] = []

    def urlopen(request: urllib.request.Request, context: ssl.SSLContext, timeout: float) -> Answer:
        asked.append(request.get_method())
        if len(asked) <= len(failures):
            raise failures[len(asked) - 1]
        return Answer(b'{"kind": "Pod"}')

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    plane = ControlPlane.__new__(ControlPlane)
    plane.server = "https://127.0.0.1:1"
    monkeypatch.setattr(plane, "_ssl_context", ssl.create_default_context)
    return plane, asked


@pytest.mark.parametrize(
    "failure",
    [
        TimeoutError("timed out"),
        urllib.error.URLError(TimeoutError("_ssl.c:989: The handshake operation timed out")),
        urllib.error.URLError(ssl.SSLEOFError(8, "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation")),
        urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer")),
    ],
    ids=["reading", "handshake", "handshake-ended", "reset"],
)
def test_a_get_unanswered_or_never_sent_is_asked_again(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    plane, asked = plane_answering(monkeypatch, [failure] * (REQUEST_ATTEMPTS - 1))
    answer: Any = plane.request("GET", "/api/v1/namespaces/default/pods/p")
    assert answer == {"kind": "Pod"}
    assert asked == ["GET"] * REQUEST_ATTEMPTS


def test_a_get_is_asked_a_bounded_number_of_times_and_other_failures_not_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plane, asked = plane_answering(monkeypatch, [TimeoutError("timed out")] * REQUEST_ATTEMPTS)
    with pytest.raises(TimeoutError):
        plane.request("GET", "/api/v1/nodes")
    assert asked == ["GET"] * REQUEST_ATTEMPTS
    for lasting in (ConnectionRefusedError("refused"), ssl.SSLCertVerificationError(1, "certificate verify failed")):
        plane, asked = plane_answering(monkeypatch, [urllib.error.URLError(lasting)])
        with pytest.raises(urllib.error.URLError):
            plane.request("GET", "/api/v1/nodes")
        assert asked == ["GET"]


def test_a_write_whose_answer_timed_out_is_never_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its answer did not come: it may have been done."""
    plane, asked = plane_answering(monkeypatch, [TimeoutError("timed out")])
    with pytest.raises(TimeoutError):
        plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": "n"}})
    assert asked == ["POST"]


@pytest.mark.parametrize(
    "reason",
    [TimeoutError("handshake"), ssl.SSLEOFError(8, "EOF occurred in violation of protocol")],
    ids=["handshake-timed-out", "handshake-ended"],
)
def test_a_write_never_sent_is_sent_again(monkeypatch: pytest.MonkeyPatch, reason: OSError) -> None:
    """urlopen wraps a failure before the request was sent whole (connecting, the TLS handshake, sending) in a
    URLError: the API server cannot have done it. CI saw handshakes stall for over 20 s (two tries), and one the
    server ended with an EOF after the machine stood still."""
    unsent = urllib.error.URLError(reason)
    plane, asked = plane_answering(monkeypatch, [unsent] * (REQUEST_ATTEMPTS - 1))
    answer: Any = plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": "n"}})
    assert answer == {"kind": "Pod"}
    assert asked == ["POST"] * REQUEST_ATTEMPTS
    plane, asked = plane_answering(monkeypatch, [unsent] * REQUEST_ATTEMPTS)
    with pytest.raises(urllib.error.URLError):
        plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": "n"}})
    assert asked == ["POST"] * REQUEST_ATTEMPTS
