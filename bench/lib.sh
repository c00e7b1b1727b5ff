# shellcheck shell=bash
# bench/lib.sh: what the benchmark scripts share. Sourced, never run.
#
# Before sourcing, set ROOT (the source tree), BUILD (build directory, relative to ROOT or
# absolute; BUILD_DIR is it made absolute),
# WORK (scratch directory, emptied) and BENCH_NAME (prefix of log lines). Provides:
#   log MSG...            a timestamped line on stderr
#   WALRELAY, DEVBROKER   the programs (built by bench_build when missing)
#   bench_build           builds walrelay and walrelay-devbroker in $BUILD when missing
#   bench_start [name=value ...]
#                         empties $WORK, starts a throwaway PostgreSQL 15 (scripts/pgtmp.sh;
#                         the settings are added to its defaults) and the dev broker (3
#                         brokers; DEVBROKER_TOPIC=name:partitions creates a topic), or with
#                         BENCH_KAFKA=apache three Apache Kafka brokers (scripts/kafka.sh,
#                         $WORK/kafka; the same topic, replication factor 3); sets
#                         PGDIR, PGHOST, PGPORT, DSN (unix socket), DSN_TCP, POSTMASTER,
#                         BOOT, BROKER_PID, and installs the EXIT trap (bench_cleanup)
#   q SQL                 one psql query, unaligned tuples only
#   bench_create_outbox   walrelay's outbox table (the documented schema) and the
#                         publication walrelay_outbox
#   cpu_of PID [all]      utime+stime of a live process in clock ticks (+ reaped children)
#   bench_cleanup         stops $SAMPLER_PID, $RELAY_PID, $BROKER_PID and every pid in
#                         $EXTRA_PIDS (when set), destroys the cluster and $WORK unless KEEP=1
if [[ $BUILD == /* ]]; then BUILD_DIR=$BUILD; else BUILD_DIR=$ROOT/$BUILD; fi
WALRELAY=$BUILD_DIR/src/cli/walrelay
DEVBROKER=$BUILD_DIR/src/kafka/walrelay-devbroker
CLK_TCK=$(getconf CLK_TCK)
BROKER_PID=""
RELAY_PID=""
SAMPLER_PID=""
EXTRA_PIDS=""

log() { printf '[%s %s] %s\n' "$BENCH_NAME" "$(date +%T)" "$*" >&2; }

bench_build() {
  if [[ ! -x $WALRELAY || ! -x $DEVBROKER ]]; then
    log "building walrelay and walrelay-devbroker in $BUILD"
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DWALRELAY_WERROR=ON >/dev/null
    cmake --build "$BUILD_DIR" -j2 --target walrelay walrelay-devbroker
  fi
}

bench_cleanup() {
  set +e
  local pid
  # shellcheck disable=SC2086
  for pid in "$SAMPLER_PID" "$RELAY_PID" "$BROKER_PID" $EXTRA_PIDS; do
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [[ ${BENCH_KAFKA:-dev} == apache ]] && "$ROOT/scripts/kafka.sh" stop --dir "$WORK/kafka" >/dev/null 2>&1
  if [[ "${KEEP:-0}" != 1 ]]; then
    "$ROOT/scripts/pgtmp.sh" destroy "$PGDIR" >/dev/null 2>&1
    rm -rf "$WORK"
  fi
}

bench_create_outbox() {
  psql -X -q -v ON_ERROR_STOP=1 -d "$DSN" <<'SQL'
CREATE TABLE outbox (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id       uuid NOT NULL DEFAULT gen_random_uuid(),
  aggregate_type text,
  aggregate_id   text NOT NULL,
  topic          text,
  event_type     text NOT NULL,
  payload        jsonb NOT NULL,
  headers        jsonb,
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE PUBLICATION walrelay_outbox FOR TABLE outbox;
SQL
}

q() { PGOPTIONS="-c client_min_messages=warning" psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$DSN" -c "$1"; }

cpu_of() {
  local stat
  IFS= read -r stat <"/proc/$1/stat" 2>/dev/null || { echo 0; return; }
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  if [[ ${2:-} == all ]]; then echo $(( ${12} + ${13} + ${14} + ${15} )); else echo $(( ${12} + ${13} )); fi
}

bench_start() {
  rm -rf "$WORK"
  mkdir -p "$WORK"
  chmod 755 "$WORK"
  PGDIR=$WORK/pg
  trap bench_cleanup EXIT
  eval "$("$ROOT/scripts/pgtmp.sh" start "$PGDIR" max_wal_size=8GB checkpoint_timeout=30min \
    shared_buffers=256MB "$@")"
  DSN="host=$PGHOST port=$PGPORT user=walrelay dbname=postgres"
  DSN_TCP="host=127.0.0.1 port=$PGPORT user=walrelay dbname=postgres"
  POSTMASTER=$(head -1 "$PGDIR/data/postmaster.pid")
  if [[ ${BENCH_KAFKA:-dev} == apache ]]; then
    log "starting three Apache Kafka brokers (scripts/kafka.sh)"
    BOOT=$("$ROOT/scripts/kafka.sh" start --dir "$WORK/kafka" --brokers 3 --owner $$ |
      sed -n 's/^bootstrap=//p')
    [[ -n $BOOT ]] || { echo "bench: the Kafka cluster did not start" >&2; exit 1; }
    if [[ -n ${DEVBROKER_TOPIC:-} ]]; then
      "$ROOT/scripts/kafka.sh" topic --dir "$WORK/kafka" "${DEVBROKER_TOPIC%%:*}"         "${DEVBROKER_TOPIC##*:}" >/dev/null
    fi
    return
  fi
  local bootfile=$WORK/bootstrap
  "$DEVBROKER" --brokers 3 ${DEVBROKER_TOPIC:+--topic "$DEVBROKER_TOPIC"} \
    --bootstrap-file "$bootfile" </dev/null >"$WORK/devbroker.log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 1 200); do [[ -s $bootfile ]] && break; sleep 0.05; done
  BOOT=$(sed -n 's/^bootstrap=//p' "$bootfile")
  [[ -n $BOOT ]] || { cat "$WORK/devbroker.log" >&2; exit 1; }
}
