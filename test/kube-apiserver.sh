#!/usr/bin/env bash
# Builds kube-apiserver once per machine for the tests against a real API server
# (internal/fixture/kubeapi runs it; its Version names this default) and prints its path.
# Kubernetes publishes no kube-apiserver module binary, so this builds it from
# k8s.io/kubernetes with a wrapper module whose replace lines pin every staging
# module (k8s.io/api, …) to the matching v0.x.
# The binary is cached under the Go build cache, keyed by version: a cold build
# takes ~4 minutes and ~2.3 GB on 2 cores; later calls return at once.
# Usage: test/kube-apiserver.sh   (KUBE_VERSION=v1.36.3 by default)
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}   # v1.37.2 is refused by the module proxy
STAGING_VERSION=v0.${KUBE_VERSION#v1.}
dir="$(go env GOCACHE)/kvrouter-kube-apiserver/$KUBE_VERSION"
bin="$dir/kube-apiserver"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

log() { printf 'kube-apiserver: %s\n' "$*" >&2; }
log "building $KUBE_VERSION once per machine (~4 min, ~2.3 GB) into $dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
{
  echo "module kvrouter.test/kube-apiserver"
  echo
  echo "go $(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  echo "tool k8s.io/kubernetes/cmd/kube-apiserver"
  echo
  # Each staging module k8s.io/kubernetes replaces with ./staging/src/k8s.io/<m>.
  sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod" | sort -u |
    while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done
} >"$work/go.mod"
n=$(grep -c '^replace ' "$work/go.mod")
[ "$n" -gt 20 ] || { log "found only $n staging modules in $gomod"; exit 1; }
(cd "$work" && go mod tidy >&2 && go build -trimpath -ldflags "-s -w" -o kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver >&2)
mkdir -p "$dir"
mv "$work/kube-apiserver" "$bin.tmp.$$"
mv "$bin.tmp.$$" "$bin"
log "built $bin"
echo "$bin"
