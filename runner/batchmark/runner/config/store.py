"""Where runs are kept beyond the run (``--store``): a folder, given as a path or a ``file://`` URL (on a cluster,
a folder on a mounted volume, a PersistentVolumeClaim), or a bucket of an S3-compatible object store, given as
``s3://BUCKET[/PREFIX]`` and reached the standard AWS way: the endpoint from ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` (none: AWS itself), the credentials and the region from ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``), ``AWS_REGION`` or ``AWS_DEFAULT_REGION``, or ``~/.aws``."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

# Longer than any real path; a longer "path" is a mistake.
MAX_STORE_LENGTH = 4096
S3_SCHEME = "s3"
# S3's rules for a bucket's name (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# A prefix of the characters S3 calls safe in a key; the store's own keys add at most ~250 bytes to it, well
# inside S3's 1,024.
MAX_PREFIX_LENGTH = 512
_PREFIX_CHARACTERS = re.compile(r"[A-Za-z0-9!_.*'()=+,@/-]*")
# A request that gets no byte for this long is abandoned (curl's low-speed limit on Linux), and one to a host
# that does not answer the connection; each is tried this many times in all: an unreachable store fails a run's
# upload in seconds, never hangs it.
S3_CONNECT_TIMEOUT = 5.0
S3_REQUEST_TIMEOUT = 15.0
S3_ATTEMPTS = 3


@dataclass(frozen=True)
class S3Location:
    """A store in an S3 bucket: its runs and index under ``prefix`` (no leading or trailing slash; "" for the
    bucket's root)."""

    bucket: str
    prefix: str

    @property
    def root(self) -> str:
        """The store's root as pyarrow's S3 file system names it: BUCKET/PREFIX."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def __str__(self) -> str:
        return f"{S3_SCHEME}://{self.root}"


def store_location(location: str) -> Path | S3Location:
    """The folder or the S3 bucket (and prefix) ``location`` names; ValueError saying why when it names none."""
    if not location.strip():
        raise ValueError(
            f"{location!r} names no folder: give one, e.g. --store ./results (or a bucket, s3://BUCKET/PREFIX)"
        )
    if len(location) > MAX_STORE_LENGTH:
        raise ValueError(f"is longer than {MAX_STORE_LENGTH} characters")
    if "\x00" in location:
        raise ValueError(f"{location!r} contains a NUL character")
    scheme = urllib.parse.urlsplit(location).scheme.lower() if "://" in location else ""
    # One letter is a Windows drive, not a scheme; a path with a colon later on is a path.
    if len(scheme) <= 1:
        return Path(location)
    if scheme == S3_SCHEME:
        return _s3_location(location)
    if scheme != "file":
        raise ValueError(
            f"{_shown(location)}: {scheme}:// stores are not supported: give a folder (a path or a file:// URL) or"
            " an S3 bucket (s3://BUCKET/PREFIX)"
        )
    parts = urllib.parse.urlsplit(location)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{location!r} names the host {parts.netloc!r}: only local folders (file:///path)")
    return Path(urllib.parse.unquote(parts.path))


def _s3_location(location: str) -> S3Location:
    rest = location.split("://", 1)[1]
    authority, _, path = rest.partition("/")
    if "@" in authority:
        # Never shown: what comes before the @ is a key and a secret.
        raise ValueError(
            f"s3://…@{authority.rpartition('@')[2]}: an s3:// URL carries no credentials: give them in"
            " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    shown = _shown(location)
    if "?" in rest or "#" in rest:
        raise ValueError(f"{shown}: an s3:// store takes no query or fragment (? or #): s3://BUCKET/PREFIX")
    if not authority:
        raise ValueError(f"{shown} names no bucket: s3://BUCKET/PREFIX")
    if ":" in authority:
        raise ValueError(
            f"{shown}: an s3:// URL names a bucket, not a server: give the endpoint in AWS_ENDPOINT_URL"
            " (e.g. http://127.0.0.1:8333)"
        )
    _check_bucket(authority, shown)
    prefix = path.strip("/")
    if len(prefix.encode()) > MAX_PREFIX_LENGTH:
        raise ValueError(f"{shown}: the prefix is longer than {MAX_PREFIX_LENGTH} bytes")
    if not _PREFIX_CHARACTERS.fullmatch(prefix):
        odd = next(character for character in prefix if not _PREFIX_CHARACTERS.fullmatch(character))
        raise ValueError(
            f"{shown}: the prefix contains {odd!r}: use letters, digits, '/' and !_.*'()=+,@- (S3's safe characters)"
        )
    segments = prefix.split("/") if prefix else []
    if any(segment in ("", ".", "..") for segment in segments):
        raise ValueError(f"{shown}: the prefix has an empty, '.' or '..' part: s3://BUCKET/A/B")
    return S3Location(bucket=authority, prefix=prefix)


def _check_bucket(bucket: str, shown: str) -> None:
    if not 3 <= len(bucket) <= 63:
        raise ValueError(f"{shown}: a bucket's name is 3 to 63 characters long, not {len(bucket)}")
    if not _BUCKET.fullmatch(bucket):
        raise ValueError(
            f"{shown}: {bucket!r} is not a bucket's name: lowercase letters, digits, dots and hyphens, beginning and"
            " ending with a letter or digit"
        )
    if ".." in bucket:
        raise ValueError(f"{shown}: {bucket!r} is not a bucket's name: two dots in a row")
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        return
    raise ValueError(
        f"{shown}: {bucket!r} is an IP address, not a bucket's name: give the endpoint in AWS_ENDPOINT_URL"
    )


def _shown(location: str) -> str:
    """The location quoted for a message, control characters escaped, at most 200 characters of it."""
    return repr(location) if len(location) <= 200 else repr(location[:200]) + "…"


@dataclass(frozen=True)
class S3Endpoint:
    """Where the S3 API is served, when not AWS itself: ``host[:port]`` and ``http`` or ``https``."""

    address: str
    scheme: str


def s3_endpoint(environ: Mapping[str, str] | None = None) -> S3Endpoint | None:
    """The endpoint AWS's tools would use for S3: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (unless
    ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`` is true); None for AWS itself. ValueError naming the variable when it
    is not an http(s) URL of a server."""
    environ = os.environ if environ is None else environ
    if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return None
    for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        text = environ.get(variable, "").strip()
        if not text:
            continue
        try:
            parts = urllib.parse.urlsplit(text)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{variable}: {text!r} is not the URL of an S3 endpoint (http:// or https://HOST[:PORT])")
        if parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"{variable}: {text!r}: give only the scheme, host and port (http://HOST:PORT)")
        return S3Endpoint(address=parts.netloc, scheme=parts.scheme)
    return None


def s3_filesystem(environ: Mapping[str, str] | None = None) -> S3FileSystem:
    """pyarrow's S3 file system for the store, with short timeouts and few retries, path-style addressing where an
    endpoint is given. pyarrow (its AWS SDK) reads the credentials and the region from the environment and ~/.aws
    itself, but not the endpoint: that is passed. ValueError for an endpoint that is not one."""
    import pyarrow.fs  # noqa: PLC0415 - 0.15 s of imports, for S3 stores only

    endpoint = s3_endpoint(environ)
    where = {} if endpoint is None else {"endpoint_override": endpoint.address, "scheme": endpoint.scheme}
    return pyarrow.fs.S3FileSystem(
        connect_timeout=S3_CONNECT_TIMEOUT,
        request_timeout=S3_REQUEST_TIMEOUT,
        retry_strategy=pyarrow.fs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS),
        # A small object goes up in one PUT when it is closed, rather than as a multipart upload.
        allow_delayed_open=True,
        **where,
    )


def s3_store_problem(location: S3Location) -> str | None:
    """Why runs cannot be stored in the bucket, found before any work by putting and deleting a probe object;
    None when they can."""
    try:
        filesystem = s3_filesystem()
    except ValueError as error:
        return str(error)
    probe = f"{location.root}/.batchmark-store.{secrets.token_hex(8)}.probe"
    try:
        with filesystem.open_output_stream(probe) as stream:
            stream.write(b"")
    except OSError as error:
        return f"cannot write to the bucket: {first_line(error)}"
    try:
        filesystem.delete_file(probe)
    except OSError as error:
        return f"cannot delete from the bucket (a failed upload could not be cleaned up): {first_line(error)}"
    return None


def first_line(error: BaseException) -> str:
    """An error's first line; for an S3 error, with what to check (the credentials, the endpoint)."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    for codes, hint in _S3_HINTS:
        if any(f"AWS Error {code} " in line for code in codes):
            return f"{line} ({hint})"
    return line


# What to check for the errors pyarrow's S3 file system reports as "AWS Error CODE during ...".
_S3_HINTS = (
    (
        ("ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID", "MISSING_AUTHENTICATION_TOKEN"),
        "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and that they may use the bucket",
    ),
    (("NETWORK_CONNECTION",), "check AWS_ENDPOINT_URL and that the server is up"),
    (("NO_SUCH_BUCKET",), "create the bucket first"),
)
