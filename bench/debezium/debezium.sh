#!/usr/bin/env bash
# debezium.sh: Debezium itself (Kafka Connect's standalone worker, the PostgreSQL connector
# and the Outbox Event Router), as teams deploy it, for the side-by-side runs of
# bench/debezium/compare.sh and bench/vs_debezium.sh (issue 29).
#
#   debezium.sh start --dir DIR --bootstrap HOST:PORT,... --pg HOST:PORT:DB:USER
#                     [--scenario FILE] [--slot NAME] [--publication NAME]
#                     [--set key=value ...]    the connector's properties beyond the
#                                              scenario file's; returns once its task runs
#   debezium.sh stop  --dir DIR                SIGTERM: Connect flushes its offsets and stops
#   debezium.sh kill  --dir DIR                kill -9: the offsets since the last flush are lost
#   debezium.sh status --dir DIR               the connector's state from Connect's REST API
#   debezium.sh fetch                          only resolve the jars
#
# Jars: bench/debezium/pom.xml (Debezium 3.6.1.Final, Kafka Connect 4.1.1, pinned there
# only), resolved once from Maven Central into ${WALRELAY_CACHE_DIR:-~/.cache/walrelay}/
# debezium-VERSION. The worker: offsets in DIR/offsets.dat (flushed every
# offset.flush.interval.ms, 1 s here; Connect's default is 60 s), REST on a free loopback
# port, heap DEBEZIUM_HEAP (default -Xms64m -Xmx384m), log in DIR/connect.log. Converters
# and the router's options come from the scenario file (scenarios/*.properties).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM="$HERE/pom.xml"
DBZ_VERSION=$(sed -n 's:.*<debezium.version>\(.*\)</debezium.version>.*:\1:p' "$POM")
CACHE="${WALRELAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/walrelay}"
LIBS="$CACHE/debezium-$DBZ_VERSION"
HEAP="${DEBEZIUM_HEAP:--Xms64m -Xmx384m}"

die() { echo "debezium.sh: $*" >&2; exit 1; }
log() { echo "debezium.sh: $*" >&2; }
usage() { sed -n '6,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# shellcheck source=../../scripts/lib/maven_jars.sh
source "$HERE/../../scripts/lib/maven_jars.sh"
resolve() { maven_jars "$POM" "$LIBS" "Debezium $DBZ_VERSION and Kafka Connect"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

rest() { curl -fsS "http://127.0.0.1:$(cat "$DIR/rest.port")$1"; }

cmd_start() {
  local bootstrap="" pg="" scenario="" slot=debezium publication=dbz_publication sets=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --bootstrap) bootstrap=$2; shift 2 ;;
      --pg) pg=$2; shift 2 ;;
      --scenario) scenario=$2; shift 2 ;;
      --slot) slot=$2; shift 2 ;;
      --publication) publication=$2; shift 2 ;;
      --set) sets+=("$2"); shift 2 ;;
      *) die "start: unknown argument $1" ;;
    esac
  done
  [[ -n "$bootstrap" && -n "$pg" ]] || die "start needs --bootstrap and --pg HOST:PORT:DB:USER"
  IFS=: read -r pg_host pg_port pg_db pg_user <<<"$pg"
  mkdir -p "$DIR"
  if [[ -f "$DIR/connect.pid" ]] && kill -0 "$(cat "$DIR/connect.pid")" 2>/dev/null; then
    die "Connect already runs in $DIR (pid $(cat "$DIR/connect.pid"))"
  fi
  local port
  port=$(free_port)
  echo "$port" >"$DIR/rest.port"
  cat >"$DIR/worker.properties" <<PROPS
bootstrap.servers=$bootstrap
offset.storage.file.filename=$DIR/offsets.dat
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$port
plugin.discovery=only_scan
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
PROPS
  {
    echo "name=outbox"
    echo "connector.class=io.debezium.connector.postgresql.PostgresConnector"
    echo "tasks.max=1"
    echo "database.hostname=$pg_host"
    echo "database.port=$pg_port"
    echo "database.dbname=$pg_db"
    echo "database.user=$pg_user"
    echo "database.password="
    echo "topic.prefix=dbz"
    echo "plugin.name=pgoutput"
    echo "slot.name=$slot"
    echo "publication.name=$publication"
    echo "publication.autocreate.mode=filtered"
    echo "table.include.list=public.outbox"
    echo "snapshot.mode=no_data"
    echo "tombstones.on.delete=false"
    echo "transforms=outbox"
    echo "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter"
    [[ -z "$scenario" ]] || grep -v '^\s*#' "$scenario" | grep -v '^\s*$'
    for s in "${sets[@]}"; do echo "$s"; done
  } >"$DIR/connector.properties"
  cat >"$DIR/log4j2.properties" <<'PROPS'
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:debezium.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
PROPS
  (
    # shellcheck disable=SC2086
    exec setsid java $HEAP -XX:+UseSerialGC -XX:-UsePerfData -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$DIR/log4j2.properties" -Ddebezium.log="$DIR/connect.log" \
      -cp "$LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone \
      "$DIR/worker.properties" "$DIR/connector.properties" >"$DIR/stdout.log" 2>&1
  ) &
  echo $! >"$DIR/connect.pid"
  local deadline=$((SECONDS + ${DEBEZIUM_START_TIMEOUT:-120})) state=""
  while ((SECONDS < deadline)); do
    kill -0 "$(cat "$DIR/connect.pid")" 2>/dev/null ||
      die "Connect exited while starting: $(tail -n 20 "$DIR/connect.log" "$DIR/stdout.log" 2>/dev/null)"
    state=$(rest /connectors/outbox/status 2>/dev/null |
      python3 -c 'import json,sys; d=json.load(sys.stdin); t=d.get("tasks") or [{}]; print(d["connector"]["state"], t[0].get("state",""))' 2>/dev/null || true)
    [[ "$state" == "RUNNING RUNNING" ]] && break
    [[ "$state" == *FAILED* ]] && die "the connector failed: $(rest /connectors/outbox/status)"
    sleep 0.5
  done
  [[ "$state" == "RUNNING RUNNING" ]] || die "the connector's task is not running after the timeout (state '$state'); log: $DIR/connect.log"
  # The task runs before its replication stream does: wait until the slot is active.
  log "Debezium $DBZ_VERSION runs (Connect REST 127.0.0.1:$port, slot $slot)"
}

stop_with() {  # SIGNAL
  [[ -f "$DIR/connect.pid" ]] || return 0
  local pid
  pid=$(cat "$DIR/connect.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$1" "$pid"
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "Connect (pid $pid) did not exit after SIG$1"
  fi
  rm -f "$DIR/connect.pid"
}

[[ $# -ge 1 ]] || usage
cmd=$1
shift
if [[ $cmd == fetch ]]; then resolve; exit 0; fi
DIR=""
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n "$DIR" ]] || die "--dir DIR is required"
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
case "$cmd" in
  start) resolve; cmd_start "${args[@]}" ;;
  stop) stop_with TERM ;;
  kill) stop_with KILL ;;
  status) rest /connectors/outbox/status; echo ;;
  *) usage ;;
esac
