#!/usr/bin/env bash
# instructions.sh: instructions per event of the relay, a measure that does not swing with
# what else the machine does (issue 31). callgrind counts every instruction executed in
# user space, exactly, for the same binary and input; `perf stat -e instructions` is used
# instead where the machine exposes the counter (it does not on the project's VMs; the
# script says which one it used).
#
#   bench/instructions.sh            N=100000 events (1,000-row transactions) per recording
#   N=5000 bench/instructions.sh     the CI smoke run (about a minute)
#
# Cases, one line each: Ir per event in total and split by object (walrelay's own code,
# librdkafka, libpq, libc with the allocator, libstdc++, other; bench/callgrind_split.py):
#   null     `walrelay replay REC --sink null`: read + decode + assemble + map + null sink
#   kafka    `walrelay replay REC --sink kafka` into the dev broker (a separate process,
#            not counted): the same plus librdkafka's producer and its delivery reports
#   live     `walrelay run` draining a backlog of N events from a slot into the dev broker
#            until the slot confirms its end: the same plus libpq and the replication
#            protocol (and the waits between messages: polls are counted, sleeps are not)
#   cpu      (not in the default CASES) the live drain again without valgrind: CPU seconds
#            of the relay process (user + system, start-up included) per event, peak RSS
# With BENCH_KAFKA=apache, kafka, live and cpu publish to three Apache Kafka brokers
# (scripts/kafka.sh) instead of the dev broker: the librdkafka share against a real cluster.
# null and kafka are differential: (Ir(N events) - Ir(N/5 events)) / (N - N/5), so start-up
# and shutdown cancel out. live is Ir / N (start-up included; small at N=100,000).
# The recordings are made once per N and kept in $CACHE (same input, same counts): delete
# them after a change to the recording format. Every line names the commit it measured.
#
# Env: N (100000), BUILD (build-bench; built when missing, Release), WORK
#      (/tmp/walrelay-instructions), CACHE (${XDG_CACHE_HOME:-~/.cache}/walrelay/instructions),
#      CASES ("null kafka live"; "cpu" too on demand), BENCH_KAFKA (dev or apache),
#      WALRELAY_PRELOAD (another malloc for the relay of live and cpu, e.g.
#      /usr/lib/x86_64-linux-gnu/libjemalloc.so.2), EXACTLY_ONCE=1 (live and cpu with
#      --kafka-exactly-once true, BENCH_KAFKA=apache only: Kafka transactions, a compacted
#      checkpoint topic made first).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
N=${N:-100000}
SMALL=$((N / 5))
TX=1000
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-instructions}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/walrelay/instructions}
CASES=${CASES:-null kafka live}
BENCH_NAME=instructions
DEVBROKER_TOPIC=outbox.payment:16
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is needed (scripts/install-deps.sh)" >&2; exit 2; }
bench_build
COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
COUNTER=callgrind
perf stat -x, -e instructions:u true 2>&1 | grep -q '^[0-9]' && COUNTER="callgrind (perf's instructions counter is available too)"
bench_start
mkdir -p "$CACHE"

bench_create_outbox

# load ROWS: ROWS outbox rows in transactions of $TX, ~300-byte payloads, fixed content.
load() {
  psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" -c "SET synchronous_commit = off" -c "
    DO \$\$ BEGIN
      FOR t IN 0..$(($1 / TX - 1)) LOOP
        INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
        SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'payment',
               'agg-' || (g % 1000), 'PaymentCaptured',
               jsonb_build_object('seq', g, 'amount', 12550, 'currency', 'EUR',
                                  'pad', repeat('x', 200))
        FROM generate_series(t * $TX + 1, t * $TX + $TX) g;
        COMMIT;
      END LOOP;
    END \$\$"
}

# recording ROWS -> its path (made once, then kept in $CACHE).
recording() {
  local rec="$CACHE/outbox-$1.wrr"
  if [[ ! -s $rec ]]; then
    log "recording $1 events into $rec (once)"
    q "SELECT pg_create_logical_replication_slot('rec_$1', 'pgoutput')" >/dev/null
    load "$1"
    local end
    end=$(q "SELECT pg_current_wal_lsn()")
    "$WALRELAY" record --dsn "$DSN" --slot "rec_$1" --until-lsn "$end" -o "$rec.tmp" -q
    mv "$rec.tmp" "$rec"
    q "SELECT pg_drop_replication_slot('rec_$1')" >/dev/null
  fi
  echo "$rec"
}

# callgrind CMD... -> the split line of the run (every thread of the process).
count() {
  local out="$WORK/cg.$RANDOM"
  valgrind --tool=callgrind --callgrind-out-file="$out.%p" --separate-threads=no \
    --dump-instr=no --collect-jumps=no -q "$@" >"$out.log" 2>&1 ||
    { log "failed under callgrind: $*"; tail -5 "$out.log" >&2; return 1; }
  python3 "$ROOT/bench/callgrind_split.py" "$out".[0-9]*
}

# per_event BIG_LINE SMALL_LINE EVENTS -> "total=X walrelay=Y ..." per event
per_event() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
big = dict(kv.split("=") for kv in sys.argv[1].split())
small = dict(kv.split("=") for kv in sys.argv[2].split()) if sys.argv[2] else {}
n = int(sys.argv[3])
print(" ".join(f"{k}={(int(v) - int(small.get(k, 0))) / n:.0f}" for k, v in big.items()))
PY
}

report() {  # CASE LINE
  printf 'instructions per event, %-5s %s (N=%d, %s, %s broker, commit %s)\n' "$1" "$2" "$N" \
    "$COUNTER" "${BENCH_KAFKA:-dev}" "$COMMIT"
}

rec_big=$(recording "$N")
rec_small=$(recording "$SMALL")
for c in $CASES; do
  case "$c" in
    null)
      big=$(count "$WALRELAY" replay "$rec_big" --sink null)
      small=$(count "$WALRELAY" replay "$rec_small" --sink null)
      report null "$(per_event "$big" "$small" $((N - SMALL)))" ;;
    kafka)
      big=$(count "$WALRELAY" replay "$rec_big" --sink kafka --kafka-bootstrap-servers "$BOOT")
      small=$(count "$WALRELAY" replay "$rec_small" --sink kafka --kafka-bootstrap-servers "$BOOT")
      report kafka "$(per_event "$big" "$small" $((N - SMALL)))" ;;
    live | cpu)
      slot=$c
      q "SELECT pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null
      load "$N"
      end=$(q "SELECT pg_current_wal_lsn()")
      out="$WORK/cg.$slot"
      under=(valgrind --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no -q)
      [[ $c == cpu ]] && under=()
      eo=()
      if [[ ${EXACTLY_ONCE:-0} == 1 ]]; then
        [[ ${BENCH_KAFKA:-dev} == apache ]] || { echo "instructions.sh: EXACTLY_ONCE=1 needs BENCH_KAFKA=apache" >&2; exit 2; }
        "$ROOT/scripts/kafka.sh" topic --dir "$WORK/kafka" walrelay.checkpoints 1 cleanup.policy=compact
        eo=(--kafka-exactly-once true)
      fi
      LD_PRELOAD=${WALRELAY_PRELOAD:-} "${under[@]}" "$WALRELAY" run --source-dsn "$DSN" --source-slot "$slot" --source-create-slot false \
        --kafka-bootstrap-servers "$BOOT" --flow-status-interval-ms 100 --ops-log-level warn "${eo[@]}" \
        >"$out.log" 2>&1 &
      RELAY_PID=$!
      started=$(date +%s.%N)
      until [[ "$(q "SELECT confirmed_flush_lsn >= '$end' FROM pg_replication_slots WHERE slot_name = '$slot'")" == t ]]; do
        kill -0 "$RELAY_PID" 2>/dev/null || { tail -5 "$out.log" >&2; exit 1; }
        sleep 0.1
      done
      drained=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      ticks=$(cpu_of "$RELAY_PID")
      # user and system ticks apart (fields 14 and 15 of /proc/PID/stat)
      read -r utime stime < <(sed 's/^.*) //' "/proc/$RELAY_PID/stat" | awk '{ print $12, $13 }')
      hwm_kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$RELAY_PID/status")
      kill -TERM "$RELAY_PID"
      wait "$RELAY_PID" || true
      RELAY_PID=""
      if [[ $c == cpu ]]; then
        us() { awk -v t="$1" -v hz="$CLK_TCK" -v n="$N" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }'; }
        printf 'CPU per event, live  %s us = user %s + system %s (%d events in %s s, start-up included, whole process, %s broker%s), peak RSS %d MB (commit %s)\n' \
          "$(us "$ticks")" "$(us "$utime")" "$(us "$stime")" "$N" "$drained" "${BENCH_KAFKA:-dev}" \
          "$([[ ${EXACTLY_ONCE:-0} == 1 ]] && echo ", exactly once")" \
          $((hwm_kb / 1024)) "$COMMIT"
      else
        report live "$(per_event "$(python3 "$ROOT/bench/callgrind_split.py" "$out".[0-9]*)" "" "$N")"
      fi ;;
    *) echo "instructions.sh: unknown case $c (null, kafka, live, cpu)" >&2; exit 2 ;;
  esac
done
