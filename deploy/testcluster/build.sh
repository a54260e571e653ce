#!/usr/bin/env bash
# Build the real Kubernetes control plane the live tests and `gpufleet lab` run against.
#
# Only this script and the wrapper go.mod/go.sum beside it are committed: the binaries come from
# Go modules (k8s.io/kubernetes through the wrapper module, whose `replace` lines pin each staging
# module to the matching v0.X.Y; kwok, kine, helm and containerd by `go install pkg@version`) and
# are cached outside the repository, keyed by version, in ${GPUFLEET_K8S_BIN}. Idempotent: when
# every binary is there and the version stamps match, it does nothing; otherwise it builds only
# the binaries that are
# missing (a cache from before helm was added gets helm alone, in a minute or two; one from before
# the kubelet was added gets the kubelet alone; one from before containerd gets containerd alone).
# Kubernetes' example DRA driver's kubelet plugin (sigs.k8s.io/dra-example-driver, which the lab's
# real node runs in tests/lab/test_example_driver_live.py) comes from its own wrapper module,
# deploy/dra-example-driver, whose go.mod pins its release.
set -euo pipefail

K8S_VERSION=v1.36.3
KWOK_VERSION=v0.7.0
KINE_VERSION=v0.17.5
HELM_VERSION=v3.22.0
# containerd for the lab's real node (`gpufleet lab up --real-node`): 2.x applies the CDI devices a
# DRA driver's NodePrepareResources returns (Debian bookworm's containerd 1.6 ignores them).
CONTAINERD_VERSION=v2.4.2
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The example driver's wrapper module: its go.mod's `tool` line names the kubelet plugin, and its
# require line the release (the one place that version is written).
DRA_EXAMPLE_MODULE="$HERE/../dra-example-driver"
DRA_EXAMPLE_VERSION="$(awk '$1 == "sigs.k8s.io/dra-example-driver" { print $2 }' \
  "$DRA_EXAMPLE_MODULE/go.mod")"
# The stamp names versions (the kubelet is the Kubernetes version); which binaries are there is
# checked file by file, so a cache from before the kubelet keeps its stamp and gets the kubelet.
STAMP_TEXT="kubernetes=${K8S_VERSION} kwok=${KWOK_VERSION} kine=${KINE_VERSION} helm=${HELM_VERSION} containerd=${CONTAINERD_VERSION}"
BIN="${GPUFLEET_K8S_BIN:-$HOME/.cache/gpufleet/k8s-${K8S_VERSION}/bin}"
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
CONTAINERD_COMMANDS=(containerd ctr containerd-shim-runc-v2)
DRA_EXAMPLE_COMMANDS=(dra-example-kubeletplugin)
BINARIES=("${KUBE_COMMANDS[@]}" kwok kine helm "${CONTAINERD_COMMANDS[@]}" "${DRA_EXAMPLE_COMMANDS[@]}")

complete() {
  [ -f "$BIN/.version" ] && [ "$(cat "$BIN/.version")" = "$STAMP_TEXT" ] || return 1
  [ "$(cat "$BIN/.containerd-version" 2>/dev/null)" = "$CONTAINERD_VERSION" ] || return 1
  [ "$(cat "$BIN/.dra-example-driver-version" 2>/dev/null)" = "$DRA_EXAMPLE_VERSION" ] || return 1
  local b
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}

if complete; then
  echo "Kubernetes ${K8S_VERSION} test binaries present in $BIN"
  exit 0
fi

# Go is installed under /usr/local/go on the project's machines; a user's own PATH wins.
if ! command -v go >/dev/null 2>&1; then
  export PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "error: go not found (need Go >= 1.26 on PATH or in /usr/local/go/bin)" >&2
  exit 2
fi

echo "building Kubernetes ${K8S_VERSION} test binaries into $BIN (first time: tens of minutes)…"
start=$(date +%s)
mkdir -p "$BIN"
rm -f "$BIN/.version"

missing() { [ ! -x "$BIN/$1" ]; }

# The `tool (...)` block of the wrapper module names the five commands; install only the missing
# ones (one `go install`, so that the packages they share compile once).
packages=()
for b in "${KUBE_COMMANDS[@]}"; do
  missing "$b" && packages+=("k8s.io/kubernetes/cmd/$b")
done
if [ ${#packages[@]} -gt 0 ]; then
  # The kubelet too builds without cgo (cAdvisor's and the kubelet's cgo parts are optional).
  (cd "$HERE" && GOBIN="$BIN" CGO_ENABLED=0 go install -ldflags="-s -w" "${packages[@]}")
fi
if missing kwok; then
  GOBIN="$BIN" CGO_ENABLED=0 go install -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
fi
if missing kine; then
  # kine's SQLite driver has a cgo build (mattn/go-sqlite3) and a pure-Go one (modernc.org/sqlite);
  # use cgo when a C compiler is there, the pure-Go driver otherwise.
  cgo=0
  command -v gcc >/dev/null 2>&1 && cgo=1
  GOBIN="$BIN" CGO_ENABLED=$cgo go install -ldflags="-s -w" "github.com/k3s-io/kine@${KINE_VERSION}"
fi

if missing helm; then
  # helm for the chart tests (charts/gpufleet): lint, template, install into the lab.
  GOBIN="$BIN" CGO_ENABLED=0 go install -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
fi

# .containerd-version names the containerd the three binaries were built at: binaries of another
# version are removed here and rebuilt (the rest of the cache is kept).
if [ -f "$BIN/.containerd-version" ] && [ "$(cat "$BIN/.containerd-version")" != "$CONTAINERD_VERSION" ]; then
  for b in "${CONTAINERD_COMMANDS[@]}"; do rm -f "$BIN/$b"; done
fi
packages=()
for b in "${CONTAINERD_COMMANDS[@]}"; do
  missing "$b" && packages+=("github.com/containerd/containerd/v2/cmd/$b@${CONTAINERD_VERSION}")
done
if [ ${#packages[@]} -gt 0 ]; then
  # The daemon, its client and the runc shim, in one `go install` (the module has no replace
  # lines, so `pkg@version` builds it as released). Without cgo: no_btrfs drops the one snapshotter
  # that needs C headers (btrfs-progs); the lab uses overlayfs. urfave_cli_no_docs as upstream's
  # Makefile builds it. runc stays the system's (Debian's 1.1.5 runs the lab's pods).
  GOBIN="$BIN" CGO_ENABLED=0 go install -tags "no_btrfs urfave_cli_no_docs" -ldflags="-s -w" \
    "${packages[@]}"
fi
echo "$CONTAINERD_VERSION" >"$BIN/.containerd-version"

# .dra-example-driver-version likewise names the example driver's release its plugin was built at.
if [ "$(cat "$BIN/.dra-example-driver-version" 2>/dev/null)" != "$DRA_EXAMPLE_VERSION" ]; then
  for b in "${DRA_EXAMPLE_COMMANDS[@]}"; do rm -f "$BIN/$b"; done
fi
if missing dra-example-kubeletplugin; then
  # Built inside the wrapper module, not as `go install pkg@version`: the module proxy serves
  # the driver's releases but not its version list, which `pkg@version` reads (for deprecation
  # notices) and fails on. 82 s on 2 cores with empty Go build and module caches.
  (cd "$DRA_EXAMPLE_MODULE" && GOBIN="$BIN" CGO_ENABLED=0 go install -ldflags="-s -w" \
    sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin)
fi
echo "$DRA_EXAMPLE_VERSION" >"$BIN/.dra-example-driver-version"

for b in "${BINARIES[@]}"; do
  [ -x "$BIN/$b" ] || { echo "error: $b was not built into $BIN" >&2; exit 1; }
done
echo "$STAMP_TEXT" >"$BIN/.version"
echo "built Kubernetes ${K8S_VERSION} test binaries in $(($(date +%s) - start)) s"
