#!/usr/bin/env bash
# walrelay quickstart: installs what is missing (Debian 12), builds, and runs the relay end
# to end on this machine — a throwaway PostgreSQL 15, a development Kafka (librdkafka's mock
# cluster as a process), `walrelay setup` and `walrelay run` — while a writer commits outbox
# events, the relay is killed with SIGKILL and restarted mid-stream, and at the end every
# event is checked in Kafka: the verdict is computed from what the topic holds.
#
#   sudo bash scripts/quickstart.sh            # EVENTS=20000 by default
# Environment: EVENTS, WORKDIR (default /tmp/walrelay-quickstart), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
EVENTS=${EVENTS:-20000}
WORKDIR=${WORKDIR:-/tmp/walrelay-quickstart}
JOBS=${JOBS:-2}
BUILD=${BUILD_ROOT:-build}/main

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

say "1/6 dependencies"
bash scripts/install-deps.sh

say "2/6 build ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target walrelay walrelay-devbroker
WALRELAY="$ROOT/$BUILD/src/cli/walrelay"
DEVBROKER="$ROOT/$BUILD/src/kafka/walrelay-devbroker"

rm -rf "$WORKDIR"
mkdir -p "$WORKDIR"
chmod 755 "$WORKDIR"
RELAY_PID=""
BROKER_PID=""
cleanup() {
  [ -n "$RELAY_PID" ] && kill "$RELAY_PID" 2>/dev/null || true
  [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null || true
  bash "$ROOT/scripts/pgtmp.sh" stop "$WORKDIR/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "3/6 PostgreSQL 15 (throwaway, wal_level=logical) and the development Kafka"
eval "$(bash scripts/pgtmp.sh start "$WORKDIR/pg" max_slot_wal_keep_size=1GB)"
export PGHOST PGPORT PGUSER PGDATABASE
DSN="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
"$DEVBROKER" --brokers 3 --topic outbox.payment:4 --bootstrap-file "$WORKDIR/bootstrap" \
  >"$WORKDIR/devbroker.log" 2>&1 </dev/null &
BROKER_PID=$!
for _ in $(seq 100); do [ -s "$WORKDIR/bootstrap" ] && break; sleep 0.1; done
BOOTSTRAP=$(cat "$WORKDIR/bootstrap")
echo "    postgres: $DSN"
echo "    kafka:    $BOOTSTRAP"

say "4/6 walrelay setup (outbox table, dead-letter table, publication, slot)"
"$WALRELAY" setup --source-dsn "$DSN"

start_relay() {
  "$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOTSTRAP" \
    --flow-status-interval-ms 200 >>"$WORKDIR/relay.log" 2>&1 &
  RELAY_PID=$!
}

say "5/6 writing $EVENTS events in transactions of 100 while walrelay streams them"
start_relay
TXS=$(( (EVENTS + 99) / 100 ))
{
  for t in $(seq 0 $((TXS - 1))); do
    lo=$((t * 100)); hi=$(( lo + 99 < EVENTS - 1 ? lo + 99 : EVENTS - 1 ))
    echo "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) SELECT 'payment', 'wallet-' || (g % 100), 'PaymentCaptured', jsonb_build_object('seq', g, 'amount', 100 + g % 900) FROM generate_series($lo, $hi) g;"
  done
} >"$WORKDIR/workload.sql"
psql -q -v ON_ERROR_STOP=1 -f "$WORKDIR/workload.sql" &
WRITER=$!
sleep 1
echo "    injecting a crash: kill -9 walrelay (pid $RELAY_PID), then restart it"
kill -9 "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true
start_relay
wait "$WRITER"
TARGET=$(psql -Atc "SELECT pg_current_wal_lsn()")
while :; do
  read -r CONFIRMED LAG < <(psql -Atc "SELECT confirmed_flush_lsn, pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)) FROM pg_replication_slots WHERE slot_name = 'walrelay'" | tr '|' ' ')
  DONE=$(psql -Atc "SELECT '$CONFIRMED'::pg_lsn >= '$TARGET'::pg_lsn")
  echo "    slot walrelay: confirmed $CONFIRMED, lag $LAG"
  [ "$DONE" = t ] && break
  sleep 1
done

say "6/6 verdict (read back from Kafka with kcat)"
kcat -b "$BOOTSTRAP" -C -t outbox.payment -e -q -f '%p\t%k\t%h\t%s\n' >"$WORKDIR/topic.tsv" 2>/dev/null
WRITTEN=$(psql -Atc "SELECT count(*) FROM outbox")
python3 - "$WORKDIR/topic.tsv" "$WRITTEN" <<'PY'
import json, re, sys
path, written = sys.argv[1], int(sys.argv[2])
seen, dup, order_ok, last = set(), 0, True, {}
for line in open(path):
    part, key, headers, value = line.rstrip("\n").split("\t", 3)
    eid = re.search(r"event_id=([0-9a-f-]+)", headers).group(1)
    if eid in seen:
        dup += 1
        continue
    seen.add(eid)
    seq = json.loads(value)["seq"]
    if last.get(key, -1) >= seq:
        order_ok = False
    last[key] = seq
lost = written - len(seen)
print(f"    {written} events written; {len(seen)} distinct in Kafka; {dup} duplicates from the "
      f"crash (absorbed by consumers' inbox); {lost} lost; order per aggregate "
      f"{'kept' if order_ok else 'BROKEN'}")
sys.exit(0 if lost == 0 and order_ok else 1)
PY
echo "    logs: $WORKDIR/relay.log, $WORKDIR/devbroker.log"
