#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the Kubernetes Go module,
# and helm, Kueue's manager (with Kueue's CRDs) and JobSet's manager (with its CRD) from modules of their own, at the versions pinned in
# devtools/cluster/go/*/go.mod (beside the control plane code, which reads the same pins to find them); and, for
# the `containers` runtime (real kubelets, see devtools/cluster/README.md), the kubelet from the same Kubernetes
# module, the pause program from its source, containerd, crictl and the CNI plugins from modules of their own.
# The binaries are cached in ~/.cache/batchmark/cluster/<version>/ (BATCHMARK_CLUSTER_CACHE overrides the root)
# and reused when present.
# Cold, on 2 cores: several minutes and about 2 GB of memory; nice'd so the machine stays usable.
set -euo pipefail

go_modules="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../devtools/cluster/go" && pwd)"
cache="${BATCHMARK_CLUSTER_CACHE:-$HOME/.cache/batchmark/cluster}"

pinned() { # go.mod module -> version
    awk -v module="$2" '$1 == module { print $2; exit } $1 == "require" && $2 == module { print $3; exit }' "$1"
}
kube_version="$(pinned "$go_modules/kube/go.mod" k8s.io/kubernetes)"
helm_version="$(pinned "$go_modules/helm/go.mod" helm.sh/helm/v4)"
kueue_version="$(pinned "$go_modules/kueue/go.mod" sigs.k8s.io/kueue)"
jobset_version="$(pinned "$go_modules/jobset/go.mod" sigs.k8s.io/jobset)"
containerd_version="$(pinned "$go_modules/containerd/go.mod" github.com/containerd/containerd/v2)"
cni_version="$(pinned "$go_modules/cni/go.mod" github.com/containernetworking/plugins)"
crictl_version="$(pinned "$go_modules/critools/go.mod" sigs.k8s.io/cri-tools)"
for version in "$kube_version" "$helm_version" "$kueue_version" "$jobset_version" "$containerd_version" "$cni_version" "$crictl_version"; do
    [[ -n "$version" ]] || { echo "build: cannot read the pinned versions" >&2; exit 1; }
done

export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -modcacherw"
# Go's build and module caches serve only builds, and the binaries are what is kept: in ~/.cache/go-build and
# ~/go/pkg/mod these builds left ~16 GB that later test runs needed for images on their nodes (CI's disk filled).
# A folder of this run's, removed when it ends (-modcacherw: the module cache's files are read-only otherwise).
mkdir -p "$cache"
go_caches="$(mktemp -d "$cache/.go-caches.XXXXXX")"
trap 'rm -rf "$go_caches"' EXIT
export GOCACHE="$go_caches/build" GOMODCACHE="$go_caches/modules"

# From Go 1.27 encoding/json/v2 is on by default, and kube-openapi's JSON then comes out malformed
# (kubectl apply fails with "failed to download openapi").
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [[ "$go_minor" =~ ^[0-9]+$ ]] && (( go_minor >= 27 )); then
    export GOEXPERIMENT="${GOEXPERIMENT:+$GOEXPERIMENT,}nojsonv2"
fi

# `after_build=FUNCTION build_into ...` calls FUNCTION with the partial folder once the binaries are in it.
build_into() { # module-dir target-dir ldflags package...
    local module="$1" target="$2" ldflags="$3"
    shift 3
    if [[ -d "$target" ]]; then
        echo "build: reusing $target" >&2
        return
    fi
    local partial="$target.partial.$$"
    rm -rf "$partial"
    mkdir -p "$partial"
    echo "build: building $* into $target (this takes minutes the first time)" >&2
    local started=$SECONDS
    (cd "$module" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$partial/" "$@")
    [[ -z "${after_build:-}" ]] || "$after_build" "$partial"
    # Renamed only when complete, so an interrupted build never looks like a cached one.
    mv "$partial" "$target"
    echo "build: done in $((SECONDS - started)) s" >&2
}

# On a machine without the binaries, the other modules' dependencies download (network, ~1.5 min) while
# Kubernetes builds (CPU): each build then finds them in the module cache. A failed download costs nothing: the
# build downloads what it misses itself.
prefetches=()
for module_and_target in "helm:helm-$helm_version" "kueue:kueue-$kueue_version" "jobset:jobset-$jobset_version" \
    "containerd:containerd-$containerd_version" "critools:crictl-$crictl_version" "cni:cni-plugins-$cni_version"; do
    if [[ ! -d "$cache/${module_and_target#*:}" ]]; then
        (cd "$go_modules/${module_and_target%%:*}" && nice -n 10 go mod download >/dev/null 2>&1) &
        prefetches+=("$!")
    fi
done

kube_minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags="-s -w"
# What hack/lib/version.sh stamps into a release, so components and clients report the real version.
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $package.gitVersion=$kube_version -X $package.gitMajor=1 -X $package.gitMinor=$kube_minor"
    kube_ldflags+=" -X $package.gitTreeState=clean"
done
build_into "$go_modules/kube" "$cache/$kube_version" "$kube_ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

build_into "$go_modules/helm" "$cache/helm-$helm_version" \
    "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.metadata=" \
    helm.sh/helm/v4/cmd/helm

# Kueue's CRDs go beside its manager, from the same module version, so the two always match.
copy_kueue_crds() { # partial-dir
    local source
    source="$(cd "$go_modules/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
    cp -r "$source/config/components/crd/bases" "$1/crds"
}
after_build=copy_kueue_crds build_into "$go_modules/kueue" "$cache/kueue-$kueue_version" \
    "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version" \
    sigs.k8s.io/kueue/cmd/kueue

# JobSet's manager is its module's root package (main.go; cmd/ holds only an in-place restart agent), so the
# binary is named `jobset` after the module; its CRD goes beside it, from the same module version.
copy_jobset_crds() { # partial-dir
    local source
    source="$(cd "$go_modules/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
    cp -r "$source/config/components/crd/bases" "$1/crds"
}
after_build=copy_jobset_crds build_into "$go_modules/jobset" "$cache/jobset-$jobset_version" \
    "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$jobset_version -X sigs.k8s.io/jobset/pkg/version.GitCommit=" \
    sigs.k8s.io/jobset

# The containers runtime. The kubelet goes into a folder of its own, so that adding it rebuilt nothing above.
build_pause() { # partial-dir: Kubernetes' pause program (the pod sandbox's process), from the module's source
    local source
    source="$(cd "$go_modules/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
    nice -n 10 gcc -Os -Wall -Werror -static -DVERSION="$kube_version-batchmark" -o "$1/pause" "$source"
}
after_build=build_pause build_into "$go_modules/kube" "$cache/kubelet-$kube_version" "$kube_ldflags" \
    k8s.io/kubernetes/cmd/kubelet
# As containerd's release builds: static, without the snapshotters that need C libraries (btrfs, devmapper, ZFS).
CGO_ENABLED=0 GOFLAGS="$GOFLAGS -tags=no_btrfs,no_devmapper,no_zfs,urfave_cli_no_docs" build_into \
    "$go_modules/containerd" "$cache/containerd-$containerd_version" \
    "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2" \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
CGO_ENABLED=0 build_into "$go_modules/critools" "$cache/crictl-$crictl_version" \
    "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" sigs.k8s.io/cri-tools/cmd/crictl
CGO_ENABLED=0 build_into "$go_modules/cni" "$cache/cni-plugins-$cni_version" \
    "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version" \
    github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local \
    github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/meta/portmap

for prefetch in "${prefetches[@]}"; do
    wait "$prefetch" || true
done
echo "$cache/$kube_version"
