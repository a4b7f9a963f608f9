"""The cluster DNS of the containers runtime: the A records CoreDNS's `kubernetes` plugin serves, from the API server.

A real cluster runs CoreDNS; the kubelets point their pods' resolv.conf here (`clusterDNS`, search domains
`<namespace>.svc.<domain> svc.<domain> <domain>`). This server keeps the cluster's Services and EndpointSlices
current by listing and watching them through the API server (as the cluster's admin), and answers A queries for
(the Kubernetes DNS specification, https://github.com/kubernetes/dns/blob/master/docs/specification.md):

- `<service>.<namespace>.svc.<domain>`: a ClusterIP Service's cluster IP (only the `kubernetes` Service's routes
  anywhere here: there is no kube-proxy); a headless Service's endpoint addresses, all of them;
- `<hostname>.<service>.<namespace>.svc.<domain>`: each endpoint address of a headless Service under the
  endpoint's hostname (a pod's `spec.hostname` when its `spec.subdomain` names the Service: a JobSet's pods), or,
  without one, under the address written with dashes (`10-214-0-12`), as CoreDNS does;

counting an endpoint that is not ready only when its Service publishes not-ready addresses (JobSet's does), and
the names given with `--record` (the `kubernetes` Service's, so that they answer before the first list too). A
known name gets its addresses for an A query and an empty answer (NODATA) for any other type; any other name
NXDOMAIN, at once, so that a resolver's walk through its search domains goes on. Nothing is forwarded: no query
leaves this machine. A watch event is served as soon as it arrives (the table is rebuilt on each).

    python -m devtools.cluster.clusterdns --address 10.214.0.1 \
        --record kubernetes.default.svc.cluster.local=10.213.0.1 --server https://127.0.0.1:6443 \
        --certificate-authority ca.crt --client-certificate admin.crt --client-key admin.key
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, BinaryIO, Protocol

TYPE_A = 1
TYPE_AAAA = 28
CLASS_IN = 1
TTL_SECONDS = 5  # CoreDNS's kubernetes plugin's default: names of pods come and go
DEFAULT_DOMAIN = "cluster.local"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SERVICES_PATH = "/api/v1/services"
ENDPOINT_SLICES_PATH = "/apis/discovery.k8s.io/v1/endpointslices"
WATCH_SECONDS = 60  # the API server ends each watch after this; it is then resumed from the last version
RETRY_SECONDS = 0.5  # after a failed list or watch

# Fully qualified name (lower case, no trailing dot) -> its IPv4 addresses.
Records = Mapping[str, tuple[str, ...]]


def _question(message: bytes) -> tuple[str, int, int, int] | None:
    """The first question's name, type, class and the offset after it; None for a malformed query."""
    labels: list[str] = []
    offset = 12
    while offset < len(message):
        length = message[offset]
        offset += 1
        if length == 0:
            if offset + 4 > len(message):
                return None
            query_type, query_class = struct.unpack("!HH", message[offset : offset + 4])
            return ".".join(labels).lower(), query_type, query_class, offset + 4
        if length & 0xC0 or offset + length > len(message):
            return None
        labels.append(message[offset : offset + length].decode("ascii", errors="replace"))
        offset += length
    return None


def answer(query: bytes, records: Records) -> bytes | None:
    """The response to one query message, or None when it is not one to answer."""
    if len(query) < 12:
        return None
    identifier, flags, question_count = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or question_count != 1:
        return None
    parsed = _question(query)
    if parsed is None:
        return None
    name, query_type, query_class, end = parsed
    question = query[12:end]
    addresses = records.get(name.rstrip("."))
    answers: list[bytes] = []
    if addresses and query_type == TYPE_A and query_class == CLASS_IN:
        for address in addresses:
            packed = ipaddress.IPv4Address(address).packed
            # 0xC00C: the name, as a pointer to the question's.
            answers.append(struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_SECONDS, 4) + packed)
    # Authoritative answer, recursion desired copied, recursion available; NXDOMAIN for unknown names.
    response_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | (0 if addresses else 3)
    header = struct.pack("!HHHHHH", identifier, response_flags, 1, len(answers), 0, 0)
    return header + question + b"".join(answers)


def _ipv4(address: str) -> bool:
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        return False
    return True


def service_records(
    services: Iterable[Mapping[str, Any]], endpoint_slices: Iterable[Mapping[str, Any]], domain: str = DEFAULT_DOMAIN
) -> dict[str, tuple[str, ...]]:
    """The names the cluster's Services and EndpointSlices (as the API returns them) give, and their addresses."""
    found: dict[str, set[str]] = {}
    headless: dict[tuple[str, str], bool] = {}  # (namespace, name) -> publishes not-ready addresses
    for service in services:
        metadata, spec = service["metadata"], service.get("spec") or {}
        key = (metadata["namespace"], metadata["name"])
        fqdn = f"{key[1]}.{key[0]}.svc.{domain}"
        if spec.get("type") == "ExternalName":
            continue  # a CNAME to a name this server does not serve
        if spec.get("clusterIP") == "None":
            headless[key] = bool(spec.get("publishNotReadyAddresses"))
            continue
        for address in spec.get("clusterIPs") or [spec.get("clusterIP") or ""]:
            if _ipv4(address):
                found.setdefault(fqdn, set()).add(address)
    for piece in endpoint_slices:
        metadata = piece["metadata"]
        key = (metadata["namespace"], (metadata.get("labels") or {}).get(SERVICE_NAME_LABEL, ""))
        if key not in headless or piece.get("addressType") != "IPv4":
            continue
        service_fqdn = f"{key[1]}.{key[0]}.svc.{domain}"
        for endpoint in piece.get("endpoints") or []:
            # An endpoint is ready unless its condition says otherwise (an unknown condition counts as ready).
            ready = (endpoint.get("conditions") or {}).get("ready") is not False
            if not ready and not headless[key]:
                continue
            for address in endpoint.get("addresses") or []:
                if not _ipv4(address):
                    continue
                hostname = endpoint.get("hostname") or address.replace(".", "-")
                found.setdefault(service_fqdn, set()).add(address)
                found.setdefault(f"{hostname}.{service_fqdn}".lower(), set()).add(address)
    return {name: tuple(sorted(addresses, key=ipaddress.IPv4Address)) for name, addresses in found.items()}


def merged(*tables: Records) -> dict[str, tuple[str, ...]]:
    """Every name of the tables, with the addresses all of them give it."""
    union: dict[str, set[str]] = {}
    for table in tables:
        for name, addresses in table.items():
            union.setdefault(name, set()).update(addresses)
    return {name: tuple(sorted(addresses, key=ipaddress.IPv4Address)) for name, addresses in union.items()}


def log(message: str) -> None:
    # One write per line: the watching threads log too.
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {message}\n")
    sys.stdout.flush()


class Api(Protocol):
    def open(self, path: str, timeout: float) -> BinaryIO:
        """The answer to a GET of `path`, to read (a stream, for a watch)."""
        ...


class KubernetesApi:
    """GET requests to the API server with a client certificate."""

    def __init__(self, server: str, certificate_authority: str, certificate: str, key: str) -> None:
        self.server = server.rstrip("/")
        self.context = ssl.create_default_context(cafile=certificate_authority)
        self.context.load_cert_chain(certificate, key)

    def open(self, path: str, timeout: float) -> BinaryIO:
        response: http.client.HTTPResponse = urllib.request.urlopen(
            self.server + path, context=self.context, timeout=timeout
        )
        return response


class WatchedCollection:
    """Every object of one resource, across namespaces, kept current: listed, then watched from the list's
    resourceVersion (resumed where it ended), and listed again when the watch fails or its version is too old.
    `items` is replaced, never changed in place, so another thread may read it at any time."""

    def __init__(self, api: Api, path: str, changed: Callable[[], None]) -> None:
        self.api = api
        self.path = path
        self.changed = changed
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.listed = threading.Event()

    def run(self) -> None:
        version: str | None = None
        last_error = ""
        while True:
            try:
                if version is None:
                    version = self.list()
                version = self.watch(version)
                last_error = ""
            except (OSError, ValueError, KeyError, http.client.HTTPException) as error:
                if str(error) != last_error:  # one line per kind of failure, not one per retry
                    log(f"{self.path}: {error!r}; listing again every {RETRY_SECONDS} s")
                    last_error = str(error)
                version = None
                time.sleep(RETRY_SECONDS)

    def list(self) -> str:
        """Take every object from a list; the version to watch from."""
        with self.api.open(self.path, timeout=30) as response:
            listing = json.loads(response.read())
        self.items = {_key(item): item for item in listing.get("items") or []}
        self.changed()
        if not self.listed.is_set():
            log(f"{self.path}: {len(self.items)} listed, watching")
            self.listed.set()
        version: str = listing["metadata"]["resourceVersion"]
        return version

    def watch(self, version: str) -> str | None:
        """Apply the watch's events until it ends; the version to resume from, or None to list again."""
        query = urllib.parse.urlencode(
            {
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(WATCH_SECONDS),
            }
        )
        with self.api.open(f"{self.path}?{query}", timeout=WATCH_SECONDS + 30) as stream:
            for line in stream:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, item = event["type"], event["object"]
                if kind == "ERROR":  # typically 410 Gone: the version is too old to watch from
                    return None
                version = item["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                items = dict(self.items)
                if kind == "DELETED":
                    items.pop(_key(item), None)
                else:
                    items[_key(item)] = item
                self.items = items
                self.changed()
        return version


def _key(item: Mapping[str, Any]) -> tuple[str, str]:
    return item["metadata"].get("namespace", ""), item["metadata"]["name"]


class ClusterRecords:
    """The fixed records and those of the cluster's Services and EndpointSlices, rebuilt on every change."""

    def __init__(self, fixed: Records, api: Api | None, domain: str = DEFAULT_DOMAIN) -> None:
        self.fixed = fixed
        self.domain = domain
        self.current: Records = merged(fixed)
        self._lock = threading.Lock()
        self.collections = (
            []
            if api is None
            else [WatchedCollection(api, path, self._rebuild) for path in (SERVICES_PATH, ENDPOINT_SLICES_PATH)]
        )

    def start(self) -> None:
        for collection in self.collections:
            threading.Thread(target=collection.run, name=collection.path, daemon=True).start()

    def _rebuild(self) -> None:
        with self._lock:
            services, slices = (collection.items.values() for collection in self.collections)
            self.current = merged(self.fixed, service_records(services, slices, self.domain))


def serve(address: str, port: int, records: ClusterRecords) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind((address, port))
        log(f"serving on {address}:{port}")
        while True:
            query, client = server.recvfrom(4096)
            response = answer(query, records.current)
            if response is not None:
                server.sendto(response, client)


def _record(value: str) -> tuple[str, str]:
    name, equals, address = value.partition("=")
    if not equals or not name or not _ipv4(address):
        raise argparse.ArgumentTypeError(f"{value}: not NAME=IPv4-ADDRESS")
    return name.lower().rstrip("."), address


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True, help="address to listen on (UDP)")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--record", type=_record, action="append", default=[], help="NAME=ADDRESS (repeatable)")
    parser.add_argument("--cluster-domain", default=DEFAULT_DOMAIN)
    parser.add_argument("--server", help="the API server's URL; without it, only the --record names are served")
    parser.add_argument("--certificate-authority", help="the API server's CA certificate (PEM file)")
    parser.add_argument("--client-certificate", help="a client certificate allowed to list and watch (PEM file)")
    parser.add_argument("--client-key", help="its key (PEM file)")
    arguments = parser.parse_args(argv)
    api = None
    if arguments.server:
        credentials = (arguments.certificate_authority, arguments.client_certificate, arguments.client_key)
        if not all(credentials):
            parser.error("--server needs --certificate-authority, --client-certificate and --client-key")
        api = KubernetesApi(arguments.server, *credentials)
    fixed: dict[str, set[str]] = {}
    for name, address in arguments.record:
        fixed.setdefault(name, set()).add(address)
    records = ClusterRecords(
        {name: tuple(addresses) for name, addresses in fixed.items()}, api, arguments.cluster_domain
    )
    records.start()
    serve(arguments.address, arguments.port, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
