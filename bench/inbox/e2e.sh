#!/usr/bin/env bash
# The consumer against the relay, end to end: can the inbox keep up?
#
#   bench/inbox/e2e.sh            # N = 200,000 events
#   bench/inbox/e2e.sh 50000      # any N; KEEP=1 keeps the work directory
#
# A throwaway PostgreSQL 15 (scripts/pgtmp.sh) holds the outbox and the ledger's tables,
# the dev broker plays Kafka (walrelay-devbroker, topic outbox.payment with PARTITIONS
# partitions, default 16: librdkafka's mock cluster keeps only the newest ~5 MB of each
# partition, ~19k of these records, and drops older ones as a short retention would; keep
# N below ~19k x PARTITIONS or the ledger never sees the dropped records). `walrelay setup` creates the outbox, publication and slot, then
# N payment events are loaded as a backlog (1,000 per transaction; payloads
# {"wallet","amount","seq"}, 100 wallets). Then, at the same instant, the relay
# (`walrelay run`) and the ledger (`walrelay-ledger`, the inbox library with the example
# handler) start:
#   relay time  = start -> the slot's confirmed_flush_lsn reaches the backlog's end (every
#                 event acked by Kafka);
#   ledger time = start -> the ledger's wallet_credit holds N rows (every event applied,
#                 committed) — its group join and startup included.
# Prints both, the ratio (issue 11's target: ledger <= 2x relay) and the ledger's rate
# once it runs (first applied row -> last).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

N=${1:-${N:-200000}}
TX=1000
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-inbox-e2e}
PARTITIONS=${PARTITIONS:-16}  # the dev broker keeps only ~5 MB (~19k records) per partition
WALRELAY=$ROOT/$BUILD/src/cli/walrelay
DEVBROKER=$ROOT/$BUILD/src/kafka/walrelay-devbroker
LEDGER=$ROOT/$BUILD/src/inbox/examples/walrelay-ledger

log() { printf '[inbox-e2e %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ ! -x $WALRELAY || ! -x $DEVBROKER || ! -x $LEDGER ]]; then
  log "building walrelay, walrelay-devbroker and walrelay-ledger in $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DWALRELAY_WERROR=ON >/dev/null
  cmake --build "$BUILD" -j2 --target walrelay walrelay-devbroker walrelay-ledger
fi

rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$WORK"
PGDIR=$WORK/pg
PIDS=()
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [[ "${KEEP:-0}" != 1 ]]; then
    "$ROOT/scripts/pgtmp.sh" destroy "$PGDIR" >/dev/null 2>&1
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

eval "$("$ROOT/scripts/pgtmp.sh" start "$PGDIR")"
export PGHOST PGPORT PGUSER PGDATABASE
DSN="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }

"$WALRELAY" setup --create-tables --source-dsn "$DSN" >"$WORK/setup.log" 2>&1
log "PostgreSQL $(q 'SHOW server_version') at $PGHOST:$PGPORT; loading $N events in transactions of $TX"
psql -X -q -v ON_ERROR_STOP=1 <<SQL
DO \$\$
BEGIN
  FOR b IN 0..$(((N + TX - 1) / TX - 1)) LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'payment', 'wallet-' || (i % 100), 'PaymentCaptured',
           jsonb_build_object('wallet', 'wallet-' || (i % 100), 'amount', 100 + i % 900, 'seq', i)
    FROM generate_series(b * $TX + 1, least((b + 1) * $TX, $N)) i;
    COMMIT;
  END LOOP;
END
\$\$;
SQL
END=$(q "SELECT pg_current_wal_insert_lsn()")

BOOTFILE=$WORK/bootstrap
"$DEVBROKER" --brokers 3 --topic "outbox.payment:$PARTITIONS" --bootstrap-file "$BOOTFILE" \
  </dev/null >"$WORK/devbroker.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 200); do [[ -s $BOOTFILE ]] && break; sleep 0.05; done
BOOT=$(sed -n 's/^bootstrap=//p' "$BOOTFILE")
[[ -n $BOOT ]] || { cat "$WORK/devbroker.log" >&2; exit 1; }

now() { date +%s.%N; }
log "starting the relay and the ledger"
t0=$(now)
"$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOT" \
  --flow-status-interval-ms 100 --ops-log-level warn >"$WORK/relay.log" 2>&1 &
PIDS+=($!)
"$LEDGER" --bootstrap "$BOOT" --group ledger --topic outbox.payment --conninfo "$DSN" \
  --max-connections "${CONNECTIONS:-4}" --replay-window-ms 86400000 --inbox-retention-ms 604800000 \
  --describe-configs-timeout-ms 1000 \
  --stats-interval-ms 1000 --property session.timeout.ms=6000 \
  --property heartbeat.interval.ms=500 >"$WORK/ledger.log" 2>&1 &
PIDS+=($!)

relay_done="" ledger_done="" first_applied=""
deadline=$(( $(date +%s) + 1800 ))
while [[ -z $relay_done || -z $ledger_done ]]; do
  (( $(date +%s) < deadline )) || { log "timed out"; tail -5 "$WORK/relay.log" "$WORK/ledger.log" >&2; exit 1; }
  t=$(now)
  if [[ -z $relay_done ]] &&
     [[ $(q "SELECT coalesce((SELECT confirmed_flush_lsn >= '$END' FROM pg_replication_slots WHERE slot_name = 'walrelay'), false)") == t ]]; then
    relay_done=$t
  fi
  if [[ -z $ledger_done ]]; then
    applied=$(q "SELECT CASE WHEN to_regclass('wallet_credit') IS NULL THEN 0 ELSE (SELECT count(*) FROM wallet_credit) END")
    if [[ -z $first_applied && $applied -gt 0 ]]; then first_applied=$t; fi
    if [[ $applied -ge $N ]]; then ledger_done=$t; fi
  fi
  sleep 0.05
done

relay_s=$(awk "BEGIN{printf \"%.2f\", $relay_done - $t0}")
ledger_s=$(awk "BEGIN{printf \"%.2f\", $ledger_done - $t0}")
ratio=$(awk "BEGIN{printf \"%.2f\", ($ledger_done - $t0) / ($relay_done - $t0)}")
run_rate=$(awk "BEGIN{printf \"%.0f\", $N / ($ledger_done - $first_applied)}")
startup_s=$(awk "BEGIN{printf \"%.2f\", $first_applied - $t0}")
wrong=$(q "SELECT count(*) FROM (SELECT event_id FROM wallet_credit GROUP BY event_id HAVING count(*) > 1) d")
echo "events=$N partitions=$PARTITIONS relay_s=$relay_s ledger_s=$ledger_s ratio=$ratio" \
  "ledger_first_applied_s=$startup_s ledger_rate_per_s=$run_rate applied_twice=$wrong"
[[ $wrong == 0 ]]
