#!/usr/bin/env bash
# cutover.sh MODE...: the cut-over from a running Debezium connector to walrelay, and the
# rollback to Debezium, while a writer keeps committing (issue 29, part 2). One run per
# MODE, each with two switches:
#   stop   Kafka Connect stopped with SIGTERM (it flushes its offsets), later walrelay
#          stopped with SIGTERM (it confirms everything Kafka acked)
#   kill   both stopped with kill -9 (the offsets and confirmations since the last flush
#          are lost)
# A run: Debezium (scenario a: Kafka's default JsonConverter with schemas) publishes; switch
# 1: Connect is stopped, `walrelay cutover debezium` takes the connector's slot; switch 2:
# walrelay is stopped, Debezium starts again on the slot with its stored offsets. The writer
# commits transactions of 1-3 rows throughout (every 13th transaction rolls back), then
# stops; once every record arrived, Kafka's Java console consumer reads the topic and
# cutover_verdict.py prints one verdict line per switch: every committed event present, none
# of a rolled-back transaction, order per aggregate kept, and each duplicate checked against
# what the stopped side had not confirmed (the slot's confirmed_flush_lsn once it stopped).
# Exit 1 when a verdict fails.
#   bench/debezium/cutover.sh stop kill
# Env: PHASE_SECONDS (10: how long each side publishes), SCENARIO (a), KAFKA_BROKERS (1),
#      ROLLBACK_SET (offset.mismatch.strategy=trust_slot: the connector property the
#      rollback needs, docs/migrating-from-debezium.md),
#      WORK (/tmp/walrelay-dbz-cutover), BUILD_ROOT (build). The records and the logs stay
#      in $WORK.<MODE>/.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PHASE_SECONDS=${PHASE_SECONDS:-10}
SCENARIO=${SCENARIO:-a}
KAFKA_BROKERS=${KAFKA_BROKERS:-1}
ROLLBACK_SET=${ROLLBACK_SET:-offset.mismatch.strategy=trust_slot}
WORK_BASE=${WORK:-/tmp/walrelay-dbz-cutover}
BUILD_ROOT=${BUILD_ROOT:-$ROOT/build}
WALRELAY="$BUILD_ROOT/main/src/cli/walrelay"
TOPIC=outbox.event.payment
PARTITIONS=6
[[ $# -ge 1 ]] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ -x "$WALRELAY" ]] || { echo "cutover.sh: build walrelay first ($WALRELAY)" >&2; exit 1; }

log() { echo "cutover.sh: $(date +%T) $*" >&2; }
psql_() { psql -X -q -v ON_ERROR_STOP=1 "$DSN" "$@"; }

cleanup() {
  [[ -n "${WRITER_PID:-}" ]] && kill "$WRITER_PID" 2>/dev/null
  [[ -n "${RELAY_PID:-}" ]] && kill -9 "$RELAY_PID" 2>/dev/null
  [[ -n "${WORK:-}" ]] || return 0
  bash "$HERE/debezium.sh" kill --dir "$WORK/dbz" >/dev/null 2>&1 || true
  bash "$ROOT/scripts/kafka.sh" stop --dir "$WORK/kafka" >/dev/null 2>&1 || true
  bash "$ROOT/scripts/pgtmp.sh" stop "$WORK/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

slot_state() { psql_ -At -c "SELECT active, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'debezium'"; }

# Waits until the slot is inactive (the stopped side's connection is gone) and prints its
# confirmed_flush_lsn: what the stopped side confirmed.
wait_slot_inactive() {
  local state=""
  for _ in $(seq 1 300); do
    state=$(slot_state)
    [[ "$state" == f\|* ]] && { echo "${state#f|}"; return 0; }
    sleep 0.1
  done
  log "the slot is still active 30 s after the stop ($state)"
  return 1
}

wait_slot_active() {
  for _ in $(seq 1 600); do
    [[ "$(slot_state)" == t\|* ]] && return 0
    sleep 0.1
  done
  log "the slot was not read within 60 s"
  return 1
}

debezium_start() {  # [--set key=value ...]
  # shellcheck disable=SC2016
  bash "$HERE/debezium.sh" start --dir "$WORK/dbz" --bootstrap "$BOOTSTRAP" \
    --pg "127.0.0.1:$PGPORT:postgres:walrelay" --scenario "$HERE/scenarios/$SCENARIO.properties" \
    --set 'transforms.outbox.route.topic.replacement=outbox.event.${routedByValue}' "$@" &&
    wait_slot_active
}

relay_start() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mapfile -t extra < <(grep -v '^\s*#' "$HERE/scenarios/$SCENARIO.walrelay" | grep -v '^\s*$' || true)
  "$WALRELAY" cutover debezium --source-dsn "$DSN" --kafka-bootstrap-servers "$BOOTSTRAP" \
    --ops-metrics-address "127.0.0.1:$port" "${extra[@]}" >"$WORK/walrelay.log" 2>&1 &
  RELAY_PID=$!
  for _ in $(seq 1 300); do
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$RELAY_PID" 2>/dev/null || { tail -20 "$WORK/walrelay.log" >&2; return 1; }
    sleep 0.1
  done
  log "walrelay is not ready after 30 s"
  return 1
}

relay_stop() {  # SIGNAL
  kill "-$1" "$RELAY_PID"
  wait "$RELAY_PID" 2>/dev/null || true
  RELAY_PID=""
}

# The writer: one transaction at a time, 1-3 rows of 17 aggregates, the payload's seq the
# global order of the row; every 13th transaction rolls back. Runs until writer_ctl.stop.
writer_start() {
  psql_ -c "
    DO \$\$ DECLARE t int := 0; n int := 0; BEGIN
      LOOP
        EXIT WHEN (SELECT stop FROM writer_ctl);
        t := t + 1;
        FOR r IN 1..(1 + t % 3) LOOP
          n := n + 1;
          INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
          VALUES (md5('event-' || n)::uuid, 'payment', 'agg-' || (n * 7 % 17), 'PaymentCaptured',
                  jsonb_build_object('seq', n, 'txn', t));
        END LOOP;
        IF t % 13 = 0 THEN ROLLBACK; ELSE COMMIT; END IF;
        PERFORM pg_sleep(0.004);
      END LOOP;
    END \$\$" &
  WRITER_PID=$!
}

writer_stop() {
  psql_ -c "UPDATE writer_ctl SET stop = true"
  wait "$WRITER_PID"
  WRITER_PID=""
}

run_mode() {
  local mode=$1 signal
  case "$mode" in
    stop) signal=TERM ;;
    kill) signal=KILL ;;
    *) log "unknown mode $mode (stop or kill)"; return 1 ;;
  esac
  cleanup
  WORK="$WORK_BASE.$mode"
  RELAY_PID="" WRITER_PID=""
  rm -rf "$WORK"
  mkdir -p "$WORK"
  chmod 755 "$WORK"
  eval "$(bash "$ROOT/scripts/pgtmp.sh" start "$WORK/pg")"
  DSN="host=127.0.0.1 port=$PGPORT user=walrelay dbname=postgres"
  psql_ -c "
    CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
      aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb);
    CREATE TABLE writer_ctl (stop bool NOT NULL); INSERT INTO writer_ctl VALUES (false);"
  BOOTSTRAP=$(bash "$ROOT/scripts/kafka.sh" start --dir "$WORK/kafka" --brokers "$KAFKA_BROKERS" \
    --owner $$ | sed -n 's/^bootstrap=//p')
  bash "$ROOT/scripts/kafka.sh" topic --dir "$WORK/kafka" "$TOPIC" "$PARTITIONS"

  debezium_start || return 1
  writer_start
  log "$mode: Debezium publishes for ${PHASE_SECONDS} s while the writer commits"
  sleep "$PHASE_SECONDS"

  bash "$HERE/debezium.sh" "$mode" --dir "$WORK/dbz" || return 1
  local c1 c2
  c1=$(wait_slot_inactive) || return 1
  log "$mode: Connect stopped (${mode}); the slot's confirmed_flush_lsn: $c1; walrelay cutover debezium"
  relay_start || return 1
  sleep "$PHASE_SECONDS"

  relay_stop "$signal"
  c2=$(wait_slot_inactive) || return 1
  log "$mode: walrelay stopped (SIG$signal); the slot's confirmed_flush_lsn: $c2; Debezium starts again ($ROLLBACK_SET)"
  # Its stored offset is older than the slot's restart_lsn now: Debezium 3.6 refuses to
  # start ("no longer available on the server") unless told to trust the slot.
  debezium_start --set "$ROLLBACK_SET" || return 1
  sleep "$PHASE_SECONDS"
  writer_stop

  # Every committed row, then wait until the topic stops growing with at least that many.
  psql_ -At -F $'\t' -c "SELECT id, aggregateid, payload->>'seq' FROM outbox ORDER BY 3::int" \
    >"$WORK/committed.tsv"
  local committed have=0 last=-1 stable=0
  committed=$(wc -l <"$WORK/committed.tsv")
  for _ in $(seq 1 120); do
    have=$(bash "$ROOT/scripts/kafka.sh" records --dir "$WORK/kafka" "$TOPIC")
    if ((have >= committed && have == last)); then
      stable=$((stable + 1))
      ((stable >= 3)) && break
    else
      stable=0
    fi
    last=$have
    sleep 1
  done
  log "$mode: $committed events committed, $have records in $TOPIC"
  bash "$ROOT/scripts/kafka.sh" consume --dir "$WORK/kafka" "$TOPIC" "$have" >"$WORK/records" || true
  bash "$HERE/debezium.sh" stop --dir "$WORK/dbz"
  python3 "$HERE/cutover_verdict.py" --mode "$mode" --committed "$WORK/committed.tsv" \
    --records "$WORK/records" --switch1-confirmed "$c1" --switch2-confirmed "$c2"
}

status=0
for m in "$@"; do run_mode "$m" || status=1; done
exit "$status"
