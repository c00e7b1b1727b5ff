#!/usr/bin/env bash
# toxiproxy.sh: Shopify's Toxiproxy, the TCP proxy the network-fault tests put between the
# relay (or the inbox) and PostgreSQL or a Kafka broker, to cut, slow or reset what crosses
# it (issue 45; docs/operations.md, "network faults").
#
#   toxiproxy.sh fetch                               build the pinned server once (cached)
#   toxiproxy.sh start --dir DIR [--owner PID]       start a server; last line api=127.0.0.1:PORT
#   toxiproxy.sh stop  --dir DIR                     stop it (no-op when stopped)
#
# The server comes from the Go module proxy: `go install
# github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION` into
# ${WALRELAY_CACHE_DIR:-~/.cache/walrelay}/toxiproxy-$TOXIPROXY_VERSION/ (Go keeps the
# module sources in its own cache); nothing is downloaded when the binary is there. Needs
# go (1.22+). Proxies and toxics are made through the server's HTTP API by the tests
# (tests/support/toxiproxy.h). With --owner PID a watcher stops the server when PID exits.
set -euo pipefail

TOXIPROXY_VERSION=v2.12.0  # the one place the version is pinned
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${WALRELAY_CACHE_DIR:-$HOME/.cache/walrelay}/toxiproxy-$TOXIPROXY_VERSION
BIN=$CACHE/toxiproxy-server

die() { echo "toxiproxy.sh: $*" >&2; exit 1; }

fetch() {
  [[ -x $BIN ]] && return 0
  command -v go >/dev/null || die "go is needed to build Toxiproxy (Debian: golang-go 1.22+, or https://go.dev/dl)"
  mkdir -p "$CACHE"
  echo "toxiproxy.sh: building Toxiproxy $TOXIPROXY_VERSION from the Go module proxy (once)" >&2
  local tmp
  tmp=$(mktemp -d)
  GOBIN=$tmp GOFLAGS=-modcacherw CGO_ENABLED=0 \
    go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" ||
    { rm -rf "$tmp"; die "go install of Toxiproxy $TOXIPROXY_VERSION failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"; }
  mv "$tmp/server" "$BIN"
  rm -rf "$tmp"
}

cmd=${1:-}
[[ -n $cmd ]] || { sed -n '6,9p' "$0" | sed 's/^# //' >&2; exit 2; }
shift
DIR="" OWNER=${WALRELAY_TOXIPROXY_OWNER:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    --dir) DIR=$2; shift 2 ;;
    --owner) OWNER=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done

case $cmd in
  fetch) fetch ;;
  start)
    [[ -n $DIR ]] || die "--dir DIR is required"
    fetch
    mkdir -p "$DIR"
    # shellcheck source=lib/ports.sh
    source "$HERE/lib/ports.sh"
    port=$(free_ports 1)
    setsid "$BIN" -host 127.0.0.1 -port "$port" >"$DIR/server.log" 2>&1 </dev/null &
    echo $! >"$DIR/pid"
    for _ in $(seq 1 100); do
      if curl -sf "http://127.0.0.1:$port/version" >/dev/null 2>&1; then break; fi
      kill -0 "$(cat "$DIR/pid")" 2>/dev/null || { cat "$DIR/server.log" >&2; die "the server exited at start (log: $DIR/server.log)"; }
      sleep 0.1
    done
    curl -sf "http://127.0.0.1:$port/version" >/dev/null || die "the server does not answer on $port (log: $DIR/server.log)"
    if [[ -n $OWNER ]]; then
      (while kill -0 "$OWNER" 2>/dev/null; do sleep 1; done; kill "$(cat "$DIR/pid")" 2>/dev/null) \
        >/dev/null 2>&1 </dev/null &
      disown
    fi
    echo "api=127.0.0.1:$port"
    ;;
  stop)
    [[ -n $DIR ]] || die "--dir DIR is required"
    if [[ -f $DIR/pid ]]; then
      pid=$(cat "$DIR/pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      rm -f "$DIR/pid"
    fi
    ;;
  *) die "unknown command $cmd (fetch, start, stop)" ;;
esac
