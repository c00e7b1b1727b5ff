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
# The writers are paced by time (CHAOS_RATE payments per second together, default 200)
# and write through every fault, so each fault lands on a moving stream; once the
# schedule is done they write on until CHAOS_EVENTS payments are committed.
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
# A fault counts as executed only with its evidence, written to $WORK/faults.log: a relay
# kill names the streaming relay's events in flight (walrelay_in_flight_events, > 0: the
# stream was moving) and that its pid is gone; an outage, that the dev broker applied it
# (its "ok") or that each broker's process is gone; a PostgreSQL crash, a new postmaster
# pid; a lost slot, wal_status = lost; a ledger kill, its pid gone. A fault that could not
# execute, and a relay or ledger that exits on its own (its log tail is printed), fail
# the run.
# Then everything drains and the verdict is computed from Kafka (read with kcat) and from
# the ledger's tables, against the billing tables (the committed truth):
#   lost            committed payments whose event is not in Kafka / not applied
#   phantom         events in Kafka that no committed payment has (rolled back)
#   disorder        per wallet, in its partition, after dropping repeats: seq decreasing
#   applied twice   payments the ledger applied more than once
#   balances off    wallets whose balance is not the sum of their payments
#   unparsable      records without an event_id header or a seq in the payload (the checks
#                   above cannot judge them: they fail the run, never pass it)
# and the duplicates Kafka holds. Exit 0 only when all of them are 0 and every scheduled
# fault executed.
#
# CHAOS_EXPECT_LOSS=1 turns the run into a test of the verdict: the relays run with the
# test-only failpoint WALRELAY_RELAY_FAILPOINT=confirm_before_ack (compiled into test
# builds only: they confirm positions before Kafka acknowledged them), the schedule kills
# the streaming relay during broker outages, and the exit is 0 only when the loss is what
# the failpoint predicts: at each kill during an outage nothing was acknowledged since the
# outage began, and the relay had confirmed what it had read up to its last status update
# (every 200 ms), so the events in flight at those kills (read from its /metrics just
# before each kill) are lost, less those of the transaction being read (a position is
# confirmed at a transaction's end) and those read in the last 200 ms: the writers commit
# transactions of 1-10 payments in this mode, so at most 10 + RATE / 5 per kill. The run
# requires that those kills together had at least CHAOS_MIN_IN_FLIGHT events in flight
# (default 1,000: the premise that there was something to lose), and a loss of at least
# CHAOS_LOSS_SHARE (default 0.5) of what they had in flight beyond that tail (measured:
# 0.91-1.0 of it; status updates come later than every 200 ms on a loaded machine, so the
# unconfirmed tail can be longer), and at most
# every event in flight at any of its kills plus two seconds of writes (read between the
# metrics and the kill): a loss of another size means the verdict counts something else
# than the failpoint's loss.
#
# CHAOS_EXACTLY_ONCE=1 (with CHAOS_KAFKA=apache) runs both relays in exactly-once mode
# (--kafka-exactly-once; `walrelay setup` makes the checkpoint topic) and makes the verdict
# stricter: Kafka read with isolation.level=read_committed must hold 0 duplicates and 0 torn
# source transactions (committed transactions, by the xid in their position header, of
# which some events are in Kafka and others not) besides 0 lost, and, as the premise that
# the kills hit open Kafka transactions, the partitions' logs must hold records that
# read_committed does not return (aborted transactions). The lost slot is left out of this
# schedule: lost-slot recovery republishes from the outbox table with the idempotent
# producer, which repeats (docs/guarantees.md, exactly once). PostgreSQL crashes stay: the
# slot rewinds, and the checkpoint must skip what it sends again.
# CHAOS_EXPECT_DUPLICATES=1 is that variant's test of the verdict: the relays run with the
# test-only failpoint WALRELAY_RELAY_FAILPOINT=ignore_checkpoint (exactly-once sessions
# publish again what the checkpoint says Kafka has) and status updates 3 s apart, so each
# take-over sends seconds of published transactions again; the run passes only when the
# verdict reports duplicates (and nothing lost).
#
# The soak (scripts/soak.sh) runs this for a time instead of a count, with three more
# settings, all off by default:
#   CHAOS_DURATION_S   the writers write for this long; the schedule fills it: a relay kill
#                      and a broker restart early, then one fault every 2.5-4 minutes (the
#                      network faults below with CHAOS_NET_FAULTS, else ledger kills and
#                      broker pauses), none in the last 5 minutes; CHAOS_EVENTS is ignored.
#                      CHAOS_FAULT_GAP_S makes every gap that long (a short trial of the
#                      whole schedule). CHAOS_SOAK_FAULTS="KIND:S ..." replaces the kinds
#                      that follow the process faults (in turn), e.g.
#                      CHAOS_SOAK_FAULTS=net-broker-blackhole:30 repeats one fault all run.
#   CHAOS_NET_FAULTS=1 (Apache Kafka) both relays reach PostgreSQL and every broker through
#                      Toxiproxy (scripts/toxiproxy.sh; the brokers' PROXIED listeners of
#                      scripts/kafka.sh), and the schedule draws network faults: a black hole
#                      (no RST, no FIN) on the path to PostgreSQL for 60 s (evidence: no relay
#                      streamed during it) or to one broker for 30 s, 200 +- 50 ms of latency
#                      with the streams sliced on every path for 120 s, and connection resets
#                      on every path every 5 s for 60 s (evidence: the proxies' toxics listed).
#   CHAOS_WRITER=pgbench (with CHAOS_DURATION_S) pgbench writes instead of the two psql
#                      writers: one payment per transaction at a steady CHAOS_RATE
#                      transactions per second (-R), 8 clients, the same rows and events, a
#                      fifth table-less, one in twenty rolled back ($WORK/pgbench.log).
#   CHAOS_SAMPLE_S     every this many seconds, each relay's and ledger's RSS, C heap in use
#                      and retained, open descriptors, threads and CPU time, and each
#                      relay's published events and role (streaming, standby, other:
#                      reconnecting),
#                      to $WORK/samples.tsv (KEEP=1 keeps it; scripts/lib/soak_report.py reads it).
# Env: CHAOS_EVENTS (default 1000000), CHAOS_SEED (default: the time), CHAOS_KAFKA, CHAOS_RATE, the counts above,
# CHAOS_WORK (default /tmp/walrelay-chaos), BUILD_ROOT (default build; uses
# $BUILD_ROOT/main, built when missing), KEEP=1 keeps the work directory.
# Exit: 0 the verdict passed, 1 it failed, 2 bad settings, 3 void: the dev broker (a test
# double holding every record in memory) died, so nothing could be judged (its log and
# core are kept; scripts/test.sh runs a void run once more, saying so).
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
EXPECT_DUPS=${CHAOS_EXPECT_DUPLICATES:-0}
EXACTLY_ONCE=${CHAOS_EXACTLY_ONCE:-$EXPECT_DUPS}
STATUS_MS=200
if [[ $EXACTLY_ONCE == 1 && $KAFKA != apache ]]; then
  echo "chaos.sh: CHAOS_EXACTLY_ONCE needs CHAOS_KAFKA=apache (the dev broker does not fence)" >&2; exit 2
fi
RELAY_KILLS=${CHAOS_RELAY_KILLS:-20}
BROKER_OUTAGES=${CHAOS_BROKER_OUTAGES:-5}
LONG_OUTAGE_S=${CHAOS_LONG_OUTAGE_S:-35}
PG_CRASHES=${CHAOS_PG_CRASHES:-2}
LOST_SLOT=${CHAOS_LOST_SLOT:-1}
LEDGER_KILLS=${CHAOS_LEDGER_KILLS:-4}
WORK=${CHAOS_WORK:-/tmp/walrelay-chaos}
BUILD=${BUILD_ROOT:-build}/main
RATE=${CHAOS_RATE:-200}
MIN_IN_FLIGHT=${CHAOS_MIN_IN_FLIGHT:-1000}
LOSS_SHARE=${CHAOS_LOSS_SHARE:-0.5}
SMALL_TX=0
if [[ $EXPECT_LOSS == 1 ]]; then
  RELAY_KILLS=${CHAOS_RELAY_KILLS:-3}; BROKER_OUTAGES=3; PG_CRASHES=0; LOST_SLOT=0
  LEDGER_KILLS=0; EVENTS=${CHAOS_EVENTS:-20000}; SMALL_TX=1
fi
if [[ $EXACTLY_ONCE == 1 ]]; then LOST_SLOT=0; fi
if [[ $EXPECT_DUPS == 1 ]]; then
  RELAY_KILLS=${CHAOS_RELAY_KILLS:-6}; BROKER_OUTAGES=0; PG_CRASHES=0; LEDGER_KILLS=0
  BROKER_KILLS=0; BROKER_PAUSES=0; ROLLING_RESTARTS=0; EVENTS=${CHAOS_EVENTS:-5000}; STATUS_MS=3000
fi
(( RATE >= 2 )) || { echo "chaos.sh: CHAOS_RATE is at least 2 (payments per second)" >&2; exit 2; }
DURATION_S=${CHAOS_DURATION_S:-0}
WRITER=${CHAOS_WRITER:-psql}
NET_FAULTS=${CHAOS_NET_FAULTS:-0}
SAMPLE_S=${CHAOS_SAMPLE_S:-0}
if [[ $NET_FAULTS == 1 && $KAFKA != apache ]]; then
  echo "chaos.sh: CHAOS_NET_FAULTS needs CHAOS_KAFKA=apache (the brokers' PROXIED listeners)" >&2; exit 2
fi
if [[ $WRITER == pgbench ]] && (( DURATION_S == 0 )); then
  echo "chaos.sh: CHAOS_WRITER=pgbench needs CHAOS_DURATION_S (pgbench writes for a time)" >&2; exit 2
fi
if (( DURATION_S > 0 )); then
  (( DURATION_S >= 900 )) || { echo "chaos.sh: CHAOS_DURATION_S is at least 900" >&2; exit 2; }
  EVENTS=0 LOST_SLOT=0
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
SAMPLER_PID=""
BROKER_PID=""
cleanup() {
  set +e
  exec 2>/dev/null  # no "Killed" notices of the processes stopped here
  touch "$WORK/stop"
  for p in "${RELAY_PID[@]}" "${LEDGER_PID[@]}" "${WRITER_PIDS[@]}" $BROKER_PID $SAMPLER_PID; do
    kill -9 "$p" 2>/dev/null
  done
  wait 2>/dev/null
  [[ $KAFKA == apache ]] && bash "$ROOT/scripts/kafka.sh" stop --dir "$WORK/kafka" >/dev/null 2>&1
  [[ $NET_FAULTS == 1 ]] && bash "$ROOT/scripts/toxiproxy.sh" stop --dir "$WORK/toxiproxy" >/dev/null 2>&1
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
if (( DURATION_S > 0 )); then
  # The soak's schedule: the process faults early (so that the processes sampled over the
  # last three quarters of the run live through them), then one fault every 2.5-4 minutes.
  FIXED_GAP=${CHAOS_FAULT_GAP_S:-}  # a short trial of the schedule: every gap this long
  SCHEDULE=(kill-relay) GAPS=("${FIXED_GAP:-240}")
  [[ $KAFKA == apache ]] && { SCHEDULE+=("kill-broker:10"); GAPS+=("${FIXED_GAP:-120}"); }
  KINDS=(kill-ledger)
  [[ $KAFKA == apache ]] && KINDS+=("pause-broker:20")
  (( NET_FAULTS == 1 )) && KINDS=("net-pg-blackhole:60" "net-broker-blackhole:30" "net-slow:120" "net-reset:60")
  # CHAOS_SOAK_FAULTS: these kinds instead, in turn (e.g. one kind repeated all run long, to
  # see whether what a fault leaves behind plateaus).
  [[ -n ${CHAOS_SOAK_FAULTS:-} ]] && read -r -a KINDS <<<"$CHAOS_SOAK_FAULTS"
  t=0 k=0
  for g in "${GAPS[@]}"; do t=$(( t + g + 20 )); done
  while :; do
    gap=${FIXED_GAP:-$(( 150 + RANDOM % 90 ))} f=${KINDS[k % ${#KINDS[@]}]}
    d=${f#*:}; [[ $d == "$f" ]] && d=0
    (( t + gap + d + 30 <= DURATION_S - 300 )) || break
    SCHEDULE+=("$f"); GAPS+=("$gap"); t=$(( t + gap + d + 30 )); k=$(( k + 1 ))
  done
fi
# Fault i fires its seeded gap after fault i-1 ended, while the writers commit at RATE:
# every fault lands on a moving stream, whatever the machine's speed.
# librdkafka's mock keeps about 5 MB per partition and drops older records: enough
# partitions keep every record (~400 bytes each, duplicates included) for the verdict,
# sized for the larger of EVENTS and what RATE writes over the schedule's expected length.
EXPECTED_S=0
for i in "${!SCHEDULE[@]}"; do
  f=${SCHEDULE[i]}; d=${f#*:}; [[ $d == "$f" ]] && d=0
  case $f in
    kill-relay|kill-ledger) EXPECTED_S=$(( EXPECTED_S + GAPS[i] + 2 )) ;;
    crash-postgres) EXPECTED_S=$(( EXPECTED_S + GAPS[i] + 8 )) ;;
    lose-slot) EXPECTED_S=$(( EXPECTED_S + GAPS[i] + 40 )) ;;
    rolling-restart) EXPECTED_S=$(( EXPECTED_S + GAPS[i] + 90 )) ;;
    net-*) EXPECTED_S=$(( EXPECTED_S + GAPS[i] + d + 30 )) ;;
    *) EXPECTED_S=$(( EXPECTED_S + GAPS[i] + d + 10 )) ;;
  esac
done
SIZED=$(( RATE * EXPECTED_S * 3 / 2 )); (( SIZED > EVENTS )) || SIZED=$EVENTS
PARTITIONS=$(( SIZED * 3 * 400 / 4000000 + 12 ))
# Apache Kafka keeps every record whatever the partition count: the soak stays at 48.
(( DURATION_S > 0 && PARTITIONS > 48 )) && [[ $KAFKA == apache ]] && PARTITIONS=48
if (( DURATION_S > 0 )); then
  say "seed $SEED: writing for $DURATION_S s at $RATE $([[ $WRITER == pgbench ]] && echo transactions || echo payments)/s, $PARTITIONS partitions; schedule (each fault after its gap in s):"
else
  say "seed $SEED: $EVENTS events at least, writers at $RATE payments/s, $PARTITIONS partitions; schedule (~${EXPECTED_S} s; each fault after its gap in s):"
fi
for i in "${!SCHEDULE[@]}"; do printf '    %2d. +%ss %s\n' "$((i + 1))" "${GAPS[i]}" "${SCHEDULE[i]}"; done
[[ $EXPECT_LOSS == 1 ]] && say "CHAOS_EXPECT_LOSS=1: relays confirm before Kafka acknowledges (test failpoint); the verdict must report loss"
[[ $EXACTLY_ONCE == 1 ]] && say "CHAOS_EXACTLY_ONCE=1: relays in exactly-once mode; the verdict requires 0 duplicates and 0 torn transactions read_committed"
[[ $EXPECT_DUPS == 1 ]] && say "CHAOS_EXPECT_DUPLICATES=1: relays ignore the checkpoint (test failpoint); the verdict must report duplicates"

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
  # From the work directory with core dumps on: if the mock crashes, its core is kept there.
  (cd "$WORK" && ulimit -c unlimited 2>/dev/null; exec "$DEVBROKER" --brokers 3 \
    --topic "outbox.payment:$PARTITIONS" --bootstrap-file "$WORK/bootstrap") \
    <"$WORK/broker.ctl" >"$WORK/devbroker.log" 2>&1 &
  BROKER_PID=$!
  exec 7>"$WORK/broker.ctl"
  for _ in $(seq 200); do [[ -s $WORK/bootstrap ]] && break; sleep 0.05; done
fi
BOOT=$(sed -n 's/^bootstrap=//p' "$WORK/bootstrap")
[[ -n $BOOT ]] || { cat "$WORK/devbroker.log" "$WORK/kafka-start.log" >&2 2>/dev/null; exit 1; }

# The relays' paths (CHAOS_NET_FAULTS: through Toxiproxy, each its own proxy).
RELAY_DSN=$DSN RELAY_BOOT=$BOOT
if [[ $NET_FAULTS == 1 ]]; then
  bash "$ROOT/scripts/toxiproxy.sh" fetch
  TOXI=$(bash "$ROOT/scripts/toxiproxy.sh" start --dir "$WORK/toxiproxy" --owner $$ | sed -n 's/^api=//p' | tail -1)
  [[ -n $TOXI ]] || { echo "chaos.sh: Toxiproxy did not start" >&2; exit 1; }
  toxi() {  # method path [json]: the API's answer; fails on an HTTP error
    curl -sf -X "$1" "http://$TOXI$2" ${3:+-H 'Content-Type: application/json' -d "$3"}
  }
  pg_proxy=$(toxi POST /proxies "{\"name\":\"pg\",\"listen\":\"127.0.0.1:0\",\"upstream\":\"127.0.0.1:$PGPORT\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["listen"].rsplit(":",1)[1])')
  RELAY_DSN="host=127.0.0.1 port=$pg_proxy user=$PGUSER dbname=$PGDATABASE"
  PROXIES=(pg) RELAY_BOOT=""
  for spec in $(sed -n 's/^proxied=//p' "$WORK/bootstrap" | tr ',' ' '); do
    IFS=: read -r n listen upstream <<<"$spec"
    toxi POST /proxies "{\"name\":\"kafka-$n\",\"listen\":\"127.0.0.1:$listen\",\"upstream\":\"127.0.0.1:$upstream\"}" >/dev/null
    PROXIES+=("kafka-$n"); RELAY_BOOT+="${RELAY_BOOT:+,}127.0.0.1:$listen"
  done
  (( ${#PROXIES[@]} == 4 )) || { echo "chaos.sh: scripts/kafka.sh listed no PROXIED listeners" >&2; exit 1; }
  say "relays reach PostgreSQL and the brokers through Toxiproxy ($TOXI: ${PROXIES[*]})"
fi

EO_FLAGS=() EO_RUN=()
[[ $EXACTLY_ONCE == 1 ]] && EO_FLAGS=(--kafka-exactly-once true --kafka-bootstrap-servers "$BOOT") EO_RUN=(--kafka-exactly-once true)
"$WALRELAY" setup --create-tables --source-dsn "$DSN" "${EO_FLAGS[@]}" >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log" >&2; exit 1; }
q "CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     event_id uuid NOT NULL UNIQUE, wallet text NOT NULL, amount bigint NOT NULL,
     seq bigint NOT NULL, tableless boolean NOT NULL,
     xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint % 4294967296);
   CREATE TABLE wallet_seq (wallet text PRIMARY KEY, seq bigint NOT NULL);
   INSERT INTO wallet_seq SELECT 'wallet-' || g, 0 FROM generate_series(0, 199) g;
   CREATE TABLE chaos_log (at timestamptz DEFAULT clock_timestamp(), what text)"

# --- the processes ---------------------------------------------------------------------
# shellcheck source=lib/ports.sh
source "$ROOT/scripts/lib/ports.sh"
read -r -a METRICS_PORTS <<<"$(free_ports 2)"  # relay a, relay b: kept across restarts
metrics_port() { [[ $1 == a ]] && echo "${METRICS_PORTS[0]}" || echo "${METRICS_PORTS[1]}"; }
start_relay() {  # name (a|b)
  local port; port=$(metrics_port "$1")
  local env=()
  [[ $EXPECT_LOSS == 1 ]] && env=(env WALRELAY_RELAY_FAILPOINT=confirm_before_ack)
  [[ $EXPECT_DUPS == 1 ]] && env=(env WALRELAY_RELAY_FAILPOINT=ignore_checkpoint)
  "${env[@]}" "$WALRELAY" run --source-dsn "$RELAY_DSN" --kafka-bootstrap-servers "$RELAY_BOOT" "${EO_RUN[@]}" \
    --source-message-prefix walrelay.outbox --flow-status-interval-ms "$STATUS_MS" \
    --flow-standby-interval-ms 200 --flow-reconnect-max-ms 2000 --flow-max-in-flight-events 20000 \
    --ops-metrics-address "127.0.0.1:$port" >>"$WORK/relay-$1.log" 2>&1 &
  RELAY_PID[$1]=$!
  echo "$!" >"$WORK/relay-$1.pid"
}
metric() {  # relay name: prints the value of the unlabelled metric, or nothing
  local port; port=$(metrics_port "$1")
  { curl -s --max-time 1 "http://127.0.0.1:$port/metrics" 2>/dev/null || true; } |
    awk -v m="$2" '$1 == m && !seen { print $2; seen = 1 }'
}
streaming_relay() {  # prints the name of the relay that streams, or nothing
  local n
  for n in a b; do
    [[ $(metric "$n" walrelay_streaming) == 1 ]] && { echo "$n"; return; }
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
  echo "$!" >"$WORK/ledger-$1.pid"
}

payments() { q "SELECT count(*) FROM payments" 2>/dev/null || echo "?"; }

# A writer: transactions of 1-1000 payments (mostly small), wallets locked in ascending
# order (no deadlocks), per-wallet seq in commit order; a fifth table-less, one in twenty
# rolled back. Errors (a crashed server) are retried after a pause. Paced by time: it
# writes RATE / 2 payments per second on average (sleeping when ahead, never catching up
# more than 5 s of a stall at once), from the start until the stop file appears.
writer() {  # id
  local w=$1 n r tx
  RANDOM=$(( SEED + w ))
  local per_s=$(( RATE / 2 )) written=0 start_ms now_ms ahead_ms
  start_ms=$(( $(date +%s%N) / 1000000 ))
  while [[ ! -f $WORK/stop ]]; do
    now_ms=$(( $(date +%s%N) / 1000000 ))
    ahead_ms=$(( written * 1000 / per_s - (now_ms - start_ms) ))
    if (( ahead_ms > 0 )); then
      sleep "$(( ahead_ms / 1000 )).$(printf '%03d' $(( ahead_ms % 1000 )))"
    elif (( ahead_ms < -5000 )); then
      written=$(( (now_ms - start_ms - 5000) * per_s / 1000 ))
    fi
    r=$(( RANDOM % 100 ))
    if (( r < 70 || SMALL_TX )); then n=$(( 1 + RANDOM % 10 )); elif (( r < 95 )); then n=$(( 10 + RANDOM % 90 )); else n=$(( 100 + RANDOM % 901 )); fi
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
    if PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" \
        -c "$tx" >/dev/null 2>>"$WORK/writer-$w.err"; then
      written=$(( written + n ))
    else
      sleep 0.5
    fi
  done
}

start_relay a
wait_streaming 60 || { tail -20 "$WORK/relay-a.log" >&2; exit 1; }
start_relay b
start_ledger 1
start_ledger 2
if [[ $WRITER == pgbench ]]; then
  # One payment per transaction at a steady RATE transactions per second (pgbench -R): the
  # same rows, events, table-less share and rollbacks as writer() above.
  cat >"$WORK/writer.sql" <<'SQL'
\set w random(0, 199)
\set r random(1, 100)
\set a random(1, 1000)
BEGIN;
\if :r <= 20
WITH s AS (UPDATE wallet_seq SET seq = seq + 1 WHERE wallet = 'wallet-' || :w RETURNING wallet, seq),
p AS (INSERT INTO payments (event_id, wallet, amount, seq, tableless)
      SELECT gen_random_uuid(), wallet, :a, seq, true FROM s RETURNING event_id, wallet, amount, seq)
SELECT pg_logical_emit_message(true, 'walrelay.outbox', jsonb_build_object(
  'event_id', event_id, 'aggregate_type', 'payment', 'aggregate_id', wallet, 'event_type', 'PaymentCaptured',
  'payload', jsonb_build_object('wallet', wallet, 'amount', amount, 'seq', seq))::text) FROM p;
\else
WITH s AS (UPDATE wallet_seq SET seq = seq + 1 WHERE wallet = 'wallet-' || :w RETURNING wallet, seq),
p AS (INSERT INTO payments (event_id, wallet, amount, seq, tableless)
      SELECT gen_random_uuid(), wallet, :a, seq, false FROM s RETURNING event_id, wallet, amount, seq)
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
SELECT event_id, 'payment', wallet, 'PaymentCaptured', jsonb_build_object('wallet', wallet, 'amount', amount, 'seq', seq) FROM p;
\endif
\if :r > 95
ROLLBACK;
\else
COMMIT;
\endif
SQL
  PGOPTIONS="-c client_min_messages=warning" "${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin}/pgbench" \
    -n -c 8 -j 2 -R "$RATE" -T "$DURATION_S" --max-tries=10 -P 60 -f "$WORK/writer.sql" \
    >"$WORK/pgbench.log" 2>&1 &
  WRITER_PIDS+=($!)
else
  writer 1 & WRITER_PIDS+=($!)
  writer 2 & WRITER_PIDS+=($!)
fi
if [[ $WRITER == pgbench ]]; then
  say "running: relays a and b, ledgers 1 and 2, pgbench at $RATE transactions/s (logs in $WORK)"
else
  say "running: relays a and b, ledgers 1 and 2, writers 1 and 2 (logs in $WORK)"
fi

# The evidence of each fault, one line each: "<fault> executed <evidence>" or
# "<fault> FAILED <why>"; the verdict counts them against the schedule.
executed() { echo "$1 executed ${*:2}" >>"$WORK/faults.log"; say "    $1: ${*:2}"; }
not_executed() { echo "$1 FAILED ${*:2}" >>"$WORK/faults.log"; say "    FAULT NOT EXECUTED: $1: ${*:2}"; }
gone() {  # pid: no such process, or a zombie (a killed JVM not yet reaped)
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [[ -z $st || $st == Z || $st == X ]]
}

# A relay or ledger that exited although no fault stopped it fails the run (its log tail
# is printed); it is restarted so that the run still reaches a verdict.
exited_on_its_own() {  # kind name pid: true (and reported) when the process has exited
  local code=0
  kill -0 "$3" 2>/dev/null && return 1
  wait "$3" 2>/dev/null || code=$?
  echo "$1 $2 (pid $3) exited on its own with code $code" >>"$WORK/unexpected.log"
  say "UNEXPECTED: $1 $2 exited on its own (code $code); its log ends:"
  tail -n 15 "$WORK/$1-$2.log" | sed 's/^/      /'
}
# The dev broker is librdkafka's mock cluster, a test double that keeps every record in
# memory: when it dies, what was published dies with it and no verdict about walrelay can
# be reached. The run is void (exit 3, its log and any core kept), not failed; the mock's
# own assertion says why (seen once in CI, 2026-12-07, librdkafka 2.0.2: an abort during
# relay and ledger kills, its message lost because nothing printed the broker's log).
broker_alive() {
  [[ $KAFKA == dev && -n $BROKER_PID ]] || return 0
  kill -0 "$BROKER_PID" 2>/dev/null && return 0
  local code=0
  wait "$BROKER_PID" 2>/dev/null || code=$?
  BROKER_PID=""
  say "VOID: the dev broker (walrelay-devbroker, librdkafka's in-memory mock cluster) exited with code $code ($( (( code > 128 )) && kill -l $(( code - 128 )) 2>/dev/null || echo "no signal")) during the run: every record it held is gone, so nothing about walrelay can be judged. Its log ends:"
  { grep -vE '^(ok|error:|bootstrap=)' "$WORK/devbroker.log" || echo "(nothing but answers)"; } |
    tail -n 20 | sed 's/^/      /'
  local core
  for core in "$WORK"/core*; do
    [[ -e $core ]] || continue
    say "its core dump: $core"
    if command -v gdb >/dev/null; then
      { gdb -batch -ex 'thread apply all bt 12' "$DEVBROKER" "$core" 2>/dev/null || true; } |
        { grep -E '^(Thread|#)' || true; } | head -n 60 | sed 's/^/      /'
    fi
  done
  echo "  VOID: a test double crashed, not walrelay (logs kept in $WORK; CHAOS_SEED=$SEED replays the schedule)"
  KEEP=1
  exit 3
}
check_alive() {
  local n
  broker_alive
  for n in a b; do
    if exited_on_its_own relay "$n" "${RELAY_PID[$n]}"; then start_relay "$n"; fi
  done
  for n in "${!LEDGER_PID[@]}"; do
    if exited_on_its_own ledger "$n" "${LEDGER_PID[$n]}"; then start_ledger "$n"; fi
  done
}

# kill -9 of the streaming relay once it has events in flight (the stream is moving: up to
# 30 s for the writers' next events), the standby takes over, the killed one restarts as
# the new standby. Evidence: its events in flight, received and confirmed positions just
# before the kill, and its pid gone.
kill_relay() {  # fault name
  local n fault=${1:-kill-relay} in_flight="" pid
  wait_streaming 60 || true
  n=$(streaming_relay)
  [[ -n $n ]] || { not_executed "$fault" "no relay streamed within 60 s"; return; }
  for _ in $(seq 600); do
    in_flight=$(metric "$n" walrelay_in_flight_events)
    [[ $in_flight =~ ^[0-9]+$ ]] && (( in_flight > 0 )) && break
    sleep 0.05
  done
  local received flushed
  received=$(metric "$n" walrelay_received_lsn)
  flushed=$(metric "$n" walrelay_flush_lsn)
  pid=${RELAY_PID[$n]}
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # The standby takes over before the killed one comes back (a fresh process would
  # otherwise often win the slot first, and take-overs would go untested).
  local other=b took="no take-over within 30 s"
  [[ $n == b ]] && other=a
  local t0=$(( $(date +%s%N) / 1000000 ))
  for _ in $(seq 300); do
    if [[ $(metric "$other" walrelay_streaming) == 1 ]]; then
      took="relay $other took over in $(( $(date +%s%N) / 1000000 - t0 )) ms"
      break
    fi
    sleep 0.1
  done
  start_relay "$n"
  if ! [[ $in_flight =~ ^[0-9]+$ ]] || (( in_flight == 0 )); then
    not_executed "$fault" "relay $n had no events in flight for 30 s (the stream was not moving; in flight: '${in_flight}')"
  elif ! gone "$pid"; then
    not_executed "$fault" "relay $n (pid $pid) still runs after kill -9"
  else
    executed "$fault" "relay=$n pid=$pid in_flight=$in_flight received_lsn=${received:-?} flush_lsn=${flushed:-?} (killed; $took; restarted as the standby)"
  fi
}

# Apache Kafka: whether every partition of the topic has a leader and all three replicas
# in sync (kcat's metadata).
full_isr() {
  kcat -b "$BOOT" -L -t outbox.payment 2>/dev/null |
    awk '/partition [0-9]+, leader/ { n++; if ($4 == "-1," || $NF !~ /^[0-9]+,[0-9]+,[0-9]+$/) bad++ }
         END { exit !(n > 0 && bad == 0) }'
}
wait_full_isr() { for _ in $(seq 300); do full_isr && return 0; sleep 0.5; done; say "ISR not full after 150 s"; return 1; }
broker_pid() { cat "$WORK/kafka/broker-$1/pid" 2>/dev/null; }
# The dev broker answers each command on its stdout ("ok" or "error: ..."): send one and
# print its answer (the answer after those already in its log).
dev_command() {  # command
  local before a
  # A write to the pipe of a dead broker would end this script with SIGPIPE, unexplained.
  kill -0 "$BROKER_PID" 2>/dev/null || { echo "no answer (the dev broker is gone)"; return; }
  before=$(grep -cE '^(ok|error:)' "$WORK/devbroker.log" || true)
  echo "$1" >&7
  for _ in $(seq 100); do
    a=$(grep -E '^(ok|error:)' "$WORK/devbroker.log" | sed -n "$(( before + 1 ))p")
    [[ -n $a ]] && { echo "$a"; return; }
    sleep 0.05
  done
  echo "no answer"
}
kafka_down() {  # every broker; prints the evidence ("" when it did not happen)
  if [[ $KAFKA == apache ]]; then
    local b p gone_pids=()
    for b in 1 2 3; do
      p=$(broker_pid "$b")
      "${KSH[@]}" kill-broker --dir "$WORK/kafka" "$b"
      [[ -n $p ]] && gone "$p" && gone_pids+=("$b:$p")
    done
    (( ${#gone_pids[@]} == 3 )) && echo "broker processes gone (broker:pid ${gone_pids[*]})"
  else
    local a
    a=$(dev_command "down all")
    broker_alive
    [[ $a == ok ]] && echo "the dev broker took every broker down (answered ok)"
  fi
}
kafka_up() {
  if [[ $KAFKA == apache ]]; then
    local b; for b in 1 2 3; do "${KSH[@]}" start-broker --dir "$WORK/kafka" "$b"; done
  else
    local a
    a=$(dev_command "up all")
    broker_alive
    [[ $a == ok ]] || say "dev broker: 'up all' answered '$a'"
  fi
}
kill_broker() {  # seconds down
  local b=$(( 1 + RANDOM % 3 )) p
  p=$(broker_pid "$b")
  "${KSH[@]}" kill-broker --dir "$WORK/kafka" "$b"
  if [[ -n $p ]] && gone "$p"; then
    executed "kill-broker" "broker $b (pid $p) gone; restarting it in $1 s"
  else
    not_executed "kill-broker" "broker $b (pid '${p}') not gone after kill -9"
  fi
  sleep "$1"
  "${KSH[@]}" start-broker --dir "$WORK/kafka" "$b"
  wait_full_isr || not_executed "kill-broker" "broker $b not back in sync after 150 s"
}
pause_broker() {  # seconds paused
  local b=$(( 1 + RANDOM % 3 )) p state
  p=$(broker_pid "$b")
  "${KSH[@]}" pause-broker --dir "$WORK/kafka" "$b"
  for _ in $(seq 100); do  # the stop reaches every thread of the JVM in a moment
    state=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
    [[ $state == T ]] && break
    sleep 0.05
  done
  if [[ $state == T ]]; then
    executed "pause-broker" "broker $b (pid $p) stopped (state T) for $1 s"
  else
    not_executed "pause-broker" "broker $b (pid '${p}') in state '${state}' after SIGSTOP"
  fi
  sleep "$1"
  "${KSH[@]}" resume-broker --dir "$WORK/kafka" "$b"
  wait_full_isr || not_executed "pause-broker" "broker $b not back in sync after 150 s"
}
rolling_restart() {  # each broker in turn: stopped (SIGTERM), started, back in sync
  local b p restarted=()
  say "rolling restart of brokers 1, 2, 3"
  for b in 1 2 3; do
    p=$(broker_pid "$b")
    "${KSH[@]}" stop-broker --dir "$WORK/kafka" "$b"
    [[ -n $p ]] && gone "$p" && restarted+=("$b:$p")
    "${KSH[@]}" start-broker --dir "$WORK/kafka" "$b"
    wait_full_isr || { not_executed "rolling-restart" "broker $b not back in sync after 150 s"; return; }
  done
  if (( ${#restarted[@]} == 3 )); then
    executed "rolling-restart" "each broker stopped and back in sync (broker:old pid ${restarted[*]})"
  else
    not_executed "rolling-restart" "only ${restarted[*]:-none} stopped"
  fi
}

outage() {  # fault seconds [kill the streaming relay in the middle]
  local evidence
  evidence=$(kafka_down)
  if [[ -n $evidence ]]; then
    executed "$1" "$evidence; for $2 s"
  else
    not_executed "$1" "the brokers did not go down"
  fi
  if [[ ${3:-} == kill ]]; then
    sleep $(( $2 / 2 )); kill_relay "$1/kill-relay"; sleep $(( $2 - $2 / 2 ))
  else
    sleep "$2"
  fi
  kafka_up
}

postmaster_pid() { head -1 "$WORK/pg/data/postmaster.pid" 2>/dev/null; }
crash_postgres() {
  local bindir=${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin} user="" before after
  before=$(postmaster_pid)
  [[ $(id -u) == 0 ]] && user=$(stat -c %U "$WORK/pg/data")
  if [[ -n $user ]]; then runuser -u "$user" -- "$bindir/pg_ctl" -D "$WORK/pg/data" -m immediate -w stop >/dev/null
  else "$bindir/pg_ctl" -D "$WORK/pg/data" -m immediate -w stop >/dev/null; fi
  local stopped=no
  [[ -n $before ]] && gone "$before" && stopped=yes
  sleep 2
  pg_start
  after=$(postmaster_pid)
  if [[ $stopped == yes && -n $after && $after != "$before" ]]; then
    executed "crash-postgres" "pg_ctl stop -m immediate: postmaster $before gone, $after started"
  else
    not_executed "crash-postgres" "postmaster before '$before' (gone: $stopped), after '$after'"
  fi
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
  start_relay a
  start_relay b
  if [[ $status == lost ]]; then
    executed "lose-slot" "wal_status = lost; relays restarted (the first recovers it)"
  else
    not_executed "lose-slot" "wal_status = '$status' after 30 rounds of WAL (not lost)"
  fi
  wait_streaming 300 || not_executed "lose-slot" "no relay streams 300 s after the lost slot (see the relay logs)"
  rm -f "$WORK/no_messages"
}

kill_ledger() {
  local n=$(( 1 + RANDOM % 2 )) pid
  pid=${LEDGER_PID[$n]}
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  start_ledger "$n"
  if gone "$pid"; then executed "kill-ledger" "ledger $n (pid $pid) gone; restarted"
  else not_executed "kill-ledger" "ledger $n (pid $pid) still runs after kill -9"; fi
}

# Network faults (CHAOS_NET_FAULTS): toxics on the relays' proxies. Evidence: the toxics
# the server lists while they are in place, and for the PostgreSQL black hole that no
# relay streamed during it (the relays noticed).
toxics_on() {  # proxy: the names of its toxics now
  toxi GET "/proxies/$1/toxics" | python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)))'
}
add_toxic() {  # proxy name type stream attributes-json
  toxi POST "/proxies/$1/toxics" "{\"name\":\"$2\",\"type\":\"$3\",\"stream\":\"$4\",\"attributes\":$5}" >/dev/null
}
black_hole() {  # proxy
  add_toxic "$1" hole_down timeout downstream '{"timeout":0}'
  add_toxic "$1" hole_up timeout upstream '{"timeout":0}'
}
heal() {  # proxy
  local t
  for t in $(toxics_on "$1"); do toxi DELETE "/proxies/$1/toxics/$t" >/dev/null; done
}
net_pg_blackhole() {  # seconds
  black_hole pg
  local listed noticed=no t0 ; listed=$(toxics_on pg)
  t0=$(date +%s)
  while (( $(date +%s) - t0 < $1 )); do
    [[ -z $(streaming_relay) ]] && noticed=yes
    sleep 1
  done
  heal pg
  if [[ $listed == *hole_down* && $listed == *hole_up* && $noticed == yes ]]; then
    executed "net-pg-blackhole" "toxics [$listed] on the relays' path to PostgreSQL for $1 s; no relay streamed during it (noticed)"
  else
    not_executed "net-pg-blackhole" "toxics [$listed], a relay streamed throughout: $noticed"
  fi
  wait_streaming 120 || not_executed "net-pg-blackhole" "no relay streams 120 s after the path came back"
}
net_broker_blackhole() {  # seconds
  local b=$(( 1 + RANDOM % 3 )) listed
  black_hole "kafka-$b"
  listed=$(toxics_on "kafka-$b")
  sleep "$1"
  heal "kafka-$b"
  if [[ $listed == *hole_down* && $listed == *hole_up* ]]; then
    executed "net-broker-blackhole" "toxics [$listed] on the relays' path to broker $b for $1 s"
  else
    not_executed "net-broker-blackhole" "toxics [$listed] on kafka-$b"
  fi
}
net_slow() {  # seconds
  local p listed=""
  for p in "${PROXIES[@]}"; do
    add_toxic "$p" slow latency downstream '{"latency":200,"jitter":50}'
    add_toxic "$p" chop slicer downstream '{"average_size":256,"size_variation":128,"delay":0}'
    listed+="$p:[$(toxics_on "$p")] "
  done
  sleep "$1"
  for p in "${PROXIES[@]}"; do heal "$p"; done
  if [[ $(grep -o 'slow' <<<"$listed" | wc -l) == "${#PROXIES[@]}" ]]; then
    executed "net-slow" "200 +- 50 ms and sliced streams on every path for $1 s: ${listed% }"
  else
    not_executed "net-slow" "toxics ${listed% }"
  fi
}
net_reset() {  # seconds: every path reset every 5 s
  local p t0 resets=0
  t0=$(date +%s)
  while (( $(date +%s) - t0 < $1 )); do
    for p in "${PROXIES[@]}"; do add_toxic "$p" reset reset_peer downstream '{"timeout":0}'; done
    sleep 0.5
    for p in "${PROXIES[@]}"; do heal "$p"; done
    resets=$(( resets + 1 ))
    sleep 4.5
  done
  if (( resets > 0 )); then
    executed "net-reset" "every path reset $resets times over $1 s"
  else
    not_executed "net-reset" "no reset made"
  fi
}

# CHAOS_SAMPLE_S: each relay's and ledger's resources, from /proc and the relay's metrics.
# The C heap in use and retained (base/process_snapshot.h: a leak grows the first, the
# allocator's high-water mark the second): a relay's from its metrics, a ledger's from the
# last stats line it printed (every 5 s).
sampler() {
  local name pid rss fds threads ticks published role heap retained stats
  echo -e "epoch\tprocess\tpid\trss_kb\tfds\tthreads\tcpu_ticks\tpublished\trole\theap_kb\tretained_kb" >"$WORK/samples.tsv"
  while [[ ! -f $WORK/stop ]]; do
    for name in relay-a relay-b ledger-1 ledger-2; do
      pid=$(cat "$WORK/$name.pid" 2>/dev/null) || continue
      rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || continue
      [[ -n $rss ]] || continue
      threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
      fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null)
      published="" role=consumer
      if [[ $name == relay-* ]]; then
        published=$(metric "${name#relay-}" walrelay_events_published_total)
        role=other
        [[ $(metric "${name#relay-}" walrelay_streaming) == 1 ]] && role=streaming
        [[ $(metric "${name#relay-}" walrelay_standby) == 1 ]] && role=standby
        heap=$(metric "${name#relay-}" walrelay_heap_in_use_bytes)
        retained=$(metric "${name#relay-}" walrelay_heap_retained_bytes)
      else
        stats=$(grep '^stats ' "$WORK/$name.log" 2>/dev/null | tail -n 1) || true
        heap=$(sed -n 's/.* heap_in_use_bytes=\([0-9]*\).*/\1/p' <<<"$stats")
        retained=$(sed -n 's/.* heap_retained_bytes=\([0-9]*\).*/\1/p' <<<"$stats")
      fi
      heap=$(awk -v b="$heap" 'BEGIN { if (b != "") printf "%d", b / 1024 }')
      retained=$(awk -v b="$retained" 'BEGIN { if (b != "") printf "%d", b / 1024 }')
      echo -e "$(date +%s)\t$name\t$pid\t$rss\t$fds\t$threads\t$ticks\t$published\t$role\t$heap\t$retained" >>"$WORK/samples.tsv"
    done
    sleep "$SAMPLE_S"
  done
}
(( SAMPLE_S > 0 )) && { sampler & SAMPLER_PID=$!; }

# --- the run -----------------------------------------------------------------------------
wait_committed() {  # until at least $1 payments are committed
  local c
  while :; do
    c=$(payments)
    [[ $c =~ ^[0-9]+$ ]] && (( c >= $1 )) && return
    check_alive
    sleep 0.5
  done
}
: >"$WORK/faults.log"
: >"$WORK/unexpected.log"
T0=$(date +%s)
for i in "${!SCHEDULE[@]}"; do
  sleep "${GAPS[i]}"
  say "$((i + 1)). ${SCHEDULE[i]} ($(payments) payments committed)"
  case ${SCHEDULE[i]} in
    kill-relay) kill_relay ;;
    outage:*) outage outage "${SCHEDULE[i]#outage:}" ;;
    outage-kill:*) outage outage-kill "${SCHEDULE[i]#outage-kill:}" kill ;;
    crash-postgres) crash_postgres ;;
    lose-slot) lose_slot ;;
    kill-ledger) kill_ledger ;;
    kill-broker:*) kill_broker "${SCHEDULE[i]#kill-broker:}" ;;
    pause-broker:*) pause_broker "${SCHEDULE[i]#pause-broker:}" ;;
    rolling-restart) rolling_restart ;;
    net-pg-blackhole:*) net_pg_blackhole "${SCHEDULE[i]#*:}" ;;
    net-broker-blackhole:*) net_broker_blackhole "${SCHEDULE[i]#*:}" ;;
    net-slow:*) net_slow "${SCHEDULE[i]#*:}" ;;
    net-reset:*) net_reset "${SCHEDULE[i]#*:}" ;;
  esac
  check_alive
done
if (( DURATION_S > 0 )); then
  say "schedule done ($(payments) payments committed); writing until ${DURATION_S} s have passed"
  while (( $(date +%s) - T0 < DURATION_S )); do check_alive; sleep 5; done
else
  say "schedule done ($(payments) payments committed); writing until $EVENTS payments are committed"
  wait_committed "$EVENTS"
fi
touch "$WORK/stop"
wait "${WRITER_PIDS[@]}" 2>/dev/null || true
WRITE_END=$(date +%s)
TOTAL=$(payments)
say "$TOTAL payments committed; draining"

# --- drain: the slot confirmed past the end, the ledger applied everything (or stalled) --
END_LSN=$(q "SELECT pg_current_wal_lsn()")
for _ in $(seq 1200); do
  [[ $(q "SELECT coalesce((SELECT confirmed_flush_lsn >= '$END_LSN' FROM pg_replication_slots WHERE slot_name = 'walrelay'), false)") == t ]] && break
  check_alive
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
broker_alive
kcat_rc=0
kcat -C -b "$BOOT" -X isolation.level=read_committed -t outbox.payment -o beginning -e -q -f '%p\t%o\t%k\t%h\t%s\n' >"$WORK/records.tsv" 2>"$WORK/kcat.err" || kcat_rc=$?
# What the partitions' logs hold besides: records of aborted Kafka transactions (exactly-once).
IN_LOG=$(kcat -C -b "$BOOT" -X isolation.level=read_uncommitted -t outbox.payment -o beginning -e -q -f 'x\n' 2>>"$WORK/kcat.err" | wc -l) || kcat_rc=$?
awk -F'\t' '{
  eid = ""; xid = ""; n = split($4, hs, ",");
  for (i = 1; i <= n; i++) {
    if (hs[i] ~ /^event_id=/) eid = substr(hs[i], 10);
    if (hs[i] ~ /^walrelay.position=/ && match(hs[i], /xid=[0-9]+/)) xid = substr(hs[i], RSTART + 4, RLENGTH - 4);
  }
  seq = ""; if (match($5, /"seq": ?[0-9]+/)) { s = substr($5, RSTART, RLENGTH); sub(/.*: ?/, "", s); seq = s }
  print $1 "\t" $2 "\t" $3 "\t" eid "\t" seq "\t" xid
}' "$WORK/records.tsv" >"$WORK/records.clean"
q "CREATE TABLE kafka_records (part int, off bigint, key text, event_id text, seq bigint, xid bigint)"
PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" \
  -c "\\copy kafka_records FROM '$WORK/records.clean' WITH (FORMAT text, NULL '')"
# Records without an event id or a seq cannot be judged: counted apart, and they fail the
# run (the checks below would otherwise pass over them).
VERDICT=$(q "
  WITH parsed AS (SELECT * FROM kafka_records WHERE event_id IS NOT NULL AND seq IS NOT NULL),
  first AS (SELECT DISTINCT ON (event_id) * FROM parsed ORDER BY event_id, part, off),
  kafka_lost AS (SELECT count(*) n FROM payments p WHERE NOT EXISTS (SELECT 1 FROM first f WHERE f.event_id = p.event_id::text)),
  phantom AS (SELECT count(*) n FROM first f WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.event_id::text = f.event_id)),
  disorder AS (SELECT count(*) n FROM (SELECT seq < lag(seq) OVER (PARTITION BY part, key ORDER BY off) bad FROM first) x WHERE bad),
  ledger_lost AS (SELECT count(*) n FROM payments p WHERE NOT EXISTS (SELECT 1 FROM wallet_credit c WHERE c.event_id = p.event_id::text)),
  twice AS (SELECT count(*) n FROM (SELECT event_id FROM wallet_credit GROUP BY 1 HAVING count(*) > 1) x),
  balance AS (SELECT count(*) n FROM (SELECT wallet, sum(amount) s FROM payments GROUP BY 1) p
              FULL JOIN wallet w ON w.id = p.wallet WHERE w.balance IS DISTINCT FROM p.s),
  ledger_disorder AS (SELECT count(*) n FROM (SELECT seq < lag(seq) OVER (PARTITION BY wallet ORDER BY applied_order) bad FROM wallet_credit) x WHERE bad),
  torn AS (SELECT count(*) n FROM (SELECT p.xid, count(*) total, count(f.event_id) seen FROM payments p
           LEFT JOIN first f ON f.event_id = p.event_id::text GROUP BY p.xid) x WHERE seen > 0 AND seen < total)
  SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM payments WHERE tableless),
         kafka_lost.n, phantom.n, disorder.n, (SELECT count(*) FROM parsed) - (SELECT count(*) FROM first),
         ledger_lost.n, twice.n, balance.n, ledger_disorder.n,
         (SELECT count(*) FROM kafka_records) - (SELECT count(*) FROM parsed), (SELECT count(*) FROM kafka_records),
         torn.n
  FROM kafka_lost, phantom, disorder, ledger_lost, twice, balance, ledger_disorder, torn" | tr '|' ' ')
read -r TOTAL TABLELESS KLOST PHANTOM DISORDER DUPS LLOST TWICE BALANCE LDISORDER UNPARSABLE RECORDS TORN <<<"$VERDICT"
ABORTED=$(( IN_LOG - RECORDS ))
RECOVERED=$(cat "$WORK"/relay-*.log | grep -c "recovery of slot walrelay done" || true)
TAKEOVERS=$(grep -c "took over in" "$WORK/faults.log" || true)
ELAPSED=$(( $(date +%s) - T0 ))

# Faults: each scheduled kind against what executed with its evidence (faults.log).
declare -A SCHEDULED=() EXECUTED=()
for f in "${SCHEDULE[@]}"; do k=${f%%:*}; SCHEDULED[$k]=$(( ${SCHEDULED[$k]:-0} + 1 )); done
[[ $EXPECT_LOSS == 1 ]] && SCHEDULED[outage-kill/kill-relay]=${SCHEDULED[outage-kill]:-0}
while read -r k word _; do
  [[ $word == executed ]] && EXECUTED[$k]=$(( ${EXECUTED[$k]:-0} + 1 ))
done <"$WORK/faults.log"
FAULTS_LINE="" FAULTS_OK=1
for k in $(printf '%s\n' "${!SCHEDULED[@]}" | sort); do
  FAULTS_LINE+=" $k ${EXECUTED[$k]:-0}/${SCHEDULED[$k]},"
  (( ${EXECUTED[$k]:-0} == SCHEDULED[$k] )) || FAULTS_OK=0
done
NOT_EXECUTED=$(grep -c ' FAILED ' "$WORK/faults.log" || true)
UNEXPECTED=$(grep -c . "$WORK/unexpected.log" || true)

echo
echo "chaos verdict (seed $SEED, Kafka: $KAFKA, ${ELAPSED} s, writing $(( WRITE_END - T0 )) s at $RATE payments/s):"
echo "  $TOTAL payments committed ($TABLELESS table-less), $RECORDS records in Kafka; $TAKEOVERS standby take-overs, $RECOVERED slot recoveries"
[[ $WRITER == pgbench ]] && echo "  pgbench: $(grep -E '^(number of transactions actually processed|number of failed transactions|tps = )' "$WORK/pgbench.log" | tr '\n' ';' | sed 's/;$//')"
echo "  faults executed/scheduled (evidence in $WORK/faults.log):${FAULTS_LINE%,}; $NOT_EXECUTED not executed; $UNEXPECTED unexpected exits of a relay or ledger"
echo "  Kafka:  $KLOST lost, $PHANTOM phantom (rolled back or unknown), $DISORDER out of order per wallet, $DUPS duplicates, $UNPARSABLE unparsable records (read_committed)"
[[ $EXACTLY_ONCE == 1 ]] && echo "  exactly-once: $DUPS duplicates, $TORN torn source transactions; $ABORTED records of aborted Kafka transactions in the partitions' logs (never read by read_committed)"
echo "  ledger: $LLOST lost, $TWICE applied twice, $BALANCE wallet balances off, $LDISORDER applied out of order"
# The second witness: walrelay audit (src/audit/) reconciles the topic with the outbox table
# without the relay's bookkeeping or this script's checker. Its findings must be this
# verdict's, id for id: the rows this checker found lost (table-less events have no row,
# so the audit cannot see those), the same copies beyond the first, and nothing else.
AUDIT_RC=0
"$WALRELAY" audit --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOT" --topic outbox.payment \
  --since 1d --grace 0s --samples 1000000 --json >"$WORK/audit.json" 2>"$WORK/audit.log" || AUDIT_RC=$?
q "SELECT p.event_id::text FROM payments p WHERE NOT p.tableless AND NOT EXISTS
     (SELECT 1 FROM kafka_records k WHERE k.event_id = p.event_id::text) ORDER BY 1" >"$WORK/lost-rows.expected"
AUDIT_LINE=$(python3 - "$WORK/audit.json" "$WORK/audit.lost" <<'PY' 2>&1
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"unreadable ({e})"); sys.exit(0)
open(sys.argv[2], "w").write("".join(i + "\n" for i in sorted(r["missing"]["samples"])))
c = lambda k: r[k]["count"]
print(f"{r['reference_rows']} rows, {r['delivered_rows']} in Kafka; {c('missing')} missing, "
      f"{c('phantom')} phantom, {c('out_of_order')} out of order, {c('torn')} torn, "
      f"{r['duplicate_copies']} duplicate copies")
PY
)
AUDIT_DUPS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["duplicate_copies"])' "$WORK/audit.json" 2>/dev/null || echo "?")
AUDIT_AGREES=1
if ! cmp -s "$WORK/lost-rows.expected" "$WORK/audit.lost" 2>/dev/null; then AUDIT_AGREES=0; fi
[[ $AUDIT_DUPS == "$DUPS" ]] || AUDIT_AGREES=0
echo "  walrelay audit (exit $AUDIT_RC): $AUDIT_LINE; $( ((AUDIT_AGREES)) && echo "agrees with this verdict id for id" || echo "DISAGREES with this verdict: lost rows $WORK/lost-rows.expected vs $WORK/audit.lost, duplicate copies $DUPS vs $AUDIT_DUPS")"

FAILED=0
WHY=()
int() { [[ $1 =~ ^[0-9]+$ ]]; }
(( AUDIT_AGREES == 1 )) || { FAILED=1; WHY+=("walrelay audit disagrees with the verdict (see its line)"); }
if (( AUDIT_RC == 0 )); then
  [[ -s $WORK/lost-rows.expected ]] && { FAILED=1; WHY+=("walrelay audit said clean although rows were lost"); }
elif (( AUDIT_RC == 1 )); then
  [[ -s $WORK/lost-rows.expected ]] || { FAILED=1; WHY+=("walrelay audit reported findings on a run that lost nothing: a false alarm ($(tail -c 300 "$WORK/audit.json"))"); }
else
  FAILED=1; WHY+=("walrelay audit failed (exit $AUDIT_RC): $(tail -n 3 "$WORK/audit.log")")
fi
for v in TOTAL KLOST PHANTOM DISORDER DUPS LLOST TWICE BALANCE LDISORDER UNPARSABLE RECORDS TORN; do
  int "${!v}" || { FAILED=1; WHY+=("the verdict query gave no number for $v ('${!v}')"); }
done
(( kcat_rc == 0 )) || { FAILED=1; WHY+=("kcat failed ($kcat_rc): $(tail -c 300 "$WORK/kcat.err")"); }
if (( FAILED == 0 )); then
  (( TOTAL > 0 && RECORDS > 0 )) || { FAILED=1; WHY+=("nothing was committed or published"); }
  (( UNPARSABLE == 0 )) || { FAILED=1; WHY+=("$UNPARSABLE records without an event_id or a seq"); }
fi
(( FAULTS_OK == 1 && NOT_EXECUTED == 0 )) || { FAILED=1; WHY+=("not every scheduled fault executed"); }
(( UNEXPECTED == 0 )) || { FAILED=1; WHY+=("a relay or ledger exited on its own: $(tr '\n' ';' <"$WORK/unexpected.log")"); }

if [[ $EXPECT_LOSS == 1 ]]; then
  # What the failpoint predicts (see the header): the events in flight at the kills during
  # the outages, less those read in the last status interval before each kill.
  read -r IN_FLIGHT_OUTAGES IN_FLIGHT_ALL BEYOND_TAIL < <(awk -v tail=$(( 10 + RATE / 5 )) '$2 == "executed" {
      for (i = 3; i <= NF; i++) if ($i ~ /^in_flight=/) {
        n = substr($i, 11); all += n
        if ($1 ~ /^outage-kill/) { out += n; if (n > tail) beyond += n - tail }
      }
    } END { print out + 0, all + 0, beyond + 0 }' "$WORK/faults.log")
  LOW=$(awk -v n="$BEYOND_TAIL" -v s="$LOSS_SHARE" 'BEGIN { printf "%d", n * s }')
  HIGH=$(( IN_FLIGHT_ALL + 2 * RATE ))
  echo "  failpoint: $IN_FLIGHT_OUTAGES events in flight at the kills during outages ($IN_FLIGHT_ALL at all kills); predicted loss $LOW..$HIGH (at least $LOSS_SHARE of the $BEYOND_TAIL beyond each kill's unconfirmed tail; at most all in flight plus 2 s of writes)"
  (( IN_FLIGHT_OUTAGES >= MIN_IN_FLIGHT )) ||
    { FAILED=1; WHY+=("premise: only $IN_FLIGHT_OUTAGES events in flight at the outage kills (at least $MIN_IN_FLIGHT needed): nothing to lose, the run proves nothing"); }
  if (( FAILED == 0 )) && int "$KLOST" && (( KLOST >= LOW && KLOST <= HIGH )); then
    echo "  EXPECTED: with confirm_before_ack the run reports the predicted loss ($KLOST events): the verdict can fail"
    exit 0
  fi
  (( FAILED == 1 )) || WHY+=("loss $KLOST is not the predicted $LOW..$HIGH: the verdict counts something else than the failpoint's loss")
  printf '  UNEXPECTED: %s\n' "${WHY[@]}"
  echo "  FAIL (logs kept in $WORK)"
  KEEP=1
  exit 1
fi
if [[ $EXPECT_DUPS == 1 ]]; then
  for v in "$KLOST" "$PHANTOM" "$DISORDER" "$LLOST" "$TWICE" "$BALANCE" "$LDISORDER"; do [[ $v == 0 ]] || FAILED=1; done
  if (( FAILED == 0 )) && int "$DUPS" && (( DUPS > 0 )); then
    echo "  EXPECTED: with ignore_checkpoint the exactly-once verdict reports $DUPS duplicates (and nothing lost): it can fail"
    exit 0
  fi
  (( FAILED == 1 )) || WHY+=("no duplicates although the relays ignored the checkpoint: the exactly-once verdict cannot see repeats")
  printf '  UNEXPECTED: %s\n' "${WHY[@]}"
  echo "  FAIL (logs kept in $WORK)"
  KEEP=1
  exit 1
fi
if [[ $EXACTLY_ONCE == 1 ]]; then
  [[ $DUPS == 0 && $TORN == 0 ]] || FAILED=1
  (( ABORTED > 0 )) || { FAILED=1; WHY+=("premise: no record of an aborted Kafka transaction in the logs: no kill hit an open transaction"); }
fi
for v in "$KLOST" "$PHANTOM" "$DISORDER" "$LLOST" "$TWICE" "$BALANCE" "$LDISORDER"; do [[ $v == 0 ]] || FAILED=1; done
if [[ $FAILED == 0 ]]; then echo "  PASS"; exit 0; fi
(( ${#WHY[@]} == 0 )) || printf '  %s\n' "${WHY[@]}"
echo "  FAIL (logs kept in $WORK: rerun with CHAOS_SEED=$SEED to replay the schedule)"
KEEP=1
exit 1
