"""A one-layer OCI image archive made from a few files, for images no registry can bring here (the pause image).

`containerd`'s `ctr images import` reads the archive (an OCI image layout in a tar file) and names the image from
the index's `io.containerd.image.name` annotation.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _blob(archive: tarfile.TarFile, content: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    _add(archive, f"blobs/sha256/{digest.split(':')[1]}", content)
    return digest, len(content)


def _add(archive: tarfile.TarFile, name: str, content: bytes, mode: int = 0o644) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(content)
    member.mode = mode
    archive.addfile(member, io.BytesIO(content))


def write_image_archive(
    path: Path,
    name: str,
    files: Mapping[str, tuple[Path, int]],
    entrypoint: Sequence[str],
    user: str = "",
) -> None:
    """An archive of image `name` (a full reference) whose one layer holds `files` (path in image: (source, mode))."""
    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for image_path, (source, mode) in sorted(files.items()):
            _add(layer, image_path.lstrip("/"), source.read_bytes(), mode)
    layer_content = layer_bytes.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer_content).hexdigest()
    config: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _add(archive, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        layer_descriptor_digest, layer_size = _blob(archive, layer_content)
        config_digest, config_size = _blob(archive, json.dumps(config).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_descriptor_digest,
                    "size": layer_size,
                }
            ],
        }
        manifest_digest, manifest_size = _blob(archive, json.dumps(manifest).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
                }
            ],
        }
        _add(archive, "index.json", json.dumps(index).encode())
