#!/usr/bin/env bash
# poll_vs_wal.sh: the same outbox workloads through WAL mode and poll mode on one server,
# side by side (issue 15; docs/poll-mode.md).
#
#   bench/poll_vs_wal.sh [N]     N events per burst (default 100000; env N works too)
#
# For each mode (wal, poll), on a fresh outbox table (`walrelay setup [--source-mode
# poll]`), into the dev broker (walrelay-devbroker, 3 brokers):
#   burst_1    N/10 single-row transactions committed while the relay is stopped, then
#              drained: events/s from start to the last event published (WAL: the slot's
#              confirmed_flush_lsn reaches the end; poll: no row left unpublished);
#   burst_100  N rows in 100-row transactions, drained the same way;
#   steady     RATE single-row transactions per second for SECONDS (pgbench -R) while the
#              relay runs: commit-to-produce latency p50/p99/max = the Kafka record's
#              CreateTime (set by librdkafka at produce) minus clock_timestamp() at insert
#              (kcat reads the records back). The Kafka ack adds the same broker round
#              trip in both modes and is not in this figure.
# and reports per drain: PostgreSQL CPU per event (every server process, µs), WAL bytes
# written per event *while publishing* (poll mode's UPDATEs; WAL mode writes almost none),
# the relay's own CPU per event, and the outbox's dead tuples after the run.
#
# Env: BUILD (build dir with walrelay and walrelay-devbroker; default build-bench, built
# when missing), WORK (default /tmp/walrelay-pollwal), RATE (default 1000), SECONDS
# (default 20), POLL_INTERVAL_MS (default 100), POLL_BATCH (default 100), MODES (default
# "wal poll"), KEEP=1 keeps the cluster and files.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

N=${1:-${N:-100000}}
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-pollwal}
RATE=${RATE:-1000}
SECONDS_STEADY=${SECONDS:-20}
POLL_INTERVAL_MS=${POLL_INTERVAL_MS:-100}
POLL_BATCH=${POLL_BATCH:-100}
MODES=${MODES:-wal poll}
BENCH_NAME=poll_vs_wal
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_build
command -v pgbench >/dev/null || { echo "pgbench is needed (postgresql-contrib)" >&2; exit 2; }
command -v kcat >/dev/null || { echo "kcat is needed" >&2; exit 2; }
bench_start
PGVERSION=$(q "SHOW server_version")

pg_cpu() {  # every server process: the postmaster with its reaped children, live children
  local total
  total=$(cpu_of "$POSTMASTER" all)
  for p in $(pgrep -P "$POSTMASTER"); do total=$(( total + $(cpu_of "$p") )); done
  echo "$total"
}
wal_lsn() { q "SELECT pg_current_wal_lsn()"; }

# mode -> walrelay run's mode flags
relay_flags() {
  if [[ $1 == poll ]]; then
    echo "--source-mode poll --poll-interval-ms $POLL_INTERVAL_MS --poll-batch-rows $POLL_BATCH"
  else
    echo "--source-mode wal --flow-status-interval-ms 100"
  fi
}

fresh_outbox() {  # mode
  "$ROOT/scripts/pgtmp.sh" status "$PGDIR" >/dev/null
  q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots" >/dev/null
  q "DROP TABLE IF EXISTS outbox, walrelay_progress, walrelay_dead_letter; DROP PUBLICATION IF EXISTS walrelay_outbox" >/dev/null
  # shellcheck disable=SC2046
  "$WALRELAY" setup --create-tables --source-dsn "$DSN" $( [[ $1 == poll ]] && echo --source-mode poll ) \
    >"$WORK/setup.$1.log" 2>&1 || { cat "$WORK/setup.$1.log" >&2; exit 1; }
}

start_relay() {  # mode
  # shellcheck disable=SC2046
  "$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOT" --ops-log-level warn \
    $(relay_flags "$1") >>"$WORK/relay.$1.log" 2>&1 &
  RELAY_PID=$!
}
stop_relay() {
  kill -TERM "$RELAY_PID" 2>/dev/null || true
  wait "$RELAY_PID" 2>/dev/null || true
  RELAY_PID=""
}
drained() {  # mode END_LSN -> t when every event is published
  if [[ $1 == poll ]]; then
    q "SELECT NOT EXISTS (SELECT 1 FROM outbox WHERE published_at IS NULL)"
  else
    q "SELECT coalesce((SELECT confirmed_flush_lsn >= '$2'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'walrelay'), false)"
  fi
}

declare -A OUT
RESULT_LINES=()

# burst: mode label rows_per_tx transactions
burst() {
  local mode=$1 label=$2 per_tx=$3 txs=$4 topic_type="${1}_${2}"
  fresh_outbox "$mode"
  log "$mode $label: loading $txs transactions of $per_tx rows"
  psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" <<SQL
DO \$\$
BEGIN
  FOR b IN 0..$((txs - 1)) LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT '$topic_type', 'acct-' || ((b * $per_tx + g) % 10000), 'PaymentCaptured',
           jsonb_build_object('payment_id', b * $per_tx + g, 'amount_cents', g * 7,
                              'currency', 'EUR', 'note', repeat('x', 200))
    FROM generate_series(1, $per_tx) g;
    COMMIT;
  END LOOP;
END
\$\$;
SQL
  local end events=$((per_tx * txs)) t0 t1 pg0 pg1 wal0 wal1 relay_cpu dead
  end=$(wal_lsn)
  q "CHECKPOINT" >/dev/null
  pg0=$(pg_cpu); wal0=$(wal_lsn)
  t0=$(date +%s.%N)
  start_relay "$mode"
  until [[ $(drained "$mode" "$end") == t ]]; do
    kill -0 "$RELAY_PID" 2>/dev/null || { tail -20 "$WORK/relay.$mode.log" >&2; exit 1; }
    sleep 0.05
  done
  t1=$(date +%s.%N)
  relay_cpu=$(cpu_of "$RELAY_PID")
  pg1=$(pg_cpu); wal1=$(wal_lsn)
  stop_relay
  sleep 1.5  # table statistics reach pg_stat_user_tables
  dead=$(q "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox'")
  local walbytes
  walbytes=$(q "SELECT pg_wal_lsn_diff('$wal1', '$wal0')")
  RESULT_LINES+=("$(awk -v m="$mode" -v l="$label" -v n="$events" -v s="$(awk "BEGIN{print $t1-$t0}")" \
    -v pg="$((pg1 - pg0))" -v r="$relay_cpu" -v w="$walbytes" -v d="$dead" -v tck="$CLK_TCK" \
    'BEGIN{printf "%-5s %-10s %9d %10.0f %12.1f %13.1f %14.1f %10d", m, l, n, n/s, pg*1e6/tck/n, w/n, r*1e6/tck/n, d}')")
}

steady() {  # mode
  local mode=$1 topic="outbox.${1}_steady"
  fresh_outbox "$mode"
  start_relay "$mode"
  sleep 2
  cat >"$WORK/insert.sql" <<SQL
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('${mode}_steady', 'acct-' || (random() * 10000)::int, 'PaymentCaptured',
        jsonb_build_object('ms', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'note', repeat('x', 200)));
SQL
  log "$mode steady: $RATE transactions/s for $SECONDS_STEADY s"
  # synchronous_commit on for the writers: the walsender sends only flushed WAL, so with
  # pgtmp's synchronous_commit=off WAL mode would wait for the WAL writer (200 ms).
  PGOPTIONS="-c synchronous_commit=on" pgbench -n -d "$DSN" -f "$WORK/insert.sql" -R "$RATE" -T "$SECONDS_STEADY" -c 4 -j 2 \
    >"$WORK/pgbench.$mode.log" 2>&1 || { cat "$WORK/pgbench.$mode.log" >&2; exit 1; }
  local end expected
  end=$(wal_lsn)
  expected=$(q "SELECT count(*) FROM outbox")
  until [[ $(drained "$mode" "$end") == t ]]; do sleep 0.05; done
  stop_relay
  kcat -C -b "$BOOT" -t "$topic" -o beginning -e -q -f '%T %s\n' 2>/dev/null |
    sed -n 's/^\([0-9]*\) .*"ms": \([0-9]*\).*/\1 \2/p' | awk '{print $1 - $2}' | sort -n >"$WORK/lat.$mode"
  local got
  got=$(wc -l <"$WORK/lat.$mode")
  OUT[$mode]=$(awk -v n="$got" -v e="$expected" -v m="$mode" -v rate="$RATE" \
    '{a[NR]=$1} END{printf "%-5s %8d/%-8d %8d %8d %8d %8d", m, n, e, rate, a[int(NR*0.5)+1], a[int(NR*0.99)+1], a[NR]}' "$WORK/lat.$mode")
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for mode in $MODES; do
  burst "$mode" burst_1 1 $((N / 10))
  burst "$mode" burst_100 100 $((N / 100))
  steady "$mode"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "poll mode vs WAL mode: PostgreSQL $PGVERSION, dev broker (3 brokers), poll interval ${POLL_INTERVAL_MS} ms, batch $POLL_BATCH"
echo "machine: $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), load average before $LOAD_BEFORE, after $LOAD_AFTER"
printf '%-5s %-10s %9s %10s %12s %13s %14s %10s\n' mode workload events events/s pg_cpu_us/ev wal_bytes/ev relay_cpu_us/ev dead_tuples
for l in "${RESULT_LINES[@]}"; do echo "$l"; done
echo
echo "steady single-row transactions: commit-to-produce latency in ms (record CreateTime - insert time)"
printf '%-5s %17s %8s %8s %8s %8s\n' mode records/expected tx/s p50 p99 max
for mode in $MODES; do echo "${OUT[$mode]}"; done
