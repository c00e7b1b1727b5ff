#!/usr/bin/env bash
# bench/audit_window.sh: what one `walrelay audit` of a large window costs (issue 44): wall
# time, the audit's peak RSS and CPU, and the load on the database (the CPU of the audit's
# backend, temporary files, blocks read), on a window of EVENTS outbox rows all published
# to Apache Kafka (scripts/kafka.sh, three brokers, replication factor 3).
#
#   EVENTS=10000000 bash bench/audit_window.sh      (the issue's figure; about 25 min here)
#   EVENTS=1000000 bash bench/audit_window.sh       (a smoke run)
#
# Env: EVENTS (rows, default 10,000,000), OLD_EVENTS (rows created two days ago, before the
# slot existed: in the table, outside the window and never published, as a table the
# janitor keeps a week of holds; default 0), PARTITIONS (of the topic, 6), BUILD (build
# directory, default build/main), WORK (scratch, default /tmp/walrelay-bench-audit),
# BENCH_KAFKA (apache, or dev for the dev broker), KEEP=1 keeps the cluster's files,
# EXPLAIN=1 logs the plan of every audit statement over 500 ms to the server's log.
# The rows go in 10,000-row transactions (aggregates o0..o99999) while a relay publishes
# them; once the slot is confirmed past the last one the relay stops, the table is vacuumed
# (so that autovacuum does not run during the audit) and the audit runs alone, twice:
# through the created_at index `walrelay setup` makes, then with the index dropped. Prints
# one line per run and writes them to $WORK/../audit_window.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build/main}
WORK=${WORK:-/tmp/walrelay-bench-audit}
BENCH_NAME=audit-window
BENCH_KAFKA=${BENCH_KAFKA:-apache}
EVENTS=${EVENTS:-10000000}
PARTITIONS=${PARTITIONS:-6}
DEVBROKER_TOPIC=outbox.order:$PARTITIONS
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
bench_build
[[ $BENCH_KAFKA == apache ]] && bash "$ROOT/scripts/kafka.sh" fetch >/dev/null
bench_start

log "walrelay setup --create-tables (the outbox, its created_at index, publication, slot)"
"$WALRELAY" setup --create-tables --source-dsn "$DSN" 2>&1 | sed 's/^/  /' >&2
OLD_EVENTS=${OLD_EVENTS:-0}
if (( OLD_EVENTS > 0 )); then
  log "inserting $OLD_EVENTS rows created two days ago, with no slot (never published)"
  q "SELECT pg_drop_replication_slot('walrelay')" >/dev/null
  q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) SELECT 'order', 'old' || (g % 100000), 'created', jsonb_build_object('seq', g), now() - interval '2 days' FROM generate_series(1, $OLD_EVENTS) g" >/dev/null
  "$WALRELAY" setup --source-dsn "$DSN" 2>&1 | sed 's/^/  /' >&2  # the slot again, from now
fi
"$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOT" \
  >"$WORK/relay.log" 2>&1 &
RELAY_PID=$!

log "inserting $EVENTS rows in 10,000-row transactions while the relay publishes them"
started=$(date +%s)
batches=$(( (EVENTS + 9999) / 10000 ))
for ((b = 0; b < batches; b++)); do
  lo=$(( b * 10000 + 1 )); hi=$(( lo + 9999 < EVENTS ? lo + 9999 : EVENTS ))
  echo "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) SELECT 'order', 'o' || (g % 100000), 'created', jsonb_build_object('seq', g) FROM generate_series($lo, $hi) g;"
  if (( b % 100 == 99 )); then echo "\\echo $hi"; fi
done | psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" | while read -r n; do log "  $n rows committed"; done
end_lsn=$(q "SELECT pg_current_wal_lsn()")
log "inserted in $(( $(date +%s) - started )) s; waiting until the slot is confirmed past $end_lsn"
while :; do
  kill -0 "$RELAY_PID" 2>/dev/null || { cat "$WORK/relay.log" >&2; echo "the relay stopped" >&2; exit 1; }
  [[ $(q "SELECT confirmed_flush_lsn >= '$end_lsn' FROM pg_replication_slots WHERE slot_name = 'walrelay'") == t ]] && break
  sleep 5
  log "  slot at $(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walrelay'")"
done
log "published in $(( $(date +%s) - started )) s since the first insert; stopping the relay"
kill -TERM "$RELAY_PID"; wait "$RELAY_PID" || true; RELAY_PID=""
q "VACUUM ANALYZE outbox" >/dev/null
table_mb=$(q "SELECT pg_total_relation_size('outbox') / 1048576")

REPORT=$(dirname "$WORK")/audit_window.txt
: >"$REPORT"
audit_once() {  # LABEL: one audit alone, measured
  local label=$1 stats0 stats1 out
  local log_from
  log_from=$(wc -l <"$PGDIR/server.log")
  stats0=$(q "SELECT temp_bytes, blks_read, blks_hit FROM pg_stat_database WHERE datname = current_database()")
  # The audit's peak RSS and CPU from its own rusage (python3: no /usr/bin/time needed).
  out=$(PGOPTIONS="-c log_statement_stats=on ${EXPLAIN:+-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=${EXPLAIN_MS:-500ms} -c auto_explain.log_analyze=on -c auto_explain.log_buffers=on}" python3 - "$WALRELAY" "$DSN" "$BOOT" "$WORK/audit-$label.json" <<'PY'
import resource, subprocess, sys, time
walrelay, dsn, boot, path = sys.argv[1:5]
t0 = time.monotonic()
with open(path, "w") as f:
    rc = subprocess.run([walrelay, "audit", "--source-dsn", dsn, "--kafka-bootstrap-servers", boot,
                         "--topic", "outbox.order", "--since", "1d", "--grace", "0s", "--json"],
                        stdout=f).returncode
wall = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, f"{wall:.1f}", f"{ru.ru_utime + ru.ru_stime:.1f}", ru.ru_maxrss // 1024)
PY
)
  # The audit's backend CPU and peak RSS: log_statement_stats' running totals, the last per pid.
  local backend
  backend=$(tail -n +"$((log_from + 1))" "$PGDIR/server.log" | python3 -c '
import re, sys
cpu, rss, pid = {}, {}, None
for line in sys.stdin:
    m = re.match(r"\S+ \S+ \S+ \[(\d+)\]", line)
    if m: pid = m.group(1)
    m = re.search(r"\[([0-9.]+) s user, ([0-9.]+) s system total\]", line)
    if m: cpu[pid] = float(m.group(1)) + float(m.group(2))
    m = re.search(r"(\d+) kB max resident size", line)
    if m: rss[pid] = int(m.group(1))
print(f"{sum(cpu.values()):.1f} {max(rss.values(), default=0) // 1024}")')
  stats1=$(q "SELECT temp_bytes, blks_read, blks_hit FROM pg_stat_database WHERE datname = current_database()")
  read -r rc wall cpu rss <<<"$out"
  local rows records missing
  rows=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reference_rows"])' "$WORK/audit-$label.json")
  records=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["records_read"])' "$WORK/audit-$label.json")
  missing=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["missing"]["count"])' "$WORK/audit-$label.json")
  IFS='|' read -r t0 r0 h0 <<<"$stats0"
  IFS='|' read -r t1 r1 h1 <<<"$stats1"
  local line
  read -r backend_cpu backend_rss <<<"$backend"
  line=$(printf '%-14s exit %s, %s rows, %s records, %s missing: %s s wall, audit CPU %s s, peak RSS %s MB; database: backend CPU %s s, RSS %s MB, temp files %d MB, blocks read %d MB, hit %d MB (outbox table + indexes %s MB)' \
    "$label" "$rc" "$rows" "$records" "$missing" "$wall" "$cpu" "$rss" \
    "$backend_cpu" "$backend_rss" $(( (t1 - t0) / 1048576 )) \
    $(( (r1 - r0) * 8 / 1024 )) $(( (h1 - h0) * 8 / 1024 )) "$table_mb")
  echo "$line" | tee -a "$REPORT"
  [[ $rc == 0 && $rows == "$EVENTS" && $missing == 0 ]] ||
    { echo "the audit did not see the $EVENTS rows clean: $WORK/audit-$label.json" >&2; exit 1; }
}
log "audit through the created_at index"
audit_once with-index
q "DROP INDEX outbox_created_at" >/dev/null
log "audit with the index dropped (a sequential scan of the table)"
audit_once without-index
log "report: $REPORT"
