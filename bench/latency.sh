#!/usr/bin/env bash
# latency.sh: commit-to-ack latency of the live relay at a steady rate of single-row
# transactions with synchronous_commit = on (issue 17), for each linger.ms profile.
#
#   bench/latency.sh [RATE]     transactions/s (default 5000; env RATE works too)
#
# For each linger.ms in LINGERS (default "0 5"): a fresh slot, `walrelay run` into the dev
# broker (3 brokers, topic outbox.payment with 16 partitions) with
# --kafka-property linger.ms=L, then `pgbench -R RATE -T SECONDS` single-row outbox
# INSERTs (CLIENTS clients, synchronous_commit = on), then a wait until the slot confirmed
# the end. Pinned (MODE=pinned, the default): the walsender and pgbench on CPU 0, the relay
# and the dev broker on CPU 1; MODE=unpinned leaves the scheduler alone. Prints, per
# profile: the rate pgbench reached, the commit-to-ack latency percentiles p50, p99 and
# p99.9 (the upper bound of the walrelay_commit_to_ack_latency_seconds bucket holding that
# rank: buckets are 1, 2, 4, 8, ... ms, so "<= 8 ms" means between 4 and 8; in brackets the
# linear interpolation inside the bucket, as Prometheus' histogram_quantile gives it), the
# relay's CPU per event and its peak RSS.
#
# Env: BUILD (default build-bench, built when missing), WORK (default /tmp/walrelay-latency),
# LINGERS, SECONDS_RUN (default 20), CLIENTS (default 4), MODE, METRICS_PORT (default
# 39411; the relay of linger.ms L listens on METRICS_PORT + L), PERF=1 records the relay
# under `perf record -g` while pgbench runs ($WORK/perf-L.data; with KEEP=1), KEEP=1 keeps
# the files.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

RATE=${1:-${RATE:-5000}}
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-latency}
LINGERS=${LINGERS:-0 5}
DURATION=${SECONDS_RUN:-20}
CLIENTS=${CLIENTS:-4}
MODE=${MODE:-pinned}
PGBENCH=${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin}/pgbench
BENCH_NAME=latency
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_build
[[ -x $PGBENCH ]] || PGBENCH=$(command -v pgbench) || { echo "pgbench is needed" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 2; }
bench_start synchronous_commit=on
[[ $MODE == pinned ]] && taskset -a -p -c 1 "$BROKER_PID" >/dev/null

"$WALRELAY" setup --create-tables --source-dsn "$DSN" --source-create-slot false >"$WORK/setup.log" 2>&1  # each profile makes its own slot
cat >"$WORK/ins.sql" <<'SQL'
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('payment', 'w' || (random() * 1000)::int, 'PaymentCaptured',
        '{"amount": 100, "currency": "EUR", "note": "latency benchmark"}');
SQL

percentile() {  # FILE RANK: "<= B (~E)": B the upper bound (ms) of the first bucket whose
  # count >= RANK, E the linear interpolation inside that bucket (what Prometheus'
  # histogram_quantile reports on a dashboard)
  awk -v rank="$2" '
    /^walrelay_commit_to_ack_latency_seconds_bucket/ {
      match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5)
      n = $NF + 0
      if (n >= rank) {
        if (le == "+Inf") { print "> " prev * 1000; exit }
        est = prev + (le - prev) * (n > prevn ? (rank - prevn) / (n - prevn) : 1)
        printf "<= %g (~%.1f)\n", le * 1000, est * 1000; exit
      }
      prev = le; prevn = n
    }' "$1"
}

declare -a RESULTS
for linger in $LINGERS; do
  slot=lat_$linger
  port=$(( ${METRICS_PORT:-39411} + linger ))
  q "SELECT pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null
  "$WALRELAY" run --source-dsn "$DSN" --source-slot "$slot" --source-create-slot false \
    --kafka-bootstrap-servers "$BOOT" --kafka-property "linger.ms=$linger" \
    --ops-metrics-address "127.0.0.1:$port" --ops-log-level warn >"$WORK/relay-$linger.log" 2>&1 &
  RELAY_PID=$!
  [[ $MODE == pinned ]] && taskset -a -p -c 1 "$RELAY_PID" >/dev/null
  walsender=""
  for _ in $(seq 1 200); do
    walsender=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot' AND active")
    [[ -n $walsender ]] && break
    sleep 0.05
  done
  [[ -n $walsender ]] || { cat "$WORK/relay-$linger.log" >&2; exit 1; }
  [[ $MODE == pinned ]] && taskset -p -c 0 "$walsender" >/dev/null
  log "linger.ms=$linger: $RATE tx/s for ${DURATION}s ($MODE)"
  cpu0=$(cpu_of "$RELAY_PID")
  PERF_PID=""
  if [[ ${PERF:-0} == 1 ]]; then
    perf record -g -o "$WORK/perf-$linger.data" -p "$RELAY_PID" 2>"$WORK/perf-$linger.log" &
    PERF_PID=$!
  fi
  pin=()
  [[ $MODE == pinned ]] && pin=(taskset -c 0)
  PGOPTIONS="-c synchronous_commit=on" "${pin[@]}" "$PGBENCH" -n -f "$WORK/ins.sql" \
    -R "$RATE" -T "$DURATION" -c "$CLIENTS" -j 2 -h "$PGHOST" -p "$PGPORT" -U walrelay postgres \
    >"$WORK/pgbench-$linger.out" 2>&1
  if [[ -n $PERF_PID ]]; then kill -INT "$PERF_PID"; wait "$PERF_PID" 2>/dev/null || true; fi
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench-$linger.out" | tail -1)
  end=$(q "SELECT pg_current_wal_insert_lsn()")
  for _ in $(seq 1 600); do
    [[ $(q "SELECT confirmed_flush_lsn >= '$end' FROM pg_replication_slots WHERE slot_name = '$slot'") == t ]] && break
    sleep 0.1
  done
  curl -s "127.0.0.1:$port/metrics" >"$WORK/metrics-$linger.txt"
  cpu1=$(cpu_of "$RELAY_PID")
  rss=$(awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$RELAY_PID/status")
  kill "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true
  RELAY_PID=""
  count=$(awk '/^walrelay_commit_to_ack_latency_seconds_count/ { print $NF + 0 }' "$WORK/metrics-$linger.txt")
  [[ ${count:-0} -gt 0 ]] || { log "no latency samples"; cat "$WORK/relay-$linger.log" >&2; exit 1; }
  p50=$(percentile "$WORK/metrics-$linger.txt" "$(( (count * 50 + 99) / 100 ))")
  p99=$(percentile "$WORK/metrics-$linger.txt" "$(( (count * 99 + 99) / 100 ))")
  p999=$(percentile "$WORK/metrics-$linger.txt" "$(( (count * 999 + 999) / 1000 ))")
  us=$(awk -v c="$((cpu1 - cpu0))" -v n="$count" -v t="$CLK_TCK" 'BEGIN { printf "%.1f", c / t * 1e6 / n }')
  RESULTS+=("| $linger | $MODE | ${tps%.*} | $count | $p50 | $p99 | $p999 | $us | $rss |")
  q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
done

echo
echo "commit-to-ack latency, $RATE tx/s requested, synchronous_commit=on, $CLIENTS pgbench clients, ${DURATION}s"
echo
echo "| linger.ms | mode | tx/s reached | transactions | p50 ms | p99 ms | p99.9 ms | relay CPU µs/event | peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${RESULTS[@]}"
