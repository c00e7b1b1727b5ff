#!/usr/bin/env bash
# vs_debezium.sh: walrelay and Debezium (3.6.1.Final, Kafka Connect's standalone worker with
# the Outbox Event Router: bench/debezium/debezium.sh) side by side, in one run: the same
# PostgreSQL, the same three Apache Kafka brokers (scripts/kafka.sh), the same outbox rows,
# the two tools one after the other, alternating (walrelay first in odd rounds), ROUNDS
# rounds (issue 29, part 3).
#
#   bench/vs_debezium.sh            everything (about 17 minutes on 2 cores)
#   EVENTS=100000 ROUNDS=1 RATES=2000 LAT_SECONDS=5 bench/vs_debezium.sh     a smoke run
#
# Measures, each the same way for both tools, from the outside (bench/e2e/e2e_probe: a
# libpq writer and a librdkafka reader that share no code with walrelay):
#   drain    EVENTS outbox rows (Debezium's outbox DDL, ~300-byte jsonb payloads) in
#            1-row and in 100-row transactions, already in the WAL; one slot per run, all
#            created before the load, so every run reads the same backlog. events/s between
#            the first and the last record the reader saw; CPU seconds of the tool's process
#            (the JVM for Debezium; /proc/PID/stat, sampled every 100 ms) over that window
#            per event, and over its whole life; peak RSS (VmHWM); time from the tool's start
#            to the first record readable.
#   latency  steady single-row transactions at each of RATES (default 2000 5000) tx/s for
#            LAT_SECONDS (default 20) over 16 connections, synchronous_commit = on and fsync
#            on: from the writer's COMMIT returning to the reader reading the record
#            (p50/p99/p99.9), the tool caught up on a fresh slot before the writer starts;
#            the first LAT_WARMUP seconds (default 10) at the same rate are not counted (a
#            JVM just started compiles its hot code then). CPU per event over the window.
# Both tools publish with the formats of bench/debezium scenario b (StringConverter keys,
# schemaless JsonConverter values: Debezium's lighter configuration; walrelay
# --outbox-key-format=raw --outbox-value-format=json-string) and each producer's defaults
# (acks=all, idempotence) to topics of 12 partitions, replication factor 3.
# Prints the verdict lines (walrelay/debezium ...), medians over the rounds; every run's
# figures are in $WORK/results.tsv, the chart in $WORK/vs_debezium.svg
# (bench/vs_debezium_report.py makes both from the TSV).
#
# Env: EVENTS (1000000), ROUNDS (3), RATES ("2000 5000"), LAT_SECONDS (20), LAT_WARMUP (10),
#      SHAPES ("1 100"),
#      BUILD (build-bench, built when missing), WORK (/tmp/walrelay-vs-debezium), KEEP=1
#      keeps the cluster's files, TOOLS (two of walrelay, walrelay-eo, debezium; default
#      "walrelay debezium"): walrelay-eo is walrelay with --kafka-exactly-once true (the
#      reader reads read_committed, librdkafka's default), e.g.
#      TOOLS="walrelay walrelay-eo" compares the two modes; without debezium no verdict
#      lines, the TSV is printed. Needs Java 17, Maven (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
EVENTS=${EVENTS:-1000000}
ROUNDS=${ROUNDS:-3}
RATES=${RATES:-2000 5000}
LAT_SECONDS=${LAT_SECONDS:-20}
LAT_WARMUP=${LAT_WARMUP:-10}
SHAPES=${SHAPES:-1 100}
TOOLS=${TOOLS:-walrelay debezium}
read -r TOOL_A TOOL_B <<<"$TOOLS"
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-vs-debezium}
PARTITIONS=12
if [[ $BUILD == /* ]]; then BUILD_DIR=$BUILD; else BUILD_DIR=$ROOT/$BUILD; fi
WALRELAY=$BUILD_DIR/src/cli/walrelay
PROBE=$BUILD_DIR/bench/e2e/e2e_probe
DBZ="$ROOT/bench/debezium/debezium.sh"
RESULTS=$WORK/results.tsv

log() { printf '[vs_debezium %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ ! -x $WALRELAY || ! -x $PROBE ]]; then
  log "building walrelay and e2e_probe in $BUILD"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DWALRELAY_WERROR=ON >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target walrelay e2e_probe
fi
[[ " $TOOLS " == *" debezium "* ]] && bash "$DBZ" fetch

TOOL_PID=""
cleanup() {
  set +e
  [[ -n $TOOL_PID ]] && kill -9 "$TOOL_PID" 2>/dev/null
  for d in "$WORK"/dbz-*; do [[ -d $d ]] && bash "$DBZ" kill --dir "$d" >/dev/null 2>&1; done
  bash "$ROOT/scripts/kafka.sh" stop --dir "$WORK/kafka" >/dev/null 2>&1
  bash "$ROOT/scripts/pgtmp.sh" stop "$WORK/pg" >/dev/null 2>&1
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK/pg" "$WORK/kafka"
}
trap cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$WORK"
eval "$(bash "$ROOT/scripts/pgtmp.sh" start "$WORK/pg" fsync=on synchronous_commit=on \
  max_replication_slots=40 max_wal_senders=40 max_wal_size=8GB checkpoint_timeout=30min \
  shared_buffers=256MB autovacuum=off)"
DSN="host=127.0.0.1 port=$PGPORT user=walrelay dbname=postgres"
psql_() { psql -X -q -v ON_ERROR_STOP=1 "$DSN" "$@"; }
psql_ -c "
  CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb);
  CREATE PUBLICATION bench_pub FOR TABLE outbox;"
BOOTSTRAP=$(bash "$ROOT/scripts/kafka.sh" start --dir "$WORK/kafka" --brokers 3 --owner $$ |
  sed -n 's/^bootstrap=//p')
log "PostgreSQL $(psql_ -At -c 'SHOW server_version') on port $PGPORT, Kafka $BOOTSTRAP"
[[ " $TOOLS " == *" walrelay-eo "* ]] &&
  bash "$ROOT/scripts/kafka.sh" topic --dir "$WORK/kafka" walrelay.checkpoints 1 cleanup.policy=compact
printf 'measure\tshape\tround\ttool\tevents\tevents_per_s\tcpu_us_per_event\tcpu_s_total\tpeak_rss_mb\tfirst_record_s\tp50_ms\tp99_ms\tp999_ms\n' >"$RESULTS"

topic() { bash "$ROOT/scripts/kafka.sh" topic --dir "$WORK/kafka" "$1" "$PARTITIONS"; }

# Samples PID every 100 ms until it exits: "wall_us cpu_ticks" lines into FILE.
sample() {  # PID FILE
  python3 - "$1" "$2" <<'PY' &
import sys, time
pid, out = sys.argv[1], open(sys.argv[2], "w")
while True:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        break
    out.write(f"{int(time.time() * 1e6)} {int(fields[11]) + int(fields[12])}\n")
    out.flush()
    time.sleep(0.1)
PY
}

peak_rss_mb() { awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

# Starts TOOL on SLOT publishing to TOPIC; sets TOOL_PID (the walrelay process or the JVM).
start_tool() {  # TOOL SLOT TOPIC RUN_NAME
  local tool=$1 slot=$2 topic=$3 name=$4
  if [[ $tool == walrelay* ]]; then
    local eo=()
    [[ $tool == walrelay-eo ]] && eo=(--kafka-exactly-once true)
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    echo "$port" >"$WORK/$name.port"
    "$WALRELAY" run --source-dsn "$DSN" --outbox-profile debezium --source-slot "$slot" \
      --source-create-slot false --source-publication bench_pub \
      --kafka-bootstrap-servers "$BOOTSTRAP" --outbox-topic-template "$topic" \
      --outbox-key-format=raw --outbox-value-format=json-string "${eo[@]}" \
      --ops-metrics-address "127.0.0.1:$port" >"$WORK/$name.log" 2>&1 &
    TOOL_PID=$!
  else
    bash "$DBZ" start --dir "$WORK/dbz-$name" --bootstrap "$BOOTSTRAP" \
      --pg "127.0.0.1:$PGPORT:postgres:walrelay" --slot "$slot" --publication bench_pub \
      --scenario "$ROOT/bench/debezium/scenarios/b.properties" \
      --set publication.autocreate.mode=disabled \
      --set "transforms.outbox.route.topic.replacement=$topic" >"$WORK/$name.log" 2>&1 &
    for _ in $(seq 1 200); do [[ -s "$WORK/dbz-$name/connect.pid" ]] && break; sleep 0.05; done
    TOOL_PID=$(cat "$WORK/dbz-$name/connect.pid")
  fi
}

stop_tool() {  # TOOL RUN_NAME
  if [[ $1 == walrelay* ]]; then
    kill -TERM "$TOOL_PID"
    wait "$TOOL_PID" 2>/dev/null || true
  else
    bash "$DBZ" stop --dir "$WORK/dbz-$2" >/dev/null
  fi
  TOOL_PID=""
}

# Waits until TOOL's slot is read (and, for walrelay, /readyz answers).
wait_streaming() {  # TOOL SLOT RUN_NAME
  for _ in $(seq 1 1200); do
    if [[ "$(psql_ -At -c "SELECT active FROM pg_replication_slots WHERE slot_name = '$2'")" == t ]]; then
      [[ $1 != walrelay* ]] && return 0
      curl -fsS "http://127.0.0.1:$(cat "$WORK/$3.port")/readyz" >/dev/null 2>&1 && return 0
    fi
    kill -0 "$TOOL_PID" 2>/dev/null || { log "$1 exited: $(tail -5 "$WORK/$3.log")"; return 1; }
    sleep 0.1
  done
  log "$1 is not streaming after 120 s"
  return 1
}

# CPU ticks between two wall times, from a sample file (nearest samples).
window_cpu_s() {  # FILE FROM_US TO_US
  awk -v a="$2" -v b="$3" -v tck="$(getconf CLK_TCK)" '
    $1 <= a { ca = $2 } $1 <= b { cb = $2 } END { printf "%.2f", (cb - ca) / tck }' "$1"
}

order() {  # ROUND -> the two tools in this round's order
  if (($1 % 2 == 1)); then echo "$TOOL_A $TOOL_B"; else echo "$TOOL_B $TOOL_A"; fi
}

# ------------------------------------------------------------------------- drain
for shape in $SHAPES; do
  log "drain, $shape-row transactions: one slot per run, then $EVENTS rows"
  for r in $(seq 1 "$ROUNDS"); do
    for tool in $TOOLS; do
      psql_ -At -c "SELECT pg_create_logical_replication_slot('d${shape}_${tool//-/_}_$r', 'pgoutput')" >/dev/null
      topic "drain.$shape.$tool.$r"
    done
  done
  psql_ -c "SET synchronous_commit = off" -c "
    DO \$\$ BEGIN
      FOR t IN 0..$((EVENTS / shape - 1)) LOOP
        INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
        SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'payment',
               'agg-' || (g % 1000), 'PaymentCaptured',
               jsonb_build_object('seq', g, 'amount', 12550, 'currency', 'EUR',
                                  'pad', repeat('x', 200))
        FROM generate_series(t * $shape + 1, t * $shape + $shape) g;
        COMMIT;
      END LOOP;
    END \$\$"
  log "loaded; $(psql_ -At -c "SELECT pg_size_pretty(pg_current_wal_lsn() - '0/0'::pg_lsn)") of WAL so far"
  for r in $(seq 1 "$ROUNDS"); do
    for tool in $(order "$r"); do
      name="drain-$shape-$tool-$r"
      "$PROBE" read --bootstrap "$BOOTSTRAP" --topic "drain.$shape.$tool.$r" --count "$EVENTS" \
        --timeout 120 >"$WORK/$name.read" 2>"$WORK/$name.read.err" &
      reader=$!
      for _ in $(seq 1 200); do grep -q ready "$WORK/$name.read" 2>/dev/null && break; sleep 0.05; done
      t0=$(date +%s%6N)
      start_tool "$tool" "d${shape}_${tool//-/_}_$r" "drain.$shape.$tool.$r" "$name"
      sample "$TOOL_PID" "$WORK/$name.cpu"
      sampler=$!
      if ! wait "$reader"; then log "$name: the reader timed out: $(cat "$WORK/$name.read")"; fi
      rss=$(peak_rss_mb "$TOOL_PID")
      stop_tool "$tool" "$name"
      wait "$sampler" 2>/dev/null || true
      read -r first last got < <(sed -n 's/.*distinct=\([0-9]*\) first_us=\([0-9]*\) last_us=\([0-9]*\).*/\2 \3 \1/p' "$WORK/$name.read")
      cpu_window=$(window_cpu_s "$WORK/$name.cpu" "$first" "$last")
      cpu_total=$(awk -v tck="$(getconf CLK_TCK)" 'NR == 1 { a = $2 } { b = $2 } END { printf "%.2f", b / tck }' "$WORK/$name.cpu")
      awk -v s="drain" -v sh="$shape" -v r="$r" -v t="$tool" -v n="$got" -v f="$first" -v l="$last" \
        -v t0="$t0" -v cw="$cpu_window" -v ct="$cpu_total" -v rss="$rss" 'BEGIN {
          rate = (l > f) ? n / ((l - f) / 1e6) : 0
          printf "%s\t%s\t%s\t%s\t%d\t%.0f\t%.2f\t%s\t%s\t%.2f\t\t\t\n", s, sh, r, t, n, rate,
                 cw * 1e6 / n, ct, rss, (f - t0) / 1e6 }' >>"$RESULTS"
      log "$name: $(tail -1 "$RESULTS" | cut -f5-10 | tr '\t' ' ')"
      psql_ -At -c "SELECT pg_drop_replication_slot('d${shape}_${tool//-/_}_$r')" >/dev/null
    done
  done
  psql_ -c "TRUNCATE outbox" -c "CHECKPOINT"
done

# ------------------------------------------------------------------------- latency
seq_base=100000000
for rate in $RATES; do
  for r in $(seq 1 "$ROUNDS"); do
    for tool in $(order "$r"); do
      name="latency-$rate-$tool-$r"
      slot="l${rate}_${tool//-/_}_$r"
      psql_ -At -c "SELECT pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null
      topic "latency.$rate.$tool.$r"
      start_tool "$tool" "$slot" "latency.$rate.$tool.$r" "$name"
      wait_streaming "$tool" "$slot" "$name"
      sample "$TOOL_PID" "$WORK/$name.cpu"
      sampler=$!
      n=$((rate * (LAT_WARMUP + LAT_SECONDS)))
      "$PROBE" read --bootstrap "$BOOTSTRAP" --topic "latency.$rate.$tool.$r" --count "$n" \
        --from end --timeout 60 --out "$WORK/$name.recv" >"$WORK/$name.read" 2>"$WORK/$name.read.err" &
      reader=$!
      for _ in $(seq 1 200); do grep -q ready "$WORK/$name.read" 2>/dev/null && break; sleep 0.05; done
      "$PROBE" write --dsn "$DSN" --connections 16 --rate "$rate" --seconds "$((LAT_WARMUP + LAT_SECONDS))" --first-seq "$seq_base" \
        --out "$WORK/$name.sent" >"$WORK/$name.write"
      wait "$reader" || log "$name: the reader timed out: $(cat "$WORK/$name.read")"
      # walrelay's own view (commit-to-ack histogram), to hold against the outside one.
      [[ $tool == walrelay* ]] && curl -fsS "http://127.0.0.1:$(cat "$WORK/$name.port")/metrics" \
        >"$WORK/$name.metrics" 2>/dev/null
      rss=$(peak_rss_mb "$TOOL_PID")
      stop_tool "$tool" "$name"
      wait "$sampler" 2>/dev/null || true
      psql_ -At -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null
      # Latency per event; the tool's CPU from the first COMMIT to the last record read.
      python3 - "$WORK/$name.sent" "$WORK/$name.recv" "$WORK/$name.cpu" "$(getconf CLK_TCK)" \
        "$((seq_base + rate * LAT_WARMUP))" "$rate" "$r" "$tool" "$rss" \
        "$(sed -n 's/.*rate=\([0-9.]*\).*/\1/p' "$WORK/$name.write")" >>"$RESULTS" <<'PY'
import sys
# The warm-up's events (seq below the first measured one) are not counted.
sent = {s: c for s, c in (map(int, l.split()) for l in open(sys.argv[1])) if s >= int(sys.argv[5])}
recv = dict(map(int, l.split()) for l in open(sys.argv[2]))
cpu = [tuple(map(int, l.split())) for l in open(sys.argv[3])]
tck = int(sys.argv[4])
lat = sorted((recv[s] - c) / 1000.0 for s, c in sent.items() if s in recv)
def pct(p):
    return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
def ticks_at(us):
    before = [t for w, t in cpu if w <= us]
    return before[-1] if before else cpu[0][1]
a, b = min(sent.values()), max(recv.values()) if recv else 0
cpu_us = (ticks_at(b) - ticks_at(a)) / tck * 1e6 / max(1, len(lat))
rate, rnd, tool, rss, achieved = sys.argv[6:11]
missing = len(sent) - len(lat)
print(f"latency\t{rate}\t{rnd}\t{tool}\t{len(lat)}\t{float(achieved):.0f}\t{cpu_us:.2f}\t\t{rss}\t\t"
      f"{pct(0.5):.2f}\t{pct(0.99):.2f}\t{pct(0.999):.2f}"
      + (f"\t# {missing} events never read" if missing else ""))
PY
      seq_base=$((seq_base + n + 1000))
      log "$name: $(tail -1 "$RESULTS" | cut -f5- | tr '\t' ' ')"
    done
  done
done

if [[ " $TOOLS " == *" debezium "* ]]; then
  python3 "$ROOT/bench/vs_debezium_report.py" "$RESULTS" "$WORK/vs_debezium.svg"
else
  column -t -s $'\t' "$RESULTS"
fi
