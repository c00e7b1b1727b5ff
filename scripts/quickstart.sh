#!/usr/bin/env bash
# walrelay quickstart: the payments story end to end on this machine.
#
#   bash scripts/quickstart.sh                  (as root or with sudo; EVENTS=20000 by default)
#   bash scripts/quickstart.sh --kafka apache   the same on a three-broker Apache Kafka cluster
#                                               (scripts/kafka.sh; Java and Maven, Kafka's jars
#                                               from Maven Central on first use), killing one
#                                               broker mid-stream too
#   bash scripts/quickstart.sh --kafka apache --exactly-once
#                                               the relay in exactly-once mode (Kafka
#                                               transactions and a checkpoint topic): the
#                                               verdict also counts the duplicates in Kafka
#                                               (read_committed), which must be 0
#
# It installs what is missing (Debian 12), builds, and starts:
#   - a throwaway PostgreSQL 15 (wal_level=logical) holding the billing service's tables
#     (payments + outbox) and the ledger service's tables (wallet, inbox);
#   - a development Kafka: librdkafka's mock cluster as a process (walrelay-devbroker), or
#     with --kafka apache Apache Kafka itself (3 brokers, replication factor 3,
#     min.insync.replicas=2);
#   - walrelay (setup, then run), publishing the outbox to topic outbox.payment;
#   - the ledger consumer (walrelay-ledger): credits wallets through the inbox library.
# A billing writer commits each payment and its outbox row in ONE transaction. Midway the
# relay is killed with SIGKILL and restarted, the ledger too, and at the end a second
# consumer group replays the whole topic into the same ledger (a full redelivery). The
# verdict is computed from the ledger's tables against the billing tables (and, with
# --exactly-once, from the topic read back with kcat, isolation.level=read_committed); then
# `walrelay audit` reconciles the topic with the outbox table as a second witness.
# Environment: EVENTS, WORKDIR (default /tmp/walrelay-quickstart), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
EVENTS=${EVENTS:-20000}
WORKDIR=${WORKDIR:-/tmp/walrelay-quickstart}
JOBS=${JOBS:-2}
BUILD=${BUILD_ROOT:-build}/main
KAFKA=dev
EXACTLY_ONCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kafka) KAFKA=${2:-}; shift 2 ;;
    --exactly-once) EXACTLY_ONCE=1; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
case "$KAFKA" in dev|apache) ;; *) echo "quickstart.sh: --kafka dev or apache" >&2; exit 2 ;; esac
if [ "$EXACTLY_ONCE" = 1 ] && [ "$KAFKA" != apache ]; then
  echo "quickstart.sh: --exactly-once needs --kafka apache (the development Kafka, librdkafka's mock cluster, does not fence stale producers)" >&2
  exit 2
fi
EO_FLAGS=()
[ "$EXACTLY_ONCE" = 1 ] && EO_FLAGS=(--kafka-exactly-once true)

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

say "1/7 dependencies"
bash scripts/install-deps.sh

say "2/7 build ($BUILD)"
# Same build directory and flags as scripts/test.sh, so the two commands share one build.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWALRELAY_WERROR=ON >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target walrelay walrelay-devbroker walrelay-ledger
WALRELAY="$ROOT/$BUILD/src/cli/walrelay"
DEVBROKER="$ROOT/$BUILD/src/kafka/walrelay-devbroker"
LEDGER="$ROOT/$BUILD/src/inbox/examples/walrelay-ledger"

rm -rf "$WORKDIR"
mkdir -p "$WORKDIR"
chmod 755 "$WORKDIR"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash "$ROOT/scripts/pgtmp.sh" stop "$WORKDIR/pg" >/dev/null 2>&1 || true
  if [ "$KAFKA" = apache ]; then
    bash "$ROOT/scripts/kafka.sh" stop --dir "$WORKDIR/kafka" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

if [ "$KAFKA" = apache ]; then
  say "3/7 PostgreSQL 15 (throwaway) and Apache Kafka (3 brokers; about 20 s)"
else
  say "3/7 PostgreSQL 15 (throwaway) and the development Kafka"
fi
eval "$(bash scripts/pgtmp.sh start "$WORKDIR/pg" max_slot_wal_keep_size=1GB)"
export PGHOST PGPORT PGUSER PGDATABASE
DSN="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
if [ "$KAFKA" = apache ]; then
  bash scripts/kafka.sh start --dir "$WORKDIR/kafka" --owner $$ >"$WORKDIR/bootstrap"
  bash scripts/kafka.sh topic --dir "$WORKDIR/kafka" outbox.payment 8
  BOOTSTRAP=$(sed -n 's/^bootstrap=//p' "$WORKDIR/bootstrap")
else
  "$DEVBROKER" --brokers 3 --topic outbox.payment:8 --bootstrap-file "$WORKDIR/bootstrap" \
    >"$WORKDIR/devbroker.log" 2>&1 </dev/null &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$WORKDIR/bootstrap" ] && break; sleep 0.1; done
  BOOTSTRAP=$(sed 's/^bootstrap=//' "$WORKDIR/bootstrap")
fi
METRICS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "    postgres: $DSN"
echo "    kafka:    $BOOTSTRAP"

say "4/7 walrelay setup, and the billing service's own table"
if [ "$EXACTLY_ONCE" = 1 ]; then  # setup also makes the checkpoint topic
  "$WALRELAY" setup --create-tables --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOTSTRAP" "${EO_FLAGS[@]}"
else
  "$WALRELAY" setup --create-tables --source-dsn "$DSN"
fi
psql -q -v ON_ERROR_STOP=1 -c "CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id uuid NOT NULL DEFAULT gen_random_uuid(), wallet text NOT NULL, amount bigint NOT NULL,
  seq bigint NOT NULL)"

RELAY_PID=""
LEDGER_PID=""
start_relay() {
  "$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOTSTRAP" \
    --flow-status-interval-ms 200 --flow-heartbeat-interval-ms 1000 "${EO_FLAGS[@]}" \
    --ops-metrics-address "127.0.0.1:$METRICS_PORT" >>"$WORKDIR/relay.log" 2>&1 &
  RELAY_PID=$!
  PIDS+=($RELAY_PID)
}
start_ledger() {  # $1 = consumer group
  "$LEDGER" --bootstrap "$BOOTSTRAP" --group "$1" --topic outbox.payment --conninfo "$DSN" \
    --replay-window-ms 86400000 --inbox-retention-ms 1296000000 --describe-configs-timeout-ms 1000 \
    --stats-interval-ms 1000 \
    --property session.timeout.ms=6000 --property heartbeat.interval.ms=500 \
    >>"$WORKDIR/ledger-$1.log" 2>&1 &
  LEDGER_PID=$!
  PIDS+=($LEDGER_PID)
}
stat_of() {  # last value of key $2 in a ledger log $1 (0 when none yet)
  local v
  v=$( (grep -o "$2=[0-9]*" "$1" 2>/dev/null || true) | tail -1 | cut -d= -f2)
  echo "${v:-0}"
}
progress() {
  local written published applied dups lag
  written=$(psql -Atc "SELECT count(*) FROM payments")
  published=$( (curl -s "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null || true) |
    awk '/^walrelay_events_published_total /{print $2}')
  applied=$(psql -Atc "SELECT count(*) FROM wallet_credit" 2>/dev/null || echo 0)
  dups=$(( $(stat_of "$WORKDIR/ledger-ledger.log" duplicates) + 0 ))
  lag=$(psql -Atc "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)) FROM pg_replication_slots WHERE slot_name = 'walrelay'")
  printf '    written %6s | published %6s (this relay run) | applied %6s | duplicates absorbed %5s | slot lag %s\n' \
    "$written" "${published:-?}" "$applied" "$dups" "$lag"
}

say "5/7 billing writes $EVENTS payments (payment + outbox row per transaction); relay and ledger run"
start_relay
start_ledger ledger
# Services run before traffic arrives: let the ledger join its group first (~4 s against
# the development Kafka), so it applies payments while the writer is still writing.
for _ in $(seq 300); do
  grep -q "inbox: assigned" "$WORKDIR/ledger-ledger.log" 2>/dev/null && break
  sleep 0.1
done
psql -q -v ON_ERROR_STOP=1 -v events="$EVENTS" -f scripts/lib/billing_writes.sql >/dev/null &
WRITER=$!
injected_relay=0
injected_ledger=0
injected_broker=0
[ "$KAFKA" = apache ] || injected_broker=1
while kill -0 "$WRITER" 2>/dev/null; do
  sleep 1
  progress
  written=$(psql -Atc "SELECT count(*) FROM payments")
  if [ "$injected_relay" = 0 ] && [ "$written" -ge $((EVENTS / 3)) ]; then
    echo "    >>> crash: kill -9 walrelay (pid $RELAY_PID), then restart it"
    kill -9 "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true
    start_relay
    injected_relay=1
  fi
  if [ "$injected_broker" = 0 ] && [ "$written" -ge $((EVENTS / 2)) ]; then
    echo "    >>> crash: kill -9 Kafka broker 2, restarted 5 s later"
    bash scripts/kafka.sh kill-broker --dir "$WORKDIR/kafka" 2
    (sleep 5; bash scripts/kafka.sh start-broker --dir "$WORKDIR/kafka" 2) &
    injected_broker=1
  fi
  # The ledger crash must land mid-stream: a ledger needs ~4 s to start against the
  # development Kafka (its DescribeConfigs is never answered: 1 s timeout here; then ~3 s
  # of group join), so wait until it has applied something, not only for 2/3 of the writes.
  applied_now=$(psql -Atc "SELECT count(*) FROM wallet_credit" 2>/dev/null || echo 0)
  if [ "$injected_ledger" = 0 ] && [ "$written" -ge $((2 * EVENTS / 3)) ] &&
    [ "${applied_now:-0}" -gt 0 ]; then
    echo "    >>> crash: kill -9 the ledger (pid $LEDGER_PID), then restart it"
    kill -9 "$LEDGER_PID"; wait "$LEDGER_PID" 2>/dev/null || true
    start_ledger ledger
    injected_ledger=1
  fi
done
wait "$WRITER"
if [ "$injected_ledger" = 0 ]; then  # the writes finished before the ledger had started
  for _ in $(seq 600); do
    [ "$(psql -Atc "SELECT count(*) FROM wallet_credit" 2>/dev/null || echo 0)" -gt 0 ] && break
    sleep 0.1
  done
  echo "    >>> crash: kill -9 the ledger (pid $LEDGER_PID), then restart it"
  kill -9 "$LEDGER_PID"; wait "$LEDGER_PID" 2>/dev/null || true
  start_ledger ledger
fi

say "6/7 draining: until the ledger applied every payment"
for _ in $(seq 300); do
  applied=$(psql -Atc "SELECT count(DISTINCT event_id) FROM wallet_credit")
  [ "$applied" -ge "$EVENTS" ] && break
  progress
  sleep 1
done
progress
echo "    >>> redelivery: a second consumer group replays the whole topic into the same ledger"
kill "$LEDGER_PID"; wait "$LEDGER_PID" 2>/dev/null || true
start_ledger ledger-replay
for _ in $(seq 300); do
  d=$(stat_of "$WORKDIR/ledger-ledger-replay.log" duplicates)
  [ "$d" -ge "$EVENTS" ] && break
  sleep 1
done
progress

say "7/7 verdict (computed from the ledger's tables against the billing tables)"
psql -At -F ' ' -f scripts/lib/ledger_verdict.sql >"$WORKDIR/verdict"
read -r TOTAL LOST TWICE BAD_BALANCE DISORDER <"$WORKDIR/verdict"
DUPS=$(( $(stat_of "$WORKDIR/ledger-ledger.log" duplicates) + $(stat_of "$WORKDIR/ledger-ledger-replay.log" duplicates) ))
ORDER=$([ "$DISORDER" = 0 ] && echo "order per wallet kept" || echo "order per wallet BROKEN ($DISORDER)")
echo
echo "    $TOTAL events: $LOST lost, $TWICE applied twice, $ORDER; $BAD_BALANCE wallet balances off;"
echo "    duplicates delivered and absorbed by the inbox: at least ${DUPS} (the full redelivery, plus crash replays seen by the last ledger instance)"
KAFKA_DUPS=0
if [ "$EXACTLY_ONCE" = 1 ]; then
  kcat -C -b "$BOOTSTRAP" -X isolation.level=read_committed -t outbox.payment -o beginning -e -q \
    -f '%h\n' >"$WORKDIR/records.headers"
  RECORDS=$(wc -l <"$WORKDIR/records.headers")
  DISTINCT=$(grep -o 'event_id=[^,]*' "$WORKDIR/records.headers" | sort -u | wc -l)
  KAFKA_DUPS=$(( RECORDS - DISTINCT ))
  ABORTED=$(( $(kcat -C -b "$BOOTSTRAP" -X isolation.level=read_uncommitted -t outbox.payment -o beginning -e -q -f 'x\n' | wc -l) - RECORDS ))
  echo "    Kafka, read_committed: $RECORDS records of $DISTINCT events: $KAFKA_DUPS duplicates in Kafka (exactly-once mode; $ABORTED records of aborted transactions, left by the crashes, are in the log and never read)"
fi
# The second witness: walrelay audit reads the topic back and reconciles it with the outbox
# table, independently of the relay's bookkeeping and of the ledger.
AUDIT_RC=0
"$WALRELAY" audit --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOTSTRAP" --topic outbox.payment \
  --since 1d --grace 0s --json >"$WORKDIR/audit.json" 2>"$WORKDIR/audit.log" || AUDIT_RC=$?
if [ -s "$WORKDIR/audit.json" ]; then
  python3 - "$WORKDIR/audit.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = lambda k: r[k]["count"]
print(f"    walrelay audit (Kafka read back against the outbox table): {r['reference_rows']} rows, "
      f"{r['delivered_rows']} in Kafka: {c('missing')} missing, {c('phantom')} phantom, "
      f"{c('out_of_order')} out of order, {c('torn')} torn; {c('duplicated')} events with "
      f"duplicates in Kafka")
PY
else
  echo "    walrelay audit failed (exit $AUDIT_RC): $(tail -n 3 "$WORKDIR/audit.log")"
fi
if [ "$KAFKA" = apache ]; then
  echo "    logs: $WORKDIR/{relay,ledger-*}.log, $WORKDIR/kafka/*/server.log"
else
  echo "    logs: $WORKDIR/{relay,devbroker,ledger-*}.log"
fi
[ "$LOST" = 0 ] && [ "$TWICE" = 0 ] && [ "$BAD_BALANCE" = 0 ] && [ "$DISORDER" = 0 ] && [ "$KAFKA_DUPS" = 0 ] && [ "$AUDIT_RC" = 0 ]
