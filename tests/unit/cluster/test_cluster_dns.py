"""The containers runtime's cluster DNS answers the `kubernetes` Service's names and nothing else."""

from __future__ import annotations

import struct

from devtools.cluster.clusterdns import TYPE_A, TYPE_AAAA, answer

RECORDS = {"kubernetes.default.svc.cluster.local": "10.213.7.1"}


def query(name: str, query_type: int = TYPE_A, identifier: int = 4242) -> bytes:
    labels = b"".join(bytes([len(label)]) + label.encode() for label in name.split("."))
    return struct.pack("!HHHHHH", identifier, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", query_type, 1)


def header(response: bytes) -> tuple[int, int, int, int]:
    identifier, flags, questions, answers = struct.unpack("!HHHH", response[:8])
    return identifier, flags & 0x000F, questions, answers


def test_a_known_name_gets_its_address() -> None:
    response = answer(query("Kubernetes.Default.svc.cluster.local"), RECORDS)
    assert response is not None
    assert header(response) == (4242, 0, 1, 1)
    assert response[-4:] == bytes([10, 213, 7, 1])


def test_an_ipv6_query_for_a_known_name_is_answered_empty() -> None:
    response = answer(query("kubernetes.default.svc.cluster.local", TYPE_AAAA), RECORDS)
    assert response is not None
    assert header(response) == (4242, 0, 1, 0)


def test_any_other_name_does_not_exist_and_nothing_is_forwarded() -> None:
    response = answer(query("pypi.org"), RECORDS)
    assert response is not None
    assert header(response) == (4242, 3, 1, 0)


def test_what_is_not_a_query_gets_no_answer() -> None:
    assert answer(b"\x00\x01", RECORDS) is None
    response_bit_set = bytearray(query("kubernetes"))
    response_bit_set[2] |= 0x80
    assert answer(bytes(response_bit_set), RECORDS) is None
    truncated = query("kubernetes.default.svc.cluster.local")[:-3]
    assert answer(truncated, RECORDS) is None
