#!/usr/bin/env bash
# PgtmpTest: scripts/pgtmp.sh, the throwaway PostgreSQL of the chaos runs, quickstart and
# benchmarks (the shell twin of TestCluster).
#  1. A first start listens on a port below the kernel's ephemeral range (CI failed when
#     pgtmp.sh picked 43572 and a client's outgoing connection took it before the bind).
#  2. A later start keeps the port; when another process holds it, start fails saying so,
#     and its output makes the caller's `eval "$(pgtmp.sh start ...)"` fail under set -e
#     (chaos.sh went on with PGHOST unset and died on "PGHOST: unbound variable").
set -euo pipefail
ROOT=$1
PGTMP="$ROOT/scripts/pgtmp.sh"
DIR=$(mktemp -d /tmp/walrelay-pgtmp-test.XXXXXX)
chmod 755 "$DIR"
HOLDER=""
cleanup() {
  [[ -z "$HOLDER" ]] || kill "$HOLDER" 2>/dev/null || true
  bash "$PGTMP" destroy "$DIR/pg" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range

# 1. First start.
out=$(bash "$PGTMP" start "$DIR/pg") || fail "first start failed"
eval "$out"
[[ -n "${PGPORT:-}" ]] || fail "start printed no PGPORT: $out"
psql -X -A -t -h 127.0.0.1 -p "$PGPORT" -U walrelay -d postgres -c 'SELECT 1' | grep -qx 1 ||
  fail "no server answers on 127.0.0.1:$PGPORT"
(( PGPORT < eph_lo )) ||
  fail "port $PGPORT is inside the ephemeral range (from $eph_lo): an outgoing connection can take it"
echo "first start: port $PGPORT, below the ephemeral range ($eph_lo and up)"

# 2. Stop, let another process take the port, start again.
bash "$PGTMP" stop "$DIR/pg"
python3 - "$PGPORT" "$DIR/held" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
open(sys.argv[2], "w").close()
time.sleep(300)
PY
HOLDER=$!
for _ in $(seq 100); do [[ -e "$DIR/held" ]] && break; sleep 0.05; done
[[ -e "$DIR/held" ]] || fail "premise: could not hold port $PGPORT"
(exec 3<>"/dev/tcp/127.0.0.1/$PGPORT") 2>/dev/null || fail "premise: port $PGPORT is not held"

set +e
out=$(bash "$PGTMP" start "$DIR/pg" 2>"$DIR/stderr")
rc=$?
set -e
(( rc != 0 )) || fail "start succeeded with port $PGPORT held by another process"
grep -q "port $PGPORT, which this server's clients know" "$DIR/stderr" ||
  fail "the refusal does not name the held port: $(cat "$DIR/stderr")"
grep -q "ss -ltnp" "$DIR/stderr" || fail "the refusal does not say how to find the holder"
# The caller's eval must fail, as chaos.sh's pg_start does under set -e.
if bash -c 'set -euo pipefail; eval "$1"; echo reached' _ "$out" | grep -q reached; then
  fail "eval of a failed start's output went on (printed: '$out')"
fi
echo "held port: refused ($(head -c 120 "$DIR/stderr")...), and the caller's eval stops"

kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true; HOLDER=""
out=$(bash "$PGTMP" start "$DIR/pg") || fail "start after the port was released failed"
eval "$out"
echo "released: started again on $PGPORT"
echo PASS
