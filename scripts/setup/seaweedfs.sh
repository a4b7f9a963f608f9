#!/usr/bin/env bash
# Builds SeaweedFS's `weed`, the S3-compatible server the S3 results store's tests run (devtools/s3server.py), from
# its Go module at the version devtools/s3server.py pins (SEAWEEDFS_VERSION), into
# ~/.cache/batchmark/seaweedfs-<version>/weed (BATCHMARK_SEAWEEDFS_CACHE overrides the root), reused when present.
# Prints the binary's path.
# Its go.mod has replace directives, so `go install module@version` refuses it: the module is downloaded into Go's
# module cache, copied to a writable folder and built there.
# Cold, on 2 cores: ~6.5 min, downloads included (~150 MB of source, its dependencies); nice'd so the machine stays
# usable.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="$(sed -nE 's/^SEAWEEDFS_VERSION = "([^"]+)"$/\1/p' "$root/devtools/s3server.py")"
[[ -n "$version" ]] || { echo "build: cannot read SEAWEEDFS_VERSION from devtools/s3server.py" >&2; exit 1; }
module=github.com/seaweedfs/seaweedfs
target="${BATCHMARK_SEAWEEDFS_CACHE:-$HOME/.cache/batchmark}/seaweedfs-$version"

if [[ -x "$target/weed" ]]; then
    echo "build: reusing $target" >&2
    echo "$target/weed"
    exit 0
fi

export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -modcacherw"
partial="$target.partial.$$"
source="$partial/src"
trap 'rm -rf "$partial"' EXIT
rm -rf "$partial"
mkdir -p "$partial"
# Go's build and module caches in the partial folder, removed with it: they serve only this build (in ~/.cache/go-build
# and ~/go/pkg/mod they stayed, gigabytes that test runs needed; -modcacherw lets rm remove the modules).
export GOCACHE="$partial/go-build" GOMODCACHE="$partial/go-modules"
echo "build: building $module@$version into $target (this takes minutes the first time)" >&2
started=$SECONDS
dir="$(nice -n 10 go mod download -json "$module@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$dir" "$source"
(cd "$source" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$partial/weed" ./weed)
rm -rf "$source" "$GOCACHE" "$GOMODCACHE"
# Renamed only when complete, so an interrupted build never looks like a cached one.
mv "$partial" "$target"
trap - EXIT
echo "build: done in $((SECONDS - started)) s" >&2
echo "$target/weed"
