"""The containers runtime's cluster DNS: the A records CoreDNS's `kubernetes` plugin serves, from the cluster's
Services and EndpointSlices as the API server lists and watches them, and NXDOMAIN for every other name."""

from __future__ import annotations

import io
import json
import struct
from typing import Any, BinaryIO

from devtools.cluster.clusterdns import (
    ENDPOINT_SLICES_PATH,
    SERVICES_PATH,
    TYPE_A,
    TYPE_AAAA,
    ClusterRecords,
    answer,
    service_records,
)

RECORDS = {"kubernetes.default.svc.cluster.local": ("10.213.7.1",)}


def query(name: str, query_type: int = TYPE_A, identifier: int = 4242) -> bytes:
    labels = b"".join(bytes([len(label)]) + label.encode() for label in name.split("."))
    return struct.pack("!HHHHHH", identifier, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", query_type, 1)


def header(response: bytes) -> tuple[int, int, int, int]:
    identifier, flags, questions, answers = struct.unpack("!HHHH", response[:8])
    return identifier, flags & 0x000F, questions, answers


def addresses(response: bytes) -> list[str]:
    """The A records' addresses of a response to `query` (each answer: a name pointer, type, class, TTL, length,
    then the four bytes)."""
    count = header(response)[3]
    records = response[len(response) - 16 * count :]
    return [".".join(map(str, records[i + 12 : i + 16])) for i in range(0, len(records), 16)]


def test_a_known_name_gets_its_address() -> None:
    response = answer(query("Kubernetes.Default.svc.cluster.local"), RECORDS)
    assert response is not None
    assert header(response) == (4242, 0, 1, 1)
    assert response[-4:] == bytes([10, 213, 7, 1])


def test_a_name_of_several_addresses_gets_them_all() -> None:
    records = {"bench.team.svc.cluster.local": ("10.214.0.11", "10.214.0.52")}
    response = answer(query("bench.team.svc.cluster.local"), records)
    assert response is not None
    assert header(response) == (4242, 0, 1, 2)
    assert addresses(response) == ["10.214.0.11", "10.214.0.52"]


def test_an_ipv6_query_for_a_known_name_is_answered_empty() -> None:
    response = answer(query("kubernetes.default.svc.cluster.local", TYPE_AAAA), RECORDS)
    assert response is not None
    assert header(response) == (4242, 0, 1, 0)


def test_any_other_name_does_not_exist_and_nothing_is_forwarded() -> None:
    # A search-path candidate such as bench-leader-0-0.bench.<other namespace>.svc.cluster.local too: NXDOMAIN
    # sends the resolver on to its next search domain.
    for name in ("pypi.org", "kubernetes.default.svc.team.svc.cluster.local"):
        response = answer(query(name), RECORDS)
        assert response is not None
        assert header(response) == (4242, 3, 1, 0)


def test_what_is_not_a_query_gets_no_answer() -> None:
    assert answer(b"\x00\x01", RECORDS) is None
    response_bit_set = bytearray(query("kubernetes"))
    response_bit_set[2] |= 0x80
    assert answer(bytes(response_bit_set), RECORDS) is None
    truncated = query("kubernetes.default.svc.cluster.local")[:-3]
    assert answer(truncated, RECORDS) is None


def service(
    namespace: str, name: str, cluster_ip: str, *, kind: str = "ClusterIP", publish_not_ready: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind, "clusterIP": cluster_ip, "publishNotReadyAddresses": publish_not_ready}
    if cluster_ip not in ("", "None"):
        spec["clusterIPs"] = [cluster_ip]
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": "1"}, "spec": spec}


def endpoint_slice(
    namespace: str, service_name: str, endpoints: list[tuple[str | None, str, bool]], address_type: str = "IPv4"
) -> dict[str, Any]:
    """An EndpointSlice of `service_name` with (hostname, address, ready) endpoints."""
    entries = []
    for hostname, address, ready in endpoints:
        entry: dict[str, Any] = {"addresses": [address], "conditions": {"ready": ready}}
        if hostname is not None:
            entry["hostname"] = hostname
        entries.append(entry)
    return {
        "metadata": {
            "namespace": namespace,
            "name": f"{service_name}-abcde",
            "labels": {"kubernetes.io/service-name": service_name},
            "resourceVersion": "1",
        },
        "addressType": address_type,
        "endpoints": entries,
    }


def test_a_headless_services_endpoints_are_named_by_hostname_and_the_service_by_all_of_them() -> None:
    services = [service("team", "bench", "None", publish_not_ready=True)]
    slices = [
        endpoint_slice(
            "team",
            "bench",
            [("bench-leader-0-0", "10.214.0.12", True), ("bench-workers-0-0", "10.214.0.51", False)],
        ),
        endpoint_slice("team", "bench", [("bench-workers-0-1", "10.214.0.90", True)]),
    ]
    assert service_records(services, slices) == {
        "bench.team.svc.cluster.local": ("10.214.0.12", "10.214.0.51", "10.214.0.90"),
        "bench-leader-0-0.bench.team.svc.cluster.local": ("10.214.0.12",),
        "bench-workers-0-0.bench.team.svc.cluster.local": ("10.214.0.51",),
        "bench-workers-0-1.bench.team.svc.cluster.local": ("10.214.0.90",),
    }


def test_a_not_ready_endpoint_is_left_out_unless_its_service_publishes_it() -> None:
    services = [service("team", "db", "None")]
    slices = [endpoint_slice("team", "db", [("db-0", "10.214.0.12", True), ("db-1", "10.214.0.13", False)])]
    assert service_records(services, slices) == {
        "db.team.svc.cluster.local": ("10.214.0.12",),
        "db-0.db.team.svc.cluster.local": ("10.214.0.12",),
    }


def test_an_endpoint_without_a_hostname_is_named_by_its_address_with_dashes() -> None:
    services = [service("team", "plain", "None")]
    slices = [endpoint_slice("team", "plain", [(None, "10.214.0.12", True)])]
    assert service_records(services, slices, "example.test") == {
        "plain.team.svc.example.test": ("10.214.0.12",),
        "10-214-0-12.plain.team.svc.example.test": ("10.214.0.12",),
    }


def test_a_cluster_ip_service_is_its_cluster_ip_and_its_endpoints_are_not_named() -> None:
    services = [
        service("default", "kubernetes", "10.213.7.1"),
        service("team", "metrics", "10.213.7.20"),
        service("kueue-system", "visibility", "", kind="ExternalName"),
    ]
    slices = [
        endpoint_slice("team", "metrics", [("metrics-0", "10.214.0.12", True)]),
        endpoint_slice("team", "gone", [("gone-0", "10.214.0.13", True)]),  # no such Service
        endpoint_slice("team", "metrics", [(None, "fd00::1", True)], address_type="IPv6"),
    ]
    assert service_records(services, slices) == {
        "kubernetes.default.svc.cluster.local": ("10.213.7.1",),
        "metrics.team.svc.cluster.local": ("10.213.7.20",),
    }


class FakeApi:
    """Answers GETs from a script: per path (without its query), the bodies to return in turn."""

    def __init__(self, script: dict[str, list[bytes]]) -> None:
        self.script = script
        self.requested: list[str] = []

    def open(self, path: str, timeout: float) -> BinaryIO:
        self.requested.append(path)
        return io.BytesIO(self.script[path.partition("?")[0]].pop(0))


def listing(version: str, items: list[dict[str, Any]]) -> bytes:
    return json.dumps({"metadata": {"resourceVersion": version}, "items": items}).encode()


def events(*pairs: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(json.dumps({"type": kind, "object": item}).encode() + b"\n" for kind, item in pairs)


def test_the_records_follow_the_watched_services_and_endpoint_slices() -> None:
    headless = service("team", "bench", "None", publish_not_ready=True)
    leader = endpoint_slice("team", "bench", [("bench-leader-0-0", "10.214.0.12", True)])
    moved = {**leader, "metadata": {**leader["metadata"], "resourceVersion": "7"}}
    moved["endpoints"] = [{"addresses": ["10.214.0.14"], "hostname": "bench-leader-0-0", "conditions": {}}]
    api = FakeApi(
        {
            SERVICES_PATH: [listing("5", [headless])],
            ENDPOINT_SLICES_PATH: [
                listing("5", []),
                events(("ADDED", leader), ("BOOKMARK", {"metadata": {"resourceVersion": "6"}})),
                events(("MODIFIED", moved)),
                events(("DELETED", moved), ("ERROR", {"metadata": {}, "code": 410, "reason": "Expired"})),
            ],
        }
    )
    fixed = {"kubernetes.default.svc.cluster.local": ("10.213.7.1",)}
    records = ClusterRecords(fixed, api)
    services, slices = records.collections
    assert services.list() == "5"
    assert slices.list() == "5"
    assert records.current == fixed  # a headless Service without endpoints has no address

    # Each event is in the table as soon as it is read; a watch resumes from the last version it saw.
    assert slices.watch("5") == "6"
    assert records.current["bench-leader-0-0.bench.team.svc.cluster.local"] == ("10.214.0.12",)
    assert slices.watch("6") == "7"
    assert records.current["bench-leader-0-0.bench.team.svc.cluster.local"] == ("10.214.0.14",)
    assert records.current["bench.team.svc.cluster.local"] == ("10.214.0.14",)
    # A deleted slice's names are gone; an ERROR event (a version too old to watch from) means: list again.
    assert slices.watch("7") is None
    assert records.current == fixed
    assert [path.partition("?")[2].split("&")[:2] for path in api.requested[2:]] == [
        ["watch=true", "resourceVersion=5"],
        ["watch=true", "resourceVersion=6"],
        ["watch=true", "resourceVersion=7"],
    ]
