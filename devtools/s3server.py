"""A real S3-compatible server for tests: SeaweedFS's all-in-one `weed server` (master, volume server, filer) with
its S3 gateway, bound to one address (127.0.0.1 unless told; a local cluster's pods reach the host at their pod
network's gateway) on free ports, with one identity (an access key and its secret): requests without them are
refused. ``s3_server()`` starts it in a folder of its own, waits until a bucket can be created and
an object written and read, yields where it is, and stops every process it started (its process group) at exit.

The binary is built once by `scripts/setup/seaweedfs.sh` into ~/.cache/batchmark/seaweedfs-VERSION/weed;
BATCHMARK_SEAWEEDFS names another.

    .venv/bin/python -m devtools.s3server [--address A] [--bucket B]   # a server until Ctrl-C or SIGTERM, with
                                                                      # its AWS_* variables printed
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

# The module version scripts/setup/seaweedfs.sh builds (the one the module proxy here serves).
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
BINARY_VARIABLE = "BATCHMARK_SEAWEEDFS"
REGION = "us-east-1"
# On a loaded 2-core machine the servers take a few seconds to elect the master and register the volume server.
STARTUP_TIMEOUT = 90.0
# On SIGTERM `weed server` stops its volume server first, and its filer then retries flushing its log to a volume
# for ~15 s: the data is thrown away with the folder anyway, so the server is killed after this long.
STOP_GRACE = 3.0
# Attempts at starting, each on new free ports (another process may take a port between its choice and its use).
START_ATTEMPTS = 3
_PORTS = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc")


class SeaweedFSMissingError(RuntimeError):
    """The `weed` binary is not built; `scripts/setup/seaweedfs.sh` builds it."""


class S3ServerError(RuntimeError):
    """The server did not start or is unusable; the message carries the end of its log."""


def default_binary() -> Path:
    return Path.home() / ".cache" / "batchmark" / f"seaweedfs-{SEAWEEDFS_VERSION}" / "weed"


def locate_weed() -> Path:
    """The `weed` binary: BATCHMARK_SEAWEEDFS, else the one scripts/setup/seaweedfs.sh built."""
    configured = os.environ.get(BINARY_VARIABLE)
    binary = Path(configured) if configured else default_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        source = f"{BINARY_VARIABLE}={configured}" if configured else str(binary)
        raise SeaweedFSMissingError(
            f"no SeaweedFS binary at {source}: run scripts/setup/seaweedfs.sh (builds it in ~6 min on 2 cores)"
        )
    return binary


@dataclass(frozen=True)
class S3Server:
    """A running server: its S3 endpoint, the identity it accepts, and a bucket made for the caller."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    pid: int
    folder: Path

    def environment(self) -> dict[str, str]:
        """The AWS_* variables that point AWS's tools (and batchmark's S3 store) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def filesystem(self, **options: Any) -> S3FileSystem:
        """pyarrow's S3 file system on this server, with its identity."""
        from pyarrow.fs import S3FileSystem

        scheme, _, address = self.endpoint.partition("://")
        return S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=address,
            scheme=scheme,
            region=REGION,
            **options,
        )


# Who may do what: one identity with every right (it creates buckets); no anonymous one, so a request without its
# key, or signed with another secret, is refused.
def _identities(access_key: str, secret_key: str) -> str:
    import json

    return json.dumps(
        {
            "identities": [
                {
                    "name": "batchmark-tests",
                    "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
    )


def free_ports(count: int, address: str = "127.0.0.1") -> list[int]:
    """Ports free on ``address`` now, all different (held open together while they are chosen)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for held in sockets:
            held.bind((address, 0))
        return [held.getsockname()[1] for held in sockets]


def _command(binary: Path, folder: Path, ports: dict[str, int], config: Path, address: str) -> list[str]:
    return [
        str(binary),
        "server",
        f"-dir={folder / 'data'}",
        # Every server (master, volume, filer, S3 gateway) listens on this address only, and names it to the others.
        f"-ip={address}",
        f"-ip.bind={address}",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master.grpc']}",
        "-master.telemetry=false",
        "-master.electionTimeout=1s",
        # Small volumes, never preallocated, and enough of them for every bucket's collection and the filer's log.
        "-master.volumeSizeLimitMB=16",
        "-volume.max=64",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume.grpc']}",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer.grpc']}",
        f"-filer.localSocket={folder / 'filer.sock'}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3.grpc']}",
        f"-s3.localSocket={folder / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
        # As AWS: a PUT to a bucket that does not exist fails, rather than making it.
        "-s3.autoCreateBucket=false",
    ]


@contextmanager
def s3_server(bucket: str = "batchmark", binary: Path | None = None, address: str = "127.0.0.1") -> Iterator[S3Server]:
    """A SeaweedFS server with ``bucket`` made in it, all its ports on ``address`` (an address of this machine,
    IPv4); every process it started is ended at exit, and its folder removed."""
    binary = binary or locate_weed()
    folder = Path(tempfile.mkdtemp(prefix="batchmark-s3-"))
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            process, server, ports = _start(binary, folder, bucket, address)
            try:
                _wait_until_usable(process, server)
            except _PortTaken:
                _stop(process, ports)
                if attempt == START_ATTEMPTS:
                    raise S3ServerError(
                        f"SeaweedFS found a port taken {START_ATTEMPTS} times:\n{_log_tail(folder)}"
                    ) from None
                continue
            except BaseException:
                _stop(process, ports)
                raise
            try:
                yield server
            finally:
                _stop(process, ports)
            return
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _PortTaken(Exception):
    pass


def _start(
    binary: Path, folder: Path, bucket: str, address: str
) -> tuple[subprocess.Popen[bytes], S3Server, dict[str, int]]:
    for stale in ("data", "log", "filer.sock", "s3.sock", "tmp"):
        path = folder / stale
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    (folder / "data").mkdir()
    (folder / "tmp").mkdir()
    access_key, secret_key = f"BATCHMARK{secrets.token_hex(6).upper()}", secrets.token_urlsafe(24)
    config = folder / "s3.json"
    config.write_text(_identities(access_key, secret_key))
    config.chmod(0o600)
    ports = dict(zip(_PORTS, free_ports(len(_PORTS), address), strict=True))
    environment = {
        **os.environ,
        # Its logs go in TMPDIR, and it reads security.toml and filer.toml from ~/.seaweedfs and the working
        # folder: all in the server's folder, so that nothing of the machine's is read and little is left.
        "TMPDIR": str(folder / "tmp"),
        "HOME": str(folder),
    }
    with (folder / "log").open("wb") as log:
        process = subprocess.Popen(
            _command(binary, folder, ports, config, address),
            cwd=folder,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own: ended whole at exit
        )
    server = S3Server(
        endpoint=f"http://{address}:{ports['s3']}",
        access_key=access_key,
        secret_key=secret_key,
        bucket=bucket,
        pid=process.pid,
        folder=folder,
    )
    return process, server, ports


def _wait_until_usable(process: subprocess.Popen[bytes], server: S3Server) -> None:
    """Until the bucket is made and an object written and read back (the volume server has registered)."""
    from pyarrow.fs import AwsStandardS3RetryStrategy

    filesystem = server.filesystem(
        allow_bucket_creation=True,
        connect_timeout=1,
        request_timeout=5,
        retry_strategy=AwsStandardS3RetryStrategy(max_attempts=1),
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    problem = "not started"
    probe = f"{server.bucket}/.s3server-probe"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = _log_tail(server.folder)
            if "address already in use" in log:
                raise _PortTaken
            raise S3ServerError(f"SeaweedFS exited ({process.returncode}) while starting:\n{log}")
        try:
            filesystem.create_dir(server.bucket)
            with filesystem.open_output_stream(probe) as stream:
                stream.write(b"ready")
            with filesystem.open_input_stream(probe) as stream:
                if stream.readall() == b"ready":
                    filesystem.delete_file(probe)
                    return
        except OSError as error:
            problem = str(error)
        time.sleep(0.25)
    raise S3ServerError(
        f"SeaweedFS's S3 gateway at {server.endpoint} was not usable after {STARTUP_TIMEOUT:.0f} s ({problem}):\n"
        f"{_log_tail(server.folder)}"
    )


def _stop(process: subprocess.Popen[bytes], ports: dict[str, int]) -> None:
    """SIGTERM to the server's process group, SIGKILL after STOP_GRACE; reaped, and the Unix sockets its gRPC
    servers made in /tmp (whatever TMPDIR says) removed."""
    for signal_number, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, signal_number)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; anything else in its group goes with a SIGKILL.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        break
    if process.returncode is None:
        process.wait(timeout=10)
    for name, port in ports.items():
        if name.endswith(".grpc"):
            Path(f"/tmp/seaweedfs-{name.removesuffix('.grpc')}-grpc-{port}.sock").unlink(missing_ok=True)


def _log_tail(folder: Path, lines: int = 15) -> str:
    try:
        text = (folder / "log").read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A SeaweedFS S3 server until Ctrl-C or SIGTERM.")
    parser.add_argument(
        "--address", default="127.0.0.1", help="this machine's IPv4 address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument("--bucket", default="batchmark", help="the bucket made at start (default: batchmark)")
    arguments = parser.parse_args(argv)
    # `weed server` runs in a session of its own, which a SIGTERM to this process's group (devtools/cluster/down
    # stops the demo's server so) never reaches: taken as Ctrl-C, it leaves the with-block, which stops weed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with suppress(KeyboardInterrupt), s3_server(bucket=arguments.bucket, address=arguments.address) as server:
        for name, value in server.environment().items():
            print(f"export {name}={value}")
        print(f"# bucket: {server.bucket}; Ctrl-C stops the server", flush=True)
        signal.pause()


if __name__ == "__main__":
    main()
