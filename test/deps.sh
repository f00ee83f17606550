#!/usr/bin/env bash
# Installs what kvrouter's build and tests need, idempotently, and is a fast
# no-op when everything is present:
#   - Debian packages: the C toolchain and libzmq for cgo, Python oracles
#     (pickle/hashlib are built in; cbor2, xxhash, zmq, msgpack, jinja2 for
#     /usr/bin/python3), etcd for the discovery tests, redis-server for the shared
#     index tests, Node.js for the npm oracles;
#   - valkey-server (Valkey 8) for the shared index tests too: Debian's package
#     where the configured sources have it (trixie), else, on bookworm, the one
#     of bookworm-backports, unpacked under /usr/local/lib/kvrouter-valkey
#     without adding the suite to the system's sources (its libraries are
#     redis-server's);
#   - the npm oracle packages of test/oracle (npm ci, keyed on its lock file);
#   - golangci-lint at the pinned version, under the Go path;
#   - kube-apiserver for the discovery tests (test/kube-apiserver.sh: built once
#     per machine, ~4 min and ~2.3 GB the first time, cached under the Go cache);
#   - toxiproxy-server for the fault tests (github.com/Shopify/toxiproxy/v2 at
#     the pinned version, ~15 s once per machine, cached under the Go cache);
#   - helm for the chart tests (helm.sh/helm/v4 at the pinned version, ~2 min
#     once per machine, cached under the Go cache), and the modules whose CRDs
#     the chart's objects are checked against (prometheus-operator, KEDA);
#   - Prometheus and promtool for the alert and dashboard tests: Debian's
#     prometheus package unpacked under /usr/local/lib/kvrouter-prometheus,
#     not installed (installing it would start a daemon on :9090).
# Usage: test/deps.sh [system|oracle|lint|kube|toxiproxy|helm|prometheus]...   (default: all seven)
set -euo pipefail
cd "$(dirname "$0")/.."

GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:?set by the Makefile}
TOXIPROXY_VERSION=v2.5.0 # internal/fixture/toxiproxy.Version
HELM_VERSION=v4.3.2      # internal/fixture/helm.Version
# internal/fixture/helm.CRDModules: test-only modules, outside go.mod.
CRD_MODULES=(github.com/prometheus-operator/prometheus-operator@v0.85.0 github.com/kedacore/keda/v2@v2.21.0)

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

valkey() {
  command -v valkey-server >/dev/null 2>&1 && return 0
  if apt-cache policy valkey-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    log "installing Debian package valkey-server"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valkey-server >/dev/null
    return 0
  fi
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [ "$codename" != bookworm ]; then
    log "no valkey-server for Debian '$codename': install Valkey 8 and put valkey-server on the PATH"
    return 1
  fi
  # The mirror the system's sources use for bookworm serves its backports too.
  local mirror
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null | awk '$2 == "bookworm" { print $1; exit }')
  if [ -z "$mirror" ]; then
    log "no bookworm suite in the apt sources to take bookworm-backports from: install Valkey 8 and put valkey-server on the PATH"
    return 1
  fi
  log "installing valkey-server 8 from bookworm-backports under /usr/local/lib/kvrouter-valkey"
  local tmp
  tmp=$(mktemp -d)
  chmod 755 "$tmp"
  mkdir -p "$tmp/lists/partial"
  echo "deb $mirror bookworm-backports main" >"$tmp/sources.list"
  local opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o Dir::Etc::sourceparts=/dev/null -o "Dir::State::Lists=$tmp/lists")
  as_root apt-get -qq "${opts[@]}" update
  (cd "$tmp" && as_root apt-get -qq "${opts[@]}" download valkey-tools) 2>/dev/null
  as_root rm -rf /usr/local/lib/kvrouter-valkey
  as_root dpkg-deb -x "$tmp"/valkey-tools_*.deb /usr/local/lib/kvrouter-valkey
  # valkey-server is valkey-check-rdb under another name, as the
  # valkey-server package links it.
  as_root ln -sf /usr/local/lib/kvrouter-valkey/usr/bin/valkey-check-rdb /usr/local/bin/valkey-server
  as_root rm -rf "$tmp"
  valkey-server --version >/dev/null
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

toxiproxy() {
  local dir bin
  dir="$(go env GOCACHE)/kvrouter-toxiproxy/$TOXIPROXY_VERSION"
  bin="$dir/toxiproxy-server"
  [ -x "$bin" ] && return 0
  log "building toxiproxy-server $TOXIPROXY_VERSION into $dir"
  local tmp
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-mod=mod go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  mkdir -p "$dir"
  mv "$tmp/server" "$bin"
  rmdir "$tmp"
}

helm() {
  local dir bin m
  for m in "${CRD_MODULES[@]}"; do
    GOFLAGS=-mod=mod go mod download "$m"
  done
  dir="$(go env GOCACHE)/kvrouter-helm/$HELM_VERSION"
  bin="$dir/helm"
  [ -x "$bin" ] && return 0
  log "building helm $HELM_VERSION into $dir (about 2 minutes, once per machine)"
  local tmp
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-mod=mod go install -ldflags "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  mkdir -p "$dir"
  mv "$tmp/helm" "$bin"
  rmdir "$tmp"
}

prometheus() {
  local dir=/usr/local/lib/kvrouter-prometheus # internal/fixture/prometheus.Dir
  [ -x "$dir/usr/bin/promtool" ] && [ -x "$dir/usr/bin/prometheus" ] && return 0
  log "unpacking Debian's prometheus package under $dir (not installed: no daemon)"
  local tmp
  tmp=$(mktemp -d)
  chmod 755 "$tmp"
  if ! (cd "$tmp" && as_root apt-get download -qq prometheus) 2>/dev/null; then
    as_root apt-get update -qq
    (cd "$tmp" && as_root apt-get download -qq prometheus)
  fi
  as_root rm -rf "$dir"
  as_root dpkg-deb -x "$tmp"/prometheus_*.deb "$dir"
  as_root rm -rf "$tmp"
  "$dir/usr/bin/promtool" --version >/dev/null
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(system oracle lint kube toxiproxy helm prometheus)
for s in "${steps[@]}"; do
  case "$s" in
    system) system && valkey ;;
    oracle|lint|kube|toxiproxy|helm|prometheus) "$s" ;;
    *) log "unknown step $s (want system, oracle, lint, kube, toxiproxy, helm or prometheus)"; exit 2 ;;
  esac
done
