#!/usr/bin/env bash
# chaos.sh: the payments story under faults, with a verdict computed from what arrived.
#
#   bash scripts/chaos.sh                     1,000,000 events, a random seed
#   CHAOS_EVENTS=30000 CHAOS_SEED=7 bash scripts/chaos.sh      (what CI runs)
#
# Runs a throwaway PostgreSQL 15, Kafka (CHAOS_KAFKA=dev, the default: the dev broker
# process, walrelay-devbroker, 3 brokers; CHAOS_KAFKA=apache: the Apache Kafka cluster of
# scripts/kafka.sh, 3 brokers, replication factor 3, min.insync.replicas=2),
# two relays on one slot (one streams, one stands by), two ledger consumers (the inbox
# library, one consumer group) and two billing writers committing transactions of 1 to
# 1000 payments (each payment and its event in one transaction; a fifth of the events are
# table-less pg_logical_emit_message events; one transaction in twenty is rolled back).
# While they run, a seeded schedule (printed first: CHAOS_SEED replays it) injects:
#   - kill -9 of the streaming relay (CHAOS_RELAY_KILLS, default 20; the standby takes
#     over, the killed one restarts as the new standby);
#   - outages of every broker (CHAOS_BROKER_OUTAGES, default 5; two of them last
#     CHAOS_LONG_OUTAGE_S, default 35 s, longer than librdkafka's request timeout);
#   - PostgreSQL crashes, `pg_ctl stop -m immediate` then start (CHAOS_PG_CRASHES, 2);
#   - one lost slot (CHAOS_LOST_SLOT, 1): both relays stopped, max_slot_wal_keep_size made
#     tiny and WAL written until the slot is invalidated; the next relay recovers it from
#     the outbox table (table-less events are paused around it: they live only in WAL);
#   - kill -9 of a ledger instance (CHAOS_LEDGER_KILLS, default 4);
#   - on Apache Kafka only: kill -9 of one broker, restarted after a few seconds
#     (CHAOS_BROKER_KILLS, default 2), one broker paused with SIGSTOP past the request
#     timeout (CHAOS_BROKER_PAUSES, default 1), and a rolling restart of all three
#     (CHAOS_ROLLING_RESTARTS, default 1). An outage of every broker is a kill -9 of all
#     three, restarted together.
# Then everything drains and the verdict is computed from Kafka (read with kcat) and from
# the ledger's tables, against the billing tables (the committed truth):
#   lost            committed payments whose event is not in Kafka / not applied
#   phantom         events in Kafka that no committed payment has (rolled back)
#   disorder        per wallet, in its partition, after dropping repeats: seq decreasing
#   applied twice   payments the ledger applied more than once
#   balances off    wallets whose balance is not the sum of their payments
# and the duplicates Kafka holds. Exit 0 only when all five are 0.
#
# CHAOS_EXPECT_LOSS=1 turns the run into a test of the verdict: the relays run with the
# test-only failpoint WALRELAY_RELAY_FAILPOINT=confirm_before_ack (compiled into test
# builds only: they confirm positions before Kafka acknowledged them), the schedule kills
# the streaming relay during broker outages, and the exit is 0 only when loss is reported.
#
# Env: CHAOS_EVENTS (default 1000000), CHAOS_SEED (default: the time), CHAOS_KAFKA, the counts above,
# CHAOS_WORK (default /tmp/walrelay-chaos), BUILD_ROOT (default build; uses
# $BUILD_ROOT/main, built when missing), KEEP=1 keeps the work directory.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

EVENTS=${CHAOS_EVENTS:-1000000}
KAFKA=${CHAOS_KAFKA:-dev}
[[ $KAFKA == dev || $KAFKA == apache ]] || { echo "chaos.sh: CHAOS_KAFKA is dev or apache" >&2; exit 2; }
BROKER_KILLS=0 BROKER_PAUSES=0 ROLLING_RESTARTS=0
if [[ $KAFKA == apache ]]; then
  BROKER_KILLS=${CHAOS_BROKER_KILLS:-2}
  BROKER_PAUSES=${CHAOS_BROKER_PAUSES:-1}
  ROLLING_RESTARTS=${CHAOS_ROLLING_RESTARTS:-1}
fi
SEED=${CHAOS_SEED:-$(date +%s)}
EXPECT_LOSS=${CHAOS_EXPECT_LOSS:-0}
RELAY_KILLS=${CHAOS_RELAY_KILLS:-20}
BROKER_OUTAGES=${CHAOS_BROKER_OUTAGES:-5}
LONG_OUTAGE_S=${CHAOS_LONG_OUTAGE_S:-35}
PG_CRASHES=${CHAOS_PG_CRASHES:-2}
LOST_SLOT=${CHAOS_LOST_SLOT:-1}
LEDGER_KILLS=${CHAOS_LEDGER_KILLS:-4}
WORK=${CHAOS_WORK:-/tmp/walrelay-chaos}
BUILD=${BUILD_ROOT:-build}/main
if [[ $EXPECT_LOSS == 1 ]]; then
  RELAY_KILLS=${CHAOS_RELAY_KILLS:-3}; BROKER_OUTAGES=3; PG_CRASHES=0; LOST_SLOT=0
  LEDGER_KILLS=0; EVENTS=${CHAOS_EVENTS:-20000}
fi

say() { printf '[chaos %s] %s\n' "$(date +%T)" "$*"; }

WALRELAY="$ROOT/$BUILD/src/cli/walrelay"
DEVBROKER="$ROOT/$BUILD/src/kafka/walrelay-devbroker"
LEDGER="$ROOT/$BUILD/src/inbox/examples/walrelay-ledger"
if [[ ! -x $WALRELAY || ! -x $DEVBROKER || ! -x $LEDGER ]]; then
  say "building walrelay, walrelay-devbroker and walrelay-ledger in $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWALRELAY_WERROR=ON >/dev/null
  cmake --build "$BUILD" -j2 --target walrelay walrelay-devbroker walrelay-ledger
fi
for tool in kcat psql; do
  command -v "$tool" >/dev/null || { echo "chaos.sh: $tool is needed (scripts/install-deps.sh)" >&2; exit 2; }
done

rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$WORK"
# synchronous_commit on: pgtmp's default (off, for speed) lets a crash lose commits already
# acknowledged, and no consumer can then be effectively once (docs/inbox.md, Durability):
# the first 200,000-event run showed it. fsync stays off: the crashes here kill processes,
# not the operating system, so written WAL survives them.
PGSETTINGS=(max_slot_wal_keep_size=4GB wal_sender_timeout=10s max_connections=100
  synchronous_commit=on)
declare -A RELAY_PID=() LEDGER_PID=()
WRITER_PIDS=()
BROKER_PID=""
cleanup() {
  set +e
  exec 2>/dev/null  # no "Killed" notices of the processes stopped here
  touch "$WORK/stop"
  for p in "${RELAY_PID[@]}" "${LEDGER_PID[@]}" "${WRITER_PIDS[@]}" $BROKER_PID; do
    kill -9 "$p" 2>/dev/null
  done
  wait 2>/dev/null
  [[ $KAFKA == apache ]] && bash "$ROOT/scripts/kafka.sh" stop --dir "$WORK/kafka" >/dev/null 2>&1
  if [[ "${KEEP:-0}" != 1 ]]; then
    bash "$ROOT/scripts/pgtmp.sh" destroy "$WORK/pg" >/dev/null 2>&1
    rm -rf "$WORK"
  else
    bash "$ROOT/scripts/pgtmp.sh" stop "$WORK/pg" >/dev/null 2>&1
  fi
}
trap cleanup EXIT

# --- the schedule (seeded, printed) ---------------------------------------------------
RANDOM=$SEED
SCHEDULE=()
for _ in $(seq 1 "$RELAY_KILLS"); do SCHEDULE+=("kill-relay"); done
for i in $(seq 1 "$BROKER_OUTAGES"); do
  if [[ $EXPECT_LOSS == 1 ]]; then SCHEDULE+=("outage-kill:8")
  elif (( i <= 2 )); then SCHEDULE+=("outage:$LONG_OUTAGE_S")
  else SCHEDULE+=("outage:$(( 3 + RANDOM % 10 ))"); fi
done
for _ in $(seq 1 "$PG_CRASHES"); do SCHEDULE+=("crash-postgres"); done
for _ in $(seq 1 "$LOST_SLOT"); do SCHEDULE+=("lose-slot"); done
for _ in $(seq 1 "$LEDGER_KILLS"); do SCHEDULE+=("kill-ledger"); done
for _ in $(seq 1 "$BROKER_KILLS"); do SCHEDULE+=("kill-broker:$(( 3 + RANDOM % 8 ))"); done
for _ in $(seq 1 "$BROKER_PAUSES"); do SCHEDULE+=("pause-broker:$(( 35 + RANDOM % 10 ))"); done
for _ in $(seq 1 "$ROLLING_RESTARTS"); do SCHEDULE+=("rolling-restart"); done
for (( i = ${#SCHEDULE[@]} - 1; i > 0; i-- )); do  # Fisher-Yates with the seeded RANDOM
  j=$(( RANDOM % (i + 1) )); t=${SCHEDULE[i]}; SCHEDULE[i]=${SCHEDULE[j]}; SCHEDULE[j]=$t
done
GAPS=()
for _ in "${SCHEDULE[@]}"; do GAPS+=("$(( 1 + RANDOM % 4 ))"); done
# Fault i fires once (i + 1) / (faults + 1) of the events are committed (and after its
# seeded gap), so faults land on a moving stream whatever the writers' speed; the writers
# run at most one step ahead of the next fault (the file allowed), so the whole run stays
# near EVENTS (librdkafka's mock keeps a bounded number of records).
# librdkafka's mock keeps about 5 MB per partition and drops older records: enough
# partitions keep every record (~400 bytes each) for the verdict.
PARTITIONS=$(( EVENTS * 3 * 400 / 4000000 + 12 ))
say "seed $SEED: $EVENTS events at least, $PARTITIONS partitions; schedule (fault i after i/(n+1) of the events and its gap in s):"
for i in "${!SCHEDULE[@]}"; do printf '    %2d. +%ss %s\n' "$((i + 1))" "${GAPS[i]}" "${SCHEDULE[i]}"; done
[[ $EXPECT_LOSS == 1 ]] && say "CHAOS_EXPECT_LOSS=1: relays confirm before Kafka acknowledges (test failpoint); the verdict must report loss"

# --- PostgreSQL, Kafka, tables --------------------------------------------------------
pg_start() { eval "$(bash "$ROOT/scripts/pgtmp.sh" start "$WORK/pg" "${PGSETTINGS[@]}")"; }
pg_start
export PGHOST PGPORT PGUSER PGDATABASE
DSN="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
q() { PGOPTIONS="-c client_min_messages=warning" psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DSN" -c "$1"; }

if [[ $KAFKA == apache ]]; then
  KSH=(bash "$ROOT/scripts/kafka.sh")
  "${KSH[@]}" start --dir "$WORK/kafka" --owner $$ >"$WORK/bootstrap" 2>"$WORK/kafka-start.log" ||
    { cat "$WORK/kafka-start.log" >&2; exit 1; }
  "${KSH[@]}" topic --dir "$WORK/kafka" outbox.payment "$PARTITIONS"
else
  mkfifo "$WORK/broker.ctl"
  "$DEVBROKER" --brokers 3 --topic "outbox.payment:$PARTITIONS" --bootstrap-file "$WORK/bootstrap" \
    <"$WORK/broker.ctl" >"$WORK/devbroker.log" 2>&1 &
  BROKER_PID=$!
  exec 7>"$WORK/broker.ctl"
  for _ in $(seq 200); do [[ -s $WORK/bootstrap ]] && break; sleep 0.05; done
fi
BOOT=$(sed -n 's/^bootstrap=//p' "$WORK/bootstrap")
[[ -n $BOOT ]] || { cat "$WORK/devbroker.log" "$WORK/kafka-start.log" >&2 2>/dev/null; exit 1; }

"$WALRELAY" setup --source-dsn "$DSN" >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log" >&2; exit 1; }
q "CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     event_id uuid NOT NULL UNIQUE, wallet text NOT NULL, amount bigint NOT NULL,
     seq bigint NOT NULL, tableless boolean NOT NULL);
   CREATE TABLE wallet_seq (wallet text PRIMARY KEY, seq bigint NOT NULL);
   INSERT INTO wallet_seq SELECT 'wallet-' || g, 0 FROM generate_series(0, 199) g;
   CREATE TABLE chaos_log (at timestamptz DEFAULT clock_timestamp(), what text)"

# --- the processes ---------------------------------------------------------------------
METRICS_BASE=$(( 20000 + RANDOM % 20000 ))
start_relay() {  # name (a|b)
  local port=$(( METRICS_BASE + $([[ $1 == a ]] && echo 0 || echo 1) ))
  local env=()
  [[ $EXPECT_LOSS == 1 ]] && env=(env WALRELAY_RELAY_FAILPOINT=confirm_before_ack)
  "${env[@]}" "$WALRELAY" run --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOT" \
    --source-message-prefix walrelay.outbox --flow-status-interval-ms 200 \
    --flow-standby-interval-ms 200 --flow-reconnect-max-ms 2000 --flow-max-in-flight-events 20000 \
    --ops-metrics-address "127.0.0.1:$port" >>"$WORK/relay-$1.log" 2>&1 &
  RELAY_PID[$1]=$!
}
streaming_relay() {  # prints the name of the relay that streams, or nothing
  local n
  for n in a b; do
    local port=$(( METRICS_BASE + $([[ $n == a ]] && echo 0 || echo 1) ))
    if curl -s --max-time 1 "http://127.0.0.1:$port/metrics" 2>/dev/null | grep -q '^walrelay_streaming 1'; then
      echo "$n"; return
    fi
  done
}
wait_streaming() {  # seconds
  for _ in $(seq $(( $1 * 10 ))); do [[ -n $(streaming_relay) ]] && return 0; sleep 0.1; done
  return 1
}
start_ledger() {  # name
  "$LEDGER" --bootstrap "$BOOT" --group ledger --topic outbox.payment --conninfo "$DSN" \
    --replay-window-ms 86400000 --inbox-retention-ms 1296000000 --describe-configs-timeout-ms 1000 \
    --stats-interval-ms 5000 --property session.timeout.ms=6000 --property heartbeat.interval.ms=500 \
    >>"$WORK/ledger-$1.log" 2>&1 &
  LEDGER_PID[$1]=$!
}

payments() { q "SELECT count(*) FROM payments" 2>/dev/null || echo "?"; }

# The writers' budget of payments, replaced whole (a reader never sees a half-written file:
# `echo >file` truncates first, and a writer reading then got an empty budget).
allow() {
  echo "$1" >"$WORK/allowed.tmp"
  mv -f "$WORK/allowed.tmp" "$WORK/allowed"
}

# A writer: transactions of 1-1000 payments (mostly small), wallets locked in ascending
# order (no deadlocks), per-wallet seq in commit order; a fifth table-less, one in twenty
# rolled back. Errors (a crashed server) are retried after a pause.
writer() {  # id
  local w=$1 n r tx
  RANDOM=$(( SEED + w ))
  while [[ ! -f $WORK/stop ]]; do
    local committed
    committed=$(payments)
    local allowed
    allowed=$(cat "$WORK/allowed")
    if [[ $committed =~ ^[0-9]+$ && $allowed =~ ^[0-9]+$ ]] && (( committed >= allowed )); then
      sleep 0.2
      continue
    fi
    r=$(( RANDOM % 100 ))
    if (( r < 70 )); then n=$(( 1 + RANDOM % 10 )); elif (( r < 95 )); then n=$(( 10 + RANDOM % 90 )); else n=$(( 100 + RANDOM % 901 )); fi
    local msg_share=20
    [[ -f $WORK/no_messages ]] && msg_share=0
    local end="COMMIT;"
    (( RANDOM % 20 == 0 )) && end="ROLLBACK;"
    tx="BEGIN;
DO \$\$
DECLARE w text; s bigint; e uuid; a bigint;
BEGIN
  FOR w IN SELECT 'wallet-' || (random() * 199)::int FROM generate_series(1, $n) ORDER BY 1 LOOP
    UPDATE wallet_seq SET seq = seq + 1 WHERE wallet = w RETURNING seq INTO s;
    e := gen_random_uuid(); a := 1 + (random() * 999)::int;
    IF random() * 100 < $msg_share THEN
      INSERT INTO payments (event_id, wallet, amount, seq, tableless) VALUES (e, w, a, s, true);
      PERFORM pg_logical_emit_message(true, 'walrelay.outbox', jsonb_build_object(
        'event_id', e, 'aggregate_type', 'payment', 'aggregate_id', w, 'event_type', 'PaymentCaptured',
        'payload', jsonb_build_object('wallet', w, 'amount', a, 'seq', s))::text);
    ELSE
      INSERT INTO payments (event_id, wallet, amount, seq, tableless) VALUES (e, w, a, s, false);
      INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
      VALUES (e, 'payment', w, 'PaymentCaptured', jsonb_build_object('wallet', w, 'amount', a, 'seq', s));
    END IF;
  END LOOP;
END \$\$;
$end"
    if ! PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" \
        -c "$tx" >/dev/null 2>>"$WORK/writer-$w.err"; then
      sleep 0.5
    fi
  done
}

NFAULTS=${#SCHEDULE[@]}
STEP=$(( EVENTS / (NFAULTS + 1) + 1 ))
allow "$STEP"
start_relay a
wait_streaming 60 || { tail -20 "$WORK/relay-a.log" >&2; exit 1; }
start_relay b
start_ledger 1
start_ledger 2
writer 1 & WRITER_PIDS+=($!)
writer 2 & WRITER_PIDS+=($!)
say "running: relays a and b, ledgers 1 and 2, writers 1 and 2 (logs in $WORK)"

restart_dead_relays() {
  local n
  for n in a b; do kill -0 "${RELAY_PID[$n]}" 2>/dev/null || start_relay "$n"; done
}

kill_relay() {
  local n
  n=$(streaming_relay)
  if [[ -z $n ]]; then wait_streaming 60 || true; n=$(streaming_relay); fi
  [[ -n $n ]] || { say "no relay streams: skipped"; return; }
  kill -9 "${RELAY_PID[$n]}"; wait "${RELAY_PID[$n]}" 2>/dev/null || true
  start_relay "$n"
  say "kill -9 relay $n; restarted as the standby"
}

# Apache Kafka: whether every partition of the topic has a leader and all three replicas
# in sync (kcat's metadata).
full_isr() {
  kcat -b "$BOOT" -L -t outbox.payment 2>/dev/null |
    awk '/partition [0-9]+, leader/ { n++; if ($4 == "-1," || $NF !~ /^[0-9]+,[0-9]+,[0-9]+$/) bad++ }
         END { exit !(n > 0 && bad == 0) }'
}
wait_full_isr() { for _ in $(seq 300); do full_isr && return 0; sleep 0.5; done; say "ISR not full after 150 s"; }
kafka_down() {  # every broker
  if [[ $KAFKA == apache ]]; then
    local b; for b in 1 2 3; do "${KSH[@]}" kill-broker --dir "$WORK/kafka" "$b"; done
  else
    echo "down all" >&7
  fi
}
kafka_up() {
  if [[ $KAFKA == apache ]]; then
    local b; for b in 1 2 3; do "${KSH[@]}" start-broker --dir "$WORK/kafka" "$b"; done
  else
    echo "up all" >&7
  fi
}
kill_broker() {  # seconds down
  local b=$(( 1 + RANDOM % 3 ))
  "${KSH[@]}" kill-broker --dir "$WORK/kafka" "$b"
  say "kill -9 broker $b; restarting it in $1 s"
  sleep "$1"
  "${KSH[@]}" start-broker --dir "$WORK/kafka" "$b"
  wait_full_isr
}
pause_broker() {  # seconds paused
  local b=$(( 1 + RANDOM % 3 ))
  "${KSH[@]}" pause-broker --dir "$WORK/kafka" "$b"
  say "broker $b paused (SIGSTOP) for $1 s"
  sleep "$1"
  "${KSH[@]}" resume-broker --dir "$WORK/kafka" "$b"
  wait_full_isr
}
rolling_restart() {  # each broker in turn: stopped (SIGTERM), started, back in sync
  local b
  say "rolling restart of brokers 1, 2, 3"
  for b in 1 2 3; do
    "${KSH[@]}" stop-broker --dir "$WORK/kafka" "$b"
    "${KSH[@]}" start-broker --dir "$WORK/kafka" "$b"
    wait_full_isr
  done
}

outage() {  # seconds [kill the streaming relay in the middle]
  kafka_down
  say "all brokers down for $1 s"
  if [[ ${2:-} == kill ]]; then
    sleep $(( $1 / 2 )); kill_relay; sleep $(( $1 - $1 / 2 ))
  else
    sleep "$1"
  fi
  kafka_up
}

crash_postgres() {
  say "PostgreSQL: pg_ctl stop -m immediate, then start"
  local bindir=${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin} user=""
  [[ $(id -u) == 0 ]] && user=$(stat -c %U "$WORK/pg/data")
  if [[ -n $user ]]; then runuser -u "$user" -- "$bindir/pg_ctl" -D "$WORK/pg/data" -m immediate -w stop >/dev/null
  else "$bindir/pg_ctl" -D "$WORK/pg/data" -m immediate -w stop >/dev/null; fi
  sleep 2
  pg_start
}

lose_slot() {
  say "lost slot: table-less events paused, relays caught up and stopped"
  touch "$WORK/no_messages"
  sleep 3  # transactions begun before the pause commit
  local target
  target=$(q "SELECT pg_current_wal_lsn()")
  for _ in $(seq 600); do
    [[ $(q "SELECT confirmed_flush_lsn >= '$target' FROM pg_replication_slots WHERE slot_name = 'walrelay'") == t ]] && break
    sleep 0.1
  done
  local n
  for n in a b; do kill -TERM "${RELAY_PID[$n]}" 2>/dev/null || true; done
  for n in a b; do wait "${RELAY_PID[$n]}" 2>/dev/null || true; done
  q "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'" >/dev/null
  q "SELECT pg_reload_conf()" >/dev/null
  local status=""
  for _ in $(seq 30); do
    q "CREATE TABLE IF NOT EXISTS chaos_filler (x text); INSERT INTO chaos_filler SELECT repeat('x', 1000) FROM generate_series(1, 20000); TRUNCATE chaos_filler" >/dev/null
    q "SELECT pg_switch_wal()" >/dev/null
    q "CHECKPOINT" >/dev/null
    status=$(q "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'walrelay'")
    [[ $status == lost ]] && break
  done
  q "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null
  q "SELECT pg_reload_conf()" >/dev/null
  say "slot walrelay is '$status'; starting the relays (the first recovers it)"
  start_relay a
  start_relay b
  wait_streaming 300 || say "no relay streams after the lost slot (see the relay logs)"
  rm -f "$WORK/no_messages"
}

kill_ledger() {
  local n=$(( 1 + RANDOM % 2 ))
  kill -9 "${LEDGER_PID[$n]}" 2>/dev/null || say "ledger $n had exited (see $WORK/ledger-$n.log)"
  wait "${LEDGER_PID[$n]}" 2>/dev/null || true
  start_ledger "$n"
  say "kill -9 ledger $n; restarted"
}

# --- the run -----------------------------------------------------------------------------
wait_committed() {  # until at least $1 payments are committed
  local c
  while :; do
    c=$(payments)
    [[ $c =~ ^[0-9]+$ ]] && (( c >= $1 )) && return
    sleep 0.2
  done
}
T0=$(date +%s)
for i in "${!SCHEDULE[@]}"; do
  due=$(( EVENTS * (i + 1) / (NFAULTS + 1) ))
  allow $(( due + STEP ))
  wait_committed "$due"
  sleep "${GAPS[i]}"
  case ${SCHEDULE[i]} in
    kill-relay) kill_relay ;;
    outage:*) outage "${SCHEDULE[i]#outage:}" ;;
    outage-kill:*) outage "${SCHEDULE[i]#outage-kill:}" kill ;;
    crash-postgres) crash_postgres ;;
    lose-slot) lose_slot ;;
    kill-ledger) kill_ledger ;;
    kill-broker:*) kill_broker "${SCHEDULE[i]#kill-broker:}" ;;
    pause-broker:*) pause_broker "${SCHEDULE[i]#pause-broker:}" ;;
    rolling-restart) rolling_restart ;;
  esac
  restart_dead_relays
  say "    $(payments) payments committed so far"
done
allow "$EVENTS"
say "schedule done; writing until $EVENTS payments are committed"
wait_committed "$EVENTS"
touch "$WORK/stop"
wait "${WRITER_PIDS[@]}" 2>/dev/null || true
WRITE_END=$(date +%s)
TOTAL=$(payments)
say "$TOTAL payments committed; draining"

# --- drain: the slot confirmed past the end, the ledger applied everything (or stalled) --
END_LSN=$(q "SELECT pg_current_wal_lsn()")
for _ in $(seq 1200); do
  [[ $(q "SELECT coalesce((SELECT confirmed_flush_lsn >= '$END_LSN' FROM pg_replication_slots WHERE slot_name = 'walrelay'), false)") == t ]] && break
  restart_dead_relays
  sleep 0.5
done
last=-1; still=0; STALL_S=60
[[ $EXPECT_LOSS == 1 ]] && STALL_S=15
for _ in $(seq 600); do
  applied=$(q "SELECT count(DISTINCT event_id) FROM wallet_credit")
  (( applied >= TOTAL )) && break
  if (( applied == last )); then still=$(( still + 1 )); else still=0; fi
  (( still >= STALL_S )) && break  # no progress: what is missing is missing
  last=$applied
  sleep 1
done

# --- the verdict -------------------------------------------------------------------------
kcat -C -b "$BOOT" -t outbox.payment -o beginning -e -q -f '%p\t%o\t%k\t%h\t%s\n' >"$WORK/records.tsv" 2>"$WORK/kcat.err"
awk -F'\t' '{
  eid = ""; n = split($4, hs, ",");
  for (i = 1; i <= n; i++) if (hs[i] ~ /^event_id=/) eid = substr(hs[i], 10);
  seq = ""; if (match($5, /"seq": ?[0-9]+/)) { s = substr($5, RSTART, RLENGTH); sub(/.*: ?/, "", s); seq = s }
  print $1 "\t" $2 "\t" $3 "\t" eid "\t" seq
}' "$WORK/records.tsv" >"$WORK/records.clean"
q "CREATE TABLE kafka_records (part int, off bigint, key text, event_id text, seq bigint)"
PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" \
  -c "\\copy kafka_records FROM '$WORK/records.clean' WITH (FORMAT text, NULL '')"
VERDICT=$(q "
  WITH first AS (SELECT DISTINCT ON (event_id) * FROM kafka_records ORDER BY event_id, part, off),
  kafka_lost AS (SELECT count(*) n FROM payments p WHERE NOT EXISTS (SELECT 1 FROM first f WHERE f.event_id = p.event_id::text)),
  phantom AS (SELECT count(*) n FROM first f WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.event_id::text = f.event_id)),
  disorder AS (SELECT count(*) n FROM (SELECT seq < lag(seq) OVER (PARTITION BY part, key ORDER BY off) bad FROM first) x WHERE bad),
  ledger_lost AS (SELECT count(*) n FROM payments p WHERE NOT EXISTS (SELECT 1 FROM wallet_credit c WHERE c.event_id = p.event_id::text)),
  twice AS (SELECT count(*) n FROM (SELECT event_id FROM wallet_credit GROUP BY 1 HAVING count(*) > 1) x),
  balance AS (SELECT count(*) n FROM (SELECT wallet, sum(amount) s FROM payments GROUP BY 1) p
              FULL JOIN wallet w ON w.id = p.wallet WHERE w.balance IS DISTINCT FROM p.s),
  ledger_disorder AS (SELECT count(*) n FROM (SELECT seq < lag(seq) OVER (PARTITION BY wallet ORDER BY applied_order) bad FROM wallet_credit) x WHERE bad)
  SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM payments WHERE tableless),
         kafka_lost.n, phantom.n, disorder.n, (SELECT count(*) FROM kafka_records) - (SELECT count(*) FROM first),
         ledger_lost.n, twice.n, balance.n, ledger_disorder.n
  FROM kafka_lost, phantom, disorder, ledger_lost, twice, balance, ledger_disorder" | tr '|' ' ')
read -r TOTAL TABLELESS KLOST PHANTOM DISORDER DUPS LLOST TWICE BALANCE LDISORDER <<<"$VERDICT"
RECOVERED=$(cat "$WORK"/relay-*.log | grep -c "recovery of slot walrelay done" || true)
TAKEOVERS=$(cat "$WORK"/relay-*.log | grep -c "took over slot" || true)
ELAPSED=$(( $(date +%s) - T0 ))
echo
echo "chaos verdict (seed $SEED, Kafka: $KAFKA, ${ELAPSED} s, writing $(( WRITE_END - T0 )) s):"
echo "  $TOTAL payments committed ($TABLELESS table-less); faults: ${#SCHEDULE[@]} scheduled ($RELAY_KILLS relay kills, $BROKER_OUTAGES broker outages, $PG_CRASHES PostgreSQL crashes, $LOST_SLOT lost slots, $LEDGER_KILLS ledger kills, $BROKER_KILLS broker kills, $BROKER_PAUSES broker pauses, $ROLLING_RESTARTS rolling restarts); $TAKEOVERS standby take-overs, $RECOVERED slot recoveries"
echo "  Kafka:  $KLOST lost, $PHANTOM phantom (rolled back or unknown), $DISORDER out of order per wallet, $DUPS duplicates"
echo "  ledger: $LLOST lost, $TWICE applied twice, $BALANCE wallet balances off, $LDISORDER applied out of order"
FAILED=0
for v in "$KLOST" "$PHANTOM" "$DISORDER" "$LLOST" "$TWICE" "$BALANCE" "$LDISORDER"; do [[ $v == 0 ]] || FAILED=1; done
if [[ $EXPECT_LOSS == 1 ]]; then
  if [[ $KLOST != 0 ]]; then
    echo "  EXPECTED: with confirm_before_ack the run reports loss ($KLOST events): the verdict can fail"
    exit 0
  fi
  echo "  UNEXPECTED: confirm_before_ack was armed and no loss was reported: the chaos run cannot see loss"
  exit 1
fi
if [[ $FAILED == 0 ]]; then echo "  PASS"; exit 0; fi
echo "  FAIL (logs kept in $WORK: rerun with CHAOS_SEED=$SEED to replay the schedule)"
KEEP=1
exit 1
