#!/usr/bin/env bash
# Installs what kvrouter's build and tests need, idempotently, and is a fast
# no-op when everything is present:
#   - Debian packages: the C toolchain and libzmq for cgo, Python oracles
#     (pickle/hashlib are built in; cbor2, xxhash, zmq, msgpack, jinja2 for
#     /usr/bin/python3), etcd for the discovery tests, redis-server for the shared
#     index tests, Node.js for the npm oracles;
#   - the npm oracle packages of test/oracle (npm ci, keyed on its lock file);
#   - golangci-lint at the pinned version, under the Go path;
#   - kube-apiserver for the discovery tests (test/kube-apiserver.sh: built once
#     per machine, ~4 min and ~2.3 GB the first time, cached under the Go cache).
# Usage: test/deps.sh [system|oracle|lint|kube]...   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."

GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:?set by the Makefile}

APT_PACKAGES=(gcc libc6-dev make git pkg-config libzmq3-dev python3 python3-cbor2
  python3-xxhash python3-zmq python3-msgpack python3-jinja2 etcd-server redis-server ca-certificates)

log() { printf 'deps: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else log "need root to run: $*"; return 1
  fi
}

system() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

oracle() {
  local dir=test/oracle stamp=test/oracle/node_modules/.kvrouter-lock
  if [ -f "$stamp" ] && cmp -s "$dir/package-lock.json" "$stamp"; then return 0; fi
  log "installing the npm oracle packages (npm ci in $dir)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$dir/package-lock.json" "$stamp"
}

lint() {
  local bin
  bin="$(go env GOPATH)/bin/golangci-lint-$GOLANGCI_LINT_VERSION"
  [ -x "$bin" ] && return 0
  log "building golangci-lint $GOLANGCI_LINT_VERSION (a few minutes, once per machine)"
  local tmp
  tmp=$(mktemp -d)
  GOBIN="$tmp" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
  mkdir -p "$(dirname "$bin")"
  mv "$tmp/golangci-lint" "$bin"
  rmdir "$tmp"
}

kube() {
  test/kube-apiserver.sh >/dev/null
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(system oracle lint kube)
for s in "${steps[@]}"; do
  case "$s" in
    system|oracle|lint|kube) "$s" ;;
    *) log "unknown step $s (want system, oracle, lint or kube)"; exit 2 ;;
  esac
done
