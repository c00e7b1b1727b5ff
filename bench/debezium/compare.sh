#!/usr/bin/env bash
# compare.sh SCENARIO...: Debezium (Kafka Connect + PostgreSQL connector + Outbox Event
# Router, bench/debezium/debezium.sh) and walrelay (--outbox-profile debezium) publish the
# same outbox rows of one PostgreSQL, each to its own topics of one Apache Kafka; every
# record is compared per event id: topic (after its prefix), partition, key bytes, value
# bytes, headers, timestamp and timestamp type. One verdict line per scenario; the
# differences are listed (first few of each kind). Exit 1 when a partition differs (a
# cut-over would reorder aggregates) or any record is missing on either side.
#   bench/debezium/compare.sh a b     scenarios/<S>.properties (Debezium's connector
#                                     properties) and scenarios/<S>.walrelay (walrelay's flags)
# The consumed records stay in $WORK.records/<S>.debezium and <S>.walrelay.
# Env: EVENTS (default 200), WORK (default /tmp/walrelay-dbz-compare), BUILD_ROOT (build).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
EVENTS=${EVENTS:-200}
WORK=${WORK:-/tmp/walrelay-dbz-compare}
BUILD_ROOT=${BUILD_ROOT:-$ROOT/build}
WALRELAY="$BUILD_ROOT/main/src/cli/walrelay"
PARTITIONS=6
[[ $# -ge 1 ]] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ -x "$WALRELAY" ]] || { echo "compare.sh: build walrelay first ($WALRELAY)" >&2; exit 1; }

cleanup() {
  [[ -n "${RELAY_PID:-}" ]] && kill "$RELAY_PID" 2>/dev/null && wait "$RELAY_PID" 2>/dev/null
  bash "$HERE/debezium.sh" stop --dir "$WORK/dbz" >/dev/null 2>&1 || true
  bash "$ROOT/scripts/kafka.sh" stop --dir "$WORK/kafka" >/dev/null 2>&1 || true
  bash "$ROOT/scripts/pgtmp.sh" stop "$WORK/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psql_() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

run_scenario() {
  local s=$1
  local props="$HERE/scenarios/$s.properties" flags="$HERE/scenarios/$s.walrelay"
  [[ -f "$props" && -f "$flags" ]] || { echo "compare.sh: no scenario $s ($props, $flags)" >&2; return 1; }
  cleanup
  RELAY_PID=""
  rm -rf "$WORK"
  mkdir -p "$WORK"
  chmod 755 "$WORK"
  eval "$(bash "$ROOT/scripts/pgtmp.sh" start "$WORK/pg")"
  local dsn="host=127.0.0.1 port=$PGPORT user=walrelay dbname=postgres"
  psql_ "$dsn" -c "CREATE EXTENSION IF NOT EXISTS pgcrypto" -c "
    CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
      aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb,
      \"timestamp\" timestamptz NOT NULL DEFAULT now(), tracingspancontext varchar(256),
      region varchar(32),
      event_ts timestamp NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'))"
  local bootstrap
  bootstrap=$(bash "$ROOT/scripts/kafka.sh" start --dir "$WORK/kafka" --brokers 1 --owner $$ |
    sed -n 's/^bootstrap=//p')
  # The routed topics and how many records each gets: "#! topics=NAME:COUNT,..." in the
  # scenario's properties (default: payment, every event).
  local topics
  topics=$(sed -n 's/^#! topics=//p' "$props")
  topics=${topics:-payment:$EVENTS}
  for tc in ${topics//,/ }; do
    for side in dbz wr; do
      bash "$ROOT/scripts/kafka.sh" topic --dir "$WORK/kafka" "$side.outbox.event.${tc%%:*}" \
        "$PARTITIONS" >/dev/null
    done
  done
  bash "$HERE/debezium.sh" start --dir "$WORK/dbz" --bootstrap "$bootstrap" \
    --pg "127.0.0.1:$PGPORT:postgres:walrelay" --scenario "$props"
  local metrics_port
  metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mapfile -t extra < <(grep -v '^\s*#' "$flags" | grep -v '^\s*$' || true)
  "$WALRELAY" run --source-dsn "$dsn" --outbox-profile debezium --source-slot walrelay_cmp \
    --source-publication walrelay_cmp --kafka-bootstrap-servers "$bootstrap" \
    --outbox-topic-template 'wr.outbox.event.${aggregate_type}' \
    --ops-metrics-address "127.0.0.1:$metrics_port" "${extra[@]}" >"$WORK/walrelay.log" 2>&1 &
  RELAY_PID=$!
  for _ in $(seq 1 300); do
    curl -fsS "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1 && break
    kill -0 "$RELAY_PID" 2>/dev/null || { tail -20 "$WORK/walrelay.log"; return 1; }
    sleep 0.1
  done
  # Debezium's stream starts after its task: wait until its slot is read.
  for _ in $(seq 1 300); do
    [[ "$(psql_ "$dsn" -At -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'debezium'")" == t ]] && break
    sleep 0.1
  done
  # The workload: EVENTS rows in transactions of 10, 17 aggregates, a payload with
  # escapes and non-ASCII text, a tracing column; with "#! null_payload_every=N" in the
  # scenario's properties, every Nth row has a NULL payload.
  local every
  every=$(sed -n 's/^#! null_payload_every=\([0-9]*\)/\1/p' "$props")
  every=${every:-0}
  psql_ "$dsn" -c "
    DO \$\$ BEGIN
      FOR t IN 0..$((EVENTS / 10 - 1)) LOOP
        INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext, region)
        SELECT gen_random_uuid(), 'payment', 'agg-' || (g % 17), 'PaymentCaptured',
               CASE WHEN $every > 0 AND g % GREATEST($every, 1) = 0 THEN NULL ELSE
                 jsonb_build_object('seq', g, 'amount', g * 100, 'note', 'caf\u00e9 \"quoted\"',
                   'price', (g * 1.25)::numeric(10, 2), 'city', 'Zürich',
                   'tags', jsonb_build_array('a', 'b')) END,
               'traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
               CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END
        FROM generate_series(t * 10, t * 10 + 9) g;
        COMMIT;
      END LOOP;
    END \$\$"
  local out="$WORK.records"
  mkdir -p "$out"
  : >"$out/$s.debezium"
  : >"$out/$s.walrelay"
  for tc in ${topics//,/ }; do
    bash "$ROOT/scripts/kafka.sh" consume --dir "$WORK/kafka" "dbz.outbox.event.${tc%%:*}" \
      "${tc##*:}" | sed "s/^/${tc%%:*}\t/" >>"$out/$s.debezium" || true
    bash "$ROOT/scripts/kafka.sh" consume --dir "$WORK/kafka" "wr.outbox.event.${tc%%:*}" \
      "${tc##*:}" | sed "s/^/${tc%%:*}\t/" >>"$out/$s.walrelay" || true
  done
  python3 "$HERE/compare_records.py" "$s" "$EVENTS" "$out/$s.debezium" "$out/$s.walrelay"
}

status=0
for s in "$@"; do run_scenario "$s" || status=1; done
exit "$status"
