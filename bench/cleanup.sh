#!/usr/bin/env bash
# cleanup.sh: the outbox cleanup designs side by side over a long run (issue 14;
# docs/operations.md section 4): how big the outbox gets and what the writers pay.
#
#   bench/cleanup.sh [EVENTS]     events per design (default 2000000; env EVENTS works too)
#
# For each design (DESIGNS, default "none janitor partitions same-transaction"), on a fresh
# outbox made by `walrelay setup` with that design, while `walrelay run` streams into the
# dev broker (walrelay-devbroker, 3 brokers): pgbench commits EVENTS/10 transactions of 10
# events each (CLIENTS clients; each transaction calls one plpgsql function that INSERTs
# the 10 rows and, for same-transaction, DELETEs them by ctid, as the producer helper
# does), then waits until the slot confirmed the end. Every SAMPLE seconds it samples the
# outbox (summed over partitions): live and dead tuples and total size. It reports per
# design: the writers' transaction latency (pgbench's average and stddev) and rate, the
# outbox's largest and final size, rows and dead tuples, and the drain time.
#
#   none              no cleanup (outbox.retention_ms 0): the table keeps every row
#   janitor           outbox.retention_ms RETENTION_MS (default 30000): delivered rows older
#                     than it are deleted in batches while the run goes on
#   partitions        hourly partitions, retention one hour: within a run of minutes no
#                     partition expires, so the table holds every row (what it shows is the
#                     absence of dead tuples and the cost of routing); the dropping itself
#                     is tested by CleanupTest.PartitionsOlderThanTheRetentionAreDroppedOnceDelivered
#   same-transaction  every writer deletes its rows in its own transaction
#
# Env: BUILD (default build-bench, built when missing), WORK (default /tmp/walrelay-cleanup),
# DESIGNS, CLIENTS (default 2), RETENTION_MS, SAMPLE (default 5), KEEP=1 keeps the files.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

EVENTS=${1:-${EVENTS:-2000000}}
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-cleanup}
DESIGNS=${DESIGNS:-none janitor partitions same-transaction}
CLIENTS=${CLIENTS:-2}
RETENTION_MS=${RETENTION_MS:-30000}
SAMPLE=${SAMPLE:-5}
PGBENCH=${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin}/pgbench
BENCH_NAME=cleanup
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_build
[[ -x $PGBENCH ]] || PGBENCH=$(command -v pgbench) || { echo "pgbench is needed" >&2; exit 2; }
bench_start autovacuum_naptime=10s

design_flags() {
  case $1 in
    none) echo "--outbox-retention-ms 0" ;;
    janitor) echo "--outbox-retention-ms $RETENTION_MS --outbox-janitor-interval-ms 1000" ;;
    partitions) echo "--outbox-cleanup partitions --outbox-partition-period hourly --outbox-retention-ms 3600000" ;;
    same-transaction) echo "--outbox-cleanup same-transaction --recovery-enabled false" ;;
  esac
}

# The outbox summed over its partitions: live, dead, bytes.
OUTBOX_STATS="WITH t AS (SELECT relid FROM pg_partition_tree('outbox') UNION SELECT 'outbox'::regclass)
SELECT coalesce(sum(s.n_live_tup), 0) || ' ' || coalesce(sum(s.n_dead_tup), 0) || ' ' ||
       (SELECT sum(pg_total_relation_size(relid)) FROM t)
FROM t LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid"

TXS=$(( EVENTS / 10 ))
PER_CLIENT=$(( TXS / CLIENTS ))
declare -a RESULTS
for design in $DESIGNS; do
  log "$design: fresh outbox"
  q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots" >/dev/null
  q "DROP TABLE IF EXISTS outbox, walrelay_progress, walrelay_dead_letter CASCADE; DROP PUBLICATION IF EXISTS walrelay_outbox" >/dev/null
  # shellcheck disable=SC2046
  "$WALRELAY" setup --create-tables --source-dsn "$DSN" $(design_flags "$design") >"$WORK/setup.$design.log" 2>&1 ||
    { cat "$WORK/setup.$design.log" >&2; exit 1; }
  delete_rows=false
  [[ $design == same-transaction ]] && delete_rows=true
  q "CREATE OR REPLACE FUNCTION bench_write(n int, seq bigint) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE r record;
BEGIN
  FOR r IN INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'payment', 'acct-' || ((seq * n + g) % 10000), 'PaymentCaptured',
                  jsonb_build_object('payment_id', seq * n + g, 'amount_cents', g * 7,
                                     'currency', 'EUR')
           FROM generate_series(1, n) g RETURNING tableoid, ctid LOOP
    IF $delete_rows THEN
      DELETE FROM outbox WHERE tableoid = r.tableoid AND ctid = r.ctid;
    END IF;
  END LOOP;
END \$\$" >/dev/null
  printf '%s\n' '\set seq random(1, 100000000)' 'SELECT bench_write(10, :seq);' >"$WORK/write.sql"

  # shellcheck disable=SC2046
  "$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOT" --ops-log-level warn \
    --flow-status-interval-ms 100 $(design_flags "$design") >"$WORK/relay.$design.log" 2>&1 &
  RELAY_PID=$!
  sleep 2
  : >"$WORK/samples.$design"
  ( while true; do q "$OUTBOX_STATS" >>"$WORK/samples.$design" 2>/dev/null || true; sleep "$SAMPLE"; done ) &
  SAMPLER_PID=$!
  log "$design: $TXS transactions of 10 events from $CLIENTS clients"
  start=$(date +%s.%N)
  "$PGBENCH" -n -P 30 -c "$CLIENTS" -j "$CLIENTS" -t "$PER_CLIENT" -f "$WORK/write.sql" "$DSN" \
    >"$WORK/pgbench.$design.log" 2>&1 || { cat "$WORK/pgbench.$design.log" >&2; exit 1; }
  written=$(date +%s.%N)
  end_lsn=$(q "SELECT pg_current_wal_lsn()")
  until [[ $(q "SELECT coalesce((SELECT confirmed_flush_lsn >= '$end_lsn'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'walrelay'), false)") == t ]]; do
    kill -0 "$RELAY_PID" 2>/dev/null || { log "relay died"; tail -20 "$WORK/relay.$design.log" >&2; exit 1; }
    sleep 0.2
  done
  drained=$(date +%s.%N)
  sleep "$SAMPLE"
  kill "$SAMPLER_PID" 2>/dev/null; wait "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=""
  final=$(q "$OUTBOX_STATS")
  kill -TERM "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true
  RELAY_PID=""
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$WORK/pgbench.$design.log")
  sd=$(sed -n 's/^latency stddev = \([0-9.]*\) ms/\1/p' "$WORK/pgbench.$design.log")
  max_bytes=$(awk 'BEGIN{m=0} {if ($3+0 > m) m=$3+0} END{print m}' "$WORK/samples.$design")
  max_rows=$(awk 'BEGIN{m=0} {if ($1+0 > m) m=$1+0} END{print m}' "$WORK/samples.$design")
  line=$(awk -v d="$design" -v lat="$lat" -v sd="$sd" -v s="$start" -v w="$written" \
    -v e="$drained" -v ev="$EVENTS" -v mb="$max_bytes" -v mr="$max_rows" -v f="$final" '
    BEGIN { split(f, x, " ");
      printf "%-17s %8.2f %8.2f %9.0f %9.0f %10.1f %9d %10.1f %9d %9d\n", d, lat, sd,
        ev / (w - s), ev / (e - s), mb / 1048576, mr, x[3] / 1048576, x[1], x[2] }')
  RESULTS+=("$line")
  log "$design: done"
done

echo "events per design: $EVENTS in transactions of 10 ($CLIENTS clients); janitor retention ${RETENTION_MS} ms; $(nproc) cores"
printf '%-17s %8s %8s %9s %9s %10s %9s %10s %9s %9s\n' design lat_ms sd_ms write/s e2e/s \
  max_MB max_rows final_MB final_rows final_dead
for l in "${RESULTS[@]}"; do echo "$l"; done
