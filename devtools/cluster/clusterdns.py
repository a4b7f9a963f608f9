"""The cluster DNS of the containers runtime: it answers the names of the `kubernetes` Service, nothing else.

A real cluster runs CoreDNS, and in-cluster clients such as kopf reach the API server as
`kubernetes.default.svc`; the kubelets point their pods' resolv.conf here (`clusterDNS`). Every Service but
`kubernetes` has no route here (no kube-proxy), so only its names are served: an A query for one of them gets
its address, an AAAA query an empty answer, any other name NXDOMAIN (nothing is forwarded: no query leaves
this machine).

    python -m devtools.cluster.clusterdns --address 10.214.0.1 --record kubernetes.default.svc.cluster.local=10.213.0.1
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import struct
import sys
from collections.abc import Mapping, Sequence

TYPE_A = 1
TYPE_AAAA = 28
CLASS_IN = 1
TTL_SECONDS = 30


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


def answer(query: bytes, records: Mapping[str, str]) -> bytes | None:
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
    known = name.rstrip(".") in records
    answers = b""
    if known and query_type == TYPE_A and query_class == CLASS_IN:
        address = ipaddress.IPv4Address(records[name.rstrip(".")]).packed
        answers = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_SECONDS, 4) + address
    # Authoritative answer, recursion desired copied, recursion available; NXDOMAIN for unknown names.
    response_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | (0 if known else 3)
    header = struct.pack("!HHHHHH", identifier, response_flags, 1, 1 if answers else 0, 0, 0)
    return header + question + answers


def serve(address: str, port: int, records: Mapping[str, str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind((address, port))
        while True:
            query, client = server.recvfrom(4096)
            response = answer(query, records)
            if response is not None:
                server.sendto(response, client)


def _record(value: str) -> tuple[str, str]:
    name, equals, address = value.partition("=")
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value}: not NAME=IPv4-ADDRESS") from None
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{value}: not NAME=IPv4-ADDRESS")
    return name.lower().rstrip("."), address


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True, help="address to listen on (UDP)")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--record", type=_record, action="append", required=True, help="NAME=ADDRESS (repeatable)")
    arguments = parser.parse_args(argv)
    serve(arguments.address, arguments.port, dict(arguments.record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
