#!/usr/bin/env bash
# compare.sh: walrelay against PostgreSQL's own ceiling, in one run on one machine.
#
#   bench/compare.sh [N]     N outbox rows (default 1000000; env N works too)
#
# 1. starts a throwaway PostgreSQL 15 (scripts/pgtmp.sh) and the development Kafka
#    (walrelay-devbroker, 3 brokers, topic outbox.payment with $PARTITIONS partitions);
# 2. creates the outbox table, the publication and one pgoutput slot per run (all before
#    loading, so every slot holds the same backlog), then loads N rows in 1,000-row
#    transactions with ~300-byte jsonb payloads;
# 3. drains the backlog, over the unix socket and over TCP, with
#      pg_recvlogical --start --no-loop -E END -o proto_version=1
#                     -o publication_names=walrelay_outbox -P pgoutput -f /dev/null
#    with `walrelay record` into a file (walrelay's read path alone: libpq, the replication
#    protocol and a buffered file write, no decoding and no Kafka: the row to hold against
#    pg_recvlogical's), and with `walrelay run` into the dev broker (every event acked by
#    Kafka, the LSN confirmed; the end is when the slot's confirmed_flush_lsn reaches END);
# 4. records the backlog once (`walrelay record`) and replays it into the null sink and
#    into the dev broker (`walrelay replay --json`).
# Each drain runs twice: unpinned, and pinned (MODES="unpinned pinned"): the walsender on
# CPU 0 (taskset once it shows up), the client under test and the dev broker on CPU 1, so
# that on 2 cores neither client competes with the walsender for a core.
# RUNS=3 repeats every drain three times (one slot per run, all holding the same backlog)
# and reports the run with the median rate; every run's rate is printed too.
# Prints rows/s, CPU seconds of each client and of its walsender (/proc/<pid>/stat of
# pg_stat_replication.pid, sampled every 20 ms while it lives), the client's peak RSS,
# and the walrelay / pg_recvlogical ratios.
#
# Env: BUILD (build dir with walrelay and walrelay-devbroker; default build-bench, built
# when missing), WORK (default /tmp/walrelay-compare), PARTITIONS (default 16),
# REPLAY (default 1), RUNS (default 1), KEEP=1 keeps the cluster and files, PERF=1 runs
# walrelay under `perf record --call-graph $PERF_CALLGRAPH` (default dwarf,8192; every
# thread; $WORK/perf-<transport>-<mode>-<run>.data; `bench/profile_breakdown.py FILE
# US_PER_EVENT` splits it by thread and owner): for profiles only, walrelay's CPU column
# is then perf's process, not walrelay's (take US_PER_EVENT from a run without perf).
# SYSCALLS=1 counts every client's system calls (all threads) with `perf stat` and prints
# them per event under the tables; walrelay run's CPU and RSS columns are then perf's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

N=${1:-${N:-1000000}}
TX=1000
BUILD=${BUILD:-build-bench}
WORK=${WORK:-/tmp/walrelay-compare}
PARTITIONS=${PARTITIONS:-16}
REPLAY=${REPLAY:-1}
MODES=${MODES:-unpinned pinned}
RUNS=${RUNS:-1}
PERF_CALLGRAPH=${PERF_CALLGRAPH:-dwarf,8192}
SYSCALL_EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_poll,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_write
CLIENTS="pg_recvlogical walrelay-read walrelay"
BENCH_NAME=compare
DEVBROKER_TOPIC=outbox.payment:$PARTITIONS
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_build
bench_start autovacuum=off max_replication_slots=100
DSN_unix=$DSN
# shellcheck disable=SC2034  # read as ${!dsn_var}
DSN_tcp=$DSN_TCP

# One long-lived psql for every poll (no fork per query while measuring); replaces lib's q.
coproc PSQL { psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DSN_unix" 2>&1; }
EXTRA_PIDS=$PSQL_PID
q() {  # q SQL -> its one-row, one-column answer (queries must return exactly one row)
  printf '%s\n' "$1" >&"${PSQL[1]}"
  local line
  IFS= read -r line <&"${PSQL[0]}"
  printf '%s' "$line"
}

PGVERSION=$(q "SHOW server_version;")
log "PostgreSQL $PGVERSION at $PGHOST:$PGPORT; $N rows in transactions of $TX"

bench_create_outbox
SLOTS=""
for m in $MODES; do
  for t in unix tcp; do
    for r in $(seq 1 "$RUNS"); do SLOTS="$SLOTS pgr_${t}_${m}_$r rd_${t}_${m}_$r wr_${t}_${m}_$r"; done
  done
done
[[ $REPLAY == 1 ]] && SLOTS="$SLOTS rec"
for s in $SLOTS; do
  psql -X -q -v ON_ERROR_STOP=1 -d "$DSN_unix" \
    -c "SELECT pg_create_logical_replication_slot('$s', 'pgoutput')" >/dev/null
done

BATCHES=$(( (N + TX - 1) / TX ))
log "loading $BATCHES transactions"
load_start=$(date +%s.%N)
psql -X -q -v ON_ERROR_STOP=1 -d "$DSN_unix" <<SQL
DO \$\$
BEGIN
  FOR b IN 0..$((BATCHES - 1)) LOOP
    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'payment', 'acct-' || ((b * $TX + g) % 10000), 'PaymentCaptured',
           jsonb_build_object(
             'payment_id', b * $TX + g,
             'amount_cents', (b * $TX + g) % 100000,
             'currency', 'EUR',
             'status', 'CAPTURED',
             'customer', jsonb_build_object('id', 'cus_' || md5(g::text),
                                            'email', 'user' || g || '@example.com'),
             'method', jsonb_build_object('type', 'card', 'brand', 'visa', 'last4', '4242'),
             'note', repeat('x', 64))
    FROM generate_series(1, $TX) g;
    COMMIT;
  END LOOP;
END
\$\$;
SQL
load_end=$(date +%s.%N)
END=$(q "SELECT pg_current_wal_insert_lsn();")
ROWS=$(q "SELECT count(*) FROM outbox;")
PAYLOAD=$(q "SELECT round(avg(length(payload::text))) FROM (SELECT payload FROM outbox LIMIT 10000) s;")
WALBYTES=$(q "SELECT pg_wal_lsn_diff('$END', (SELECT min(confirmed_flush_lsn) FROM pg_replication_slots));")
log "loaded $ROWS rows (payload ~$PAYLOAD bytes) in $(awk "BEGIN{printf \"%.1f\", $load_end-$load_start}") s; backlog $((WALBYTES / 1048576)) MiB of WAL, end LSN $END"

hwm_kb_of() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }
ticks_s() { awk "BEGIN{printf \"%.2f\", $1/$CLK_TCK}"; }

walsender_of() {  # walsender_of APPNAME SLOT -> pid (waits until it shows up)
  local pid=""
  for _ in $(seq 1 500); do
    pid=$(q "SELECT coalesce((SELECT r.pid FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = '$2')::text, '');")
    [[ -n $pid ]] && { echo "$pid"; return; }
    sleep 0.01
  done
}

# pin MODE WALSENDER_PID: in pinned mode the walsender goes to CPU 0 and the dev broker
# (every thread) to CPU 1; unpinned, both may run anywhere. CLIENT_PIN prefixes the client.
pin() {
  if [[ $1 == pinned ]]; then
    taskset -p -c 0 "$2" >/dev/null
    taskset -a -p -c 1 "$BROKER_PID" >/dev/null
  else
    taskset -a -p -c 0-$(( $(nproc) - 1 )) "$BROKER_PID" >/dev/null
  fi
}
client_pin() { [[ $1 == pinned ]] && echo "taskset -c 1" || true; }

declare -A RATE CPU WSCPU RSS WALL BROKERCPU

# syscall_counter KEY: with SYSCALLS=1, the perf stat command line to put before a client
# (its counts go to $WORK/syscalls-KEY.txt, "/" in KEY as "-"); else nothing.
syscall_counter() {
  [[ ${SYSCALLS:-0} == 1 ]] || return 0
  printf '%s\n' perf stat -x, -o "$WORK/syscalls-${1//\//-}.txt" -e "$SYSCALL_EVENTS" --
}

# time_client KEY SLOT TRANSPORT MODE COMMAND...: runs a client that ends by itself at END
# under /usr/bin/time (CPU, max RSS), pinned per MODE, sampling its walsender's CPU.
time_client() {
  local key=$1 slot=$2 t=$3 m=$4
  shift 4
  local t0 t1 ws ws_cpu="" c counter
  mapfile -t counter < <(syscall_counter "$key")
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  /usr/bin/time -f '%e %U %S %M' -o "$WORK/time.$slot" $(client_pin "$m") "${counter[@]}" "$@" \
    2>"$WORK/$slot.log" &
  local pid=$!
  ws=$(walsender_of client "$slot")
  pin "$m" "$ws"
  while kill -0 "$pid" 2>/dev/null; do
    c=$(cpu_of "$ws"); [[ $c -gt 0 ]] && ws_cpu=$c  # 0 once it is gone
    sleep 0.02
  done
  wait "$pid" || { cat "$WORK/$slot.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  read -r _ user sys maxrss <"$WORK/time.$slot"
  WALL[$key]=$(awk "BEGIN{printf \"%.3f\", $t1-$t0}")
  RATE[$key]=$(awk "BEGIN{printf \"%.0f\", $ROWS/${WALL[$key]}}")
  CPU[$key]=$(awk "BEGIN{printf \"%.2f\", $user+$sys}")
  WSCPU[$key]=$(ticks_s "${ws_cpu:-0}")
  RSS[$key]=$(awk "BEGIN{printf \"%.1f\", $maxrss/1024}")
}

run_recvlogical() {  # transport mode run
  local t=$1 m=$2 r=$3 dsn_var="DSN_$1" slot="pgr_$1_$2_$3"
  log "pg_recvlogical over $t ($m, run $r)"
  time_client "pg_recvlogical/$t/$m/$r" "$slot" "$t" "$m" \
    pg_recvlogical -d "${!dsn_var}" -S "$slot" --start --no-loop -E "$END" \
    -o proto_version=1 -o publication_names=walrelay_outbox -P pgoutput -f /dev/null
}

run_record() {  # transport mode run: walrelay's read path alone, into a file
  local t=$1 m=$2 r=$3 dsn_var="DSN_$1" slot="rd_$1_$2_$3"
  log "walrelay record over $t ($m, run $r)"
  time_client "walrelay-read/$t/$m/$r" "$slot" "$t" "$m" \
    "$WALRELAY" record --dsn "${!dsn_var}" --slot "$slot" --until-lsn "$END" \
    -o "$WORK/read.wrr" -q
  rm -f "$WORK/read.wrr"
}

run_walrelay() {  # transport mode run
  local t=$1 m=$2 r=$3 dsn_var="DSN_$1" slot="wr_$1_$2_$3"
  log "walrelay run over $t ($m, run $r)"
  local t0 t1 ws ws_cpu="" c cpu="" hwm="" confirmed broker0 broker1
  broker0=$(cpu_of "$BROKER_PID")
  t0=$(date +%s.%N)
  local perf=()
  [[ ${PERF:-0} == 1 ]] &&
    perf=(perf record -q -F 999 --call-graph "$PERF_CALLGRAPH" -o "$WORK/perf-$t-$m-$r.data" --)
  [[ ${SYSCALLS:-0} == 1 ]] && mapfile -t perf < <(syscall_counter "walrelay/$t/$m/$r")
  # shellcheck disable=SC2046
  LD_PRELOAD=${WALRELAY_PRELOAD:-} $(client_pin "$m") "${perf[@]}" "$WALRELAY" run --source-dsn "${!dsn_var}" --source-slot "$slot" --source-create-slot false \
    --kafka-bootstrap-servers "$BOOT" --flow-status-interval-ms 100 --ops-log-level warn \
    >"$WORK/$slot.log" 2>&1 &
  local pid=$!
  ws=$(walsender_of walrelay "$slot")
  pin "$m" "$ws"
  while :; do
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/$slot.log" >&2; exit 1; }
    c=$(cpu_of "$ws"); [[ $c -gt 0 ]] && ws_cpu=$c  # 0 once it is gone
    confirmed=$(q "SELECT confirmed_flush_lsn >= '$END'::pg_lsn FROM pg_replication_slots WHERE slot_name = '$slot';")
    [[ $confirmed == t ]] && break
    sleep 0.02
  done
  t1=$(date +%s.%N)
  cpu=$(cpu_of "$pid"); hwm=$(hwm_kb_of "$pid"); broker1=$(cpu_of "$BROKER_PID")
  c=$(cpu_of "$ws"); [[ $c -gt 0 ]] && ws_cpu=$c
  # perf stat dies of SIGTERM without a word: stop walrelay under it instead.
  if [[ ${SYSCALLS:-0} == 1 ]]; then pkill -TERM -P "$pid"; else kill -TERM "$pid"; fi
  wait "$pid" || true
  local key="walrelay/$t/$m/$r"
  WALL[$key]=$(awk "BEGIN{printf \"%.3f\", $t1-$t0}")
  RATE[$key]=$(awk "BEGIN{printf \"%.0f\", $ROWS/${WALL[$key]}}")
  CPU[$key]=$(ticks_s "$cpu")
  WSCPU[$key]=$(ticks_s "${ws_cpu:-0}")
  RSS[$key]=$(awk "BEGIN{printf \"%.1f\", $hwm/1024}")
  BROKERCPU[$key]=$(ticks_s $((broker1 - broker0)))
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for m in $MODES; do
  for t in unix tcp; do
    for r in $(seq 1 "$RUNS"); do
      run_recvlogical "$t" "$m" "$r"
      run_record "$t" "$m" "$r"
      run_walrelay "$t" "$m" "$r"
    done
  done
done

# MED[client/transport/mode] = the key of the run with the median rate; RUNLIST its rates.
declare -A MED RUNLIST
for m in $MODES; do
  for t in unix tcp; do
    for c in $CLIENTS; do
      best=$(for r in $(seq 1 "$RUNS"); do echo "${RATE[$c/$t/$m/$r]} $r"; done | sort -n |
             awk '{a[NR]=$2} END {print a[int((NR+1)/2)]}')
      MED[$c/$t/$m]="$c/$t/$m/$best"
      RUNLIST[$c/$t/$m]=$(for r in $(seq 1 "$RUNS"); do printf '%s ' "${RATE[$c/$t/$m/$r]}"; done)
    done
  done
done
pin unpinned ""

REPLAY_NULL="" REPLAY_KAFKA=""
if [[ $REPLAY == 1 ]]; then
  log "recording the backlog (walrelay record, slot rec)"
  "$WALRELAY" record --dsn "$DSN_unix" --slot rec --until-lsn "$END" -o "$WORK/backlog.wrr" -q
  log "replaying into the null sink"
  REPLAY_NULL=$(LD_PRELOAD=${WALRELAY_PRELOAD:-} "$WALRELAY" replay "$WORK/backlog.wrr" --sink null --json)
  log "replaying into the dev broker"
  b0=$(cpu_of "$BROKER_PID")
  REPLAY_KAFKA=$(LD_PRELOAD=${WALRELAY_PRELOAD:-} "$WALRELAY" replay "$WORK/backlog.wrr" --sink kafka --kafka-bootstrap-servers "$BOOT" --json)
  REPLAY_BROKER_CPU=$(ticks_s $(($(cpu_of "$BROKER_PID") - b0)))
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "walrelay vs pg_recvlogical: $ROWS rows, $TX-row transactions, ~$PAYLOAD-byte payloads, PostgreSQL $PGVERSION"
echo "machine: $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')), load average before $LOAD_BEFORE, after $LOAD_AFTER"
[[ $RUNS -gt 1 ]] && echo "each row: the run with the median rate of $RUNS"
printf '%-31s %10s %9s %11s %14s %10s %12s\n' client rows/s wall_s client_cpu_s walsender_cpu_s peak_rss_MB devbroker_cpu_s
for m in $MODES; do
  for t in unix tcp; do
    for c in $CLIENTS; do
      k=${MED[$c/$t/$m]}
      printf '%-31s %10s %9s %11s %14s %10s %12s\n' "$k" "${RATE[$k]}" "${WALL[$k]}" "${CPU[$k]}" "${WSCPU[$k]}" "${RSS[$k]}" "${BROKERCPU[$k]:--}"
    done
  done
done
for m in $MODES; do
  for t in unix tcp; do
    wr=${MED[walrelay/$t/$m]} rd=${MED[walrelay-read/$t/$m]} pr=${MED[pg_recvlogical/$t/$m]}
    awk -v t="$t ($m)" -v wr="${RATE[$wr]}" -v pr="${RATE[$pr]}" -v wc="${CPU[$wr]}" \
        -v pc="${CPU[$pr]}" -v rc="${CPU[$rd]}" -v rr="${RATE[$rd]}" -v rows="$ROWS" \
        'BEGIN{printf "ratio walrelay/pg_recvlogical over %s: rate %.3f, client CPU %.2f; CPU per event: walrelay %.3f us, its read path alone %.3f us (rate %.3f), pg_recvlogical %.3f us\n", t, wr/pr, (pc>0?wc/pc:0), wc*1e6/rows, rc*1e6/rows, rr/pr, pc*1e6/rows}'
    if [[ $RUNS -gt 1 ]]; then
      for c in $CLIENTS; do echo "  rows/s of each run, $c over $t ($m): ${RUNLIST[$c/$t/$m]}"; done
    fi
  done
done
if [[ ${SYSCALLS:-0} == 1 ]]; then
  echo "system calls per event (every thread; perf stat):"
  for f in "$WORK"/syscalls-*.txt; do
    awk -F, -v rows="$ROWS" -v name="$(basename "$f" .txt)" '
      /^#/ || NF < 3 {next}
      {sub(/^(raw_)?syscalls:sys_enter_?/, "", $3); out = out sprintf(" %s %.3f", ($3 == "" ? "all" : $3), $1 / rows)}
      END {print "  " name ":" out}' "$f"
  done
fi
if [[ $REPLAY == 1 ]]; then
  echo "replay null sink:  $REPLAY_NULL"
  echo "replay dev broker: $REPLAY_KAFKA"
  echo "replay dev broker: walrelay-devbroker used $REPLAY_BROKER_CPU CPU seconds"
fi
