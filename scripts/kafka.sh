#!/usr/bin/env bash
# kafka.sh: an Apache Kafka cluster on loopback, the project's reference broker for
# integration, fault and chaos tests, benchmarks and `quickstart.sh --kafka apache`.
#
#   kafka.sh start  --dir DIR [--brokers N] [--owner PID]   format + start; last line bootstrap=...
#   kafka.sh stop   --dir DIR                               stop every process (no-op when stopped)
#   kafka.sh status --dir DIR                               each node: running, paused or stopped
#   kafka.sh kill-broker   --dir DIR N     kill -9 broker N          start-broker --dir DIR N
#   kafka.sh stop-broker   --dir DIR N     SIGTERM (a controlled shutdown), waits until gone
#   kafka.sh pause-broker  --dir DIR N     SIGSTOP (alive, silent)   resume-broker --dir DIR N
#   kafka.sh topic  --dir DIR NAME PARTITIONS [CONFIG=VALUE ...]  create a topic (RF min(3,N))
#   kafka.sh env    --dir DIR                               the cluster's settings as shell lines
#   kafka.sh consume --dir DIR TOPIC N   Java console consumer: N records from the beginning,
#                                        one per line: CreateTime:ms Partition:p headers key value
#   kafka.sh produce --dir DIR TOPIC     Java console producer: stdin lines KEY:VALUE
#   kafka.sh records --dir DIR TOPIC     how many records TOPIC holds (the sum of its
#                                        partitions' end offsets; no transactions assumed)
#   kafka.sh acl --dir DIR ARG...        kafka-acls (AclCommand) with these arguments
#   kafka.sh fetch                                          only resolve the jars (for CI caches)
#
# The cluster: one KRaft controller (node 0) and N brokers (nodes 1..N, default 3), each its
# own JVM with a small heap, every port a free one on 127.0.0.1. Topic defaults as in
# production: replication factor min(3, N), min.insync.replicas=2 (1 with one broker),
# auto.create.topics.enable=false. Listeners of each broker:
#   PLAINTEXT  bootstrap=...       no authentication (principal ANONYMOUS, a super user):
#                                  what the tests use unless they test security
#   SASL_SSL   bootstrap_sasl=...  SCRAM-SHA-512 or PLAIN over TLS, the broker's certificate
#                                  signed by a throwaway CA (DIR/tls/ca.pem, made by openssl);
#                                  ACLs enforced (StandardAuthorizer): user `admin` is a super
#                                  user, user `walrelay` gets the relay's documented least
#                                  privileges (docs/operations.md); passwords in DIR/users.env
#   SSL        bootstrap_mtls=...  mutual TLS: the client's certificate is its identity
#                                  (CN=walrelay is User:walrelay; client_cert, client_key)
#   PROXIED    proxied=N:P:Q,...   PLAINTEXT on port Q of broker N, advertised as port P,
#                                  where nothing listens until a proxy (a test's Toxiproxy,
#                                  tests/support/toxiproxy.h) forwards P to Q: clients that
#                                  bootstrap at the P ports reach every broker through its
#                                  proxy, so each broker's client traffic can be faulted on
#                                  its own (inter-broker traffic never crosses a proxy)
# `start` waits until the brokers answer metadata with every broker (60 s at most here),
# then prints the settings (the same lines as `env`), bootstrap=HOST:PORT,... last.
# With --owner PID (or WALRELAY_KAFKA_OWNER), a watcher stops the cluster when PID exits:
# a test that dies leaves nothing running.
#
# Apache Kafka comes from Maven Central through scripts/kafka/pom.xml (the one place its
# version is pinned): `mvn dependency:copy-dependencies` into
# ${WALRELAY_CACHE_DIR:-~/.cache/walrelay}/kafka-VERSION (Maven keeps its own copy in
# ~/.m2), once; no download when present. Needs java (17+), mvn, openssl, python3.
# Env: KAFKA_HEAP (default -Xms96m -Xmx320m per broker), WALRELAY_KAFKA_START_TIMEOUT (s, 90).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM="$HERE/kafka/pom.xml"
KAFKA_VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")
CACHE="${WALRELAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/walrelay}"
LIBS="$CACHE/kafka-$KAFKA_VERSION"
HEAP="${KAFKA_HEAP:--Xms96m -Xmx320m}"
START_TIMEOUT="${WALRELAY_KAFKA_START_TIMEOUT:-90}"

die() { echo "kafka.sh: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }
usage() { sed -n '5,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# --------------------------------------------------------------------------- jars

# shellcheck source=lib/maven_jars.sh
source "$HERE/lib/maven_jars.sh"
resolve() { maven_jars "$POM" "$LIBS" "Apache Kafka $KAFKA_VERSION"; }

# java with the Kafka class path; the log goes to $KLOG_DIR/server.log. With KEXEC=1 the
# calling (sub)shell becomes the JVM, in a session of its own: the pid it was started with
# is the JVM's, and a Ctrl-C of the caller's terminal does not reach the brokers.
kjava() {
  local opts=(-XX:+UseSerialGC -XX:-UsePerfData -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$DIR/log4j2.properties" -Dkafka.logs.dir="${KLOG_DIR:-$DIR}"
    -cp "$LIBS/*")
  # shellcheck disable=SC2086
  if [[ "${KEXEC:-0}" == 1 ]]; then exec setsid java $HEAP "${opts[@]}" "$@"; fi
  # shellcheck disable=SC2086
  java $HEAP "${opts[@]}" "$@"
}

# A tool (topics, acls, configs, api versions): small heap, quiet log.
ktool() {
  KLOG_DIR="$DIR" HEAP="-Xms32m -Xmx160m" kjava -XX:TieredStopAtLevel=1 "$@"
}

# --------------------------------------------------------------------------- state

DIR=""
load() {
  [[ -n "$DIR" ]] || die "--dir DIR is required"
  [[ -f "$DIR/cluster.env" ]] || die "no cluster in $DIR (run: kafka.sh start --dir $DIR)"
  # shellcheck disable=SC1091
  source "$DIR/cluster.env"
}

node_dir() { if [[ "$1" == 0 ]]; then echo "$DIR/controller"; else echo "$DIR/broker-$1"; fi; }
pid_of() { local f; f="$(node_dir "$1")/pid"; [[ -f "$f" ]] && cat "$f" || true; }
# A process that exists and is not a zombie (a killed JVM whose parent has not reaped it).
pid_alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$st" && "$st" != Z && "$st" != X ]]
}
alive() { local p; p=$(pid_of "$1"); [[ -n "$p" ]] && pid_alive "$p"; }

# shellcheck source=lib/ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"  # free_ports N

start_node() {
  local n=$1 d
  d=$(node_dir "$n")
  if alive "$n"; then return 0; fi
  # A fresh log per start: readiness is read from it (started_since_launch).
  [[ -f "$d/server.log" ]] && mv -f "$d/server.log" "$d/server.log.1"
  KEXEC=1 KLOG_DIR="$d" kjava kafka.Kafka "$d/server.properties" >"$d/stdout.log" 2>&1 </dev/null &
  echo $! >"$d/pid"
}

# --------------------------------------------------------------------------- TLS and users

make_tls() {
  local t="$DIR/tls"
  mkdir -p "$t"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=walrelay test CA" \
    -keyout "$t/ca.key" -out "$t/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$t/broker.key" -out "$t/broker.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$t/san.ext"
  openssl x509 -req -in "$t/broker.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
    -days 30 -extfile "$t/san.ext" -out "$t/broker.pem" 2>/dev/null
  openssl pkcs12 -export -in "$t/broker.pem" -inkey "$t/broker.key" -certfile "$t/ca.pem" \
    -name broker -passout "pass:$KEYSTORE_PASSWORD" -out "$t/broker.p12"
  # The walrelay user's client certificate (mutual TLS listener: CN=walrelay is User:walrelay).
  openssl req -newkey rsa:2048 -nodes -subj "/CN=walrelay" \
    -keyout "$t/walrelay.key" -out "$t/walrelay.csr" 2>/dev/null
  openssl x509 -req -in "$t/walrelay.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
    -days 30 -out "$t/walrelay.pem" 2>/dev/null
  # A CA nobody trusts, for the tests of an unknown CA.
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=walrelay other CA" \
    -keyout "$t/other-ca.key" -out "$t/other-ca.pem" 2>/dev/null
  chmod 600 "$t"/*.key "$t/broker.p12"
}

random_secret() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }

# --------------------------------------------------------------------------- commands

cmd_start() {
  local brokers=3 owner="${WALRELAY_KAFKA_OWNER:-}"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --brokers) brokers=$2; shift 2 ;;
      --owner) owner=$2; shift 2 ;;
      *) die "start: unknown argument $1" ;;
    esac
  done
  [[ "$brokers" =~ ^[1-9]$ ]] || die "--brokers: 1..9"
  [[ -n "$DIR" ]] || die "--dir DIR is required"
  command -v openssl >/dev/null || die "openssl not found"
  resolve
  if [[ -f "$DIR/cluster.env" ]]; then
    load
    local any=0 n
    for n in $(seq 0 "$BROKERS"); do alive "$n" && any=1; done
    [[ $any == 1 ]] && die "a cluster is running in $DIR: kafka.sh stop --dir $DIR first"
    log "restarting the cluster in $DIR (its data kept)"
  else
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    local ports
    read -r -a ports <<<"$(free_ports $((1 + 5 * brokers)))"
    BROKERS=$brokers
    CONTROLLER_PORT=${ports[0]}
    PLAIN_PORTS="" SASL_PORTS="" MTLS_PORTS="" PROXIED_PORTS="" PROXY_PORTS=""
    local i
    for i in $(seq 1 "$brokers"); do
      PLAIN_PORTS+="${ports[$((2 * i - 1))]} "
      SASL_PORTS+="${ports[$((2 * i))]} "
      MTLS_PORTS+="${ports[$((2 * brokers + i))]} "
      PROXIED_PORTS+="${ports[$((3 * brokers + i))]} "
      PROXY_PORTS+="${ports[$((4 * brokers + i))]} "
    done
    CLUSTER_ID=$(ktool kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    KEYSTORE_PASSWORD=$(random_secret)
    ADMIN_PASSWORD=$(random_secret)
    WALRELAY_PASSWORD=$(random_secret)
    cat >"$DIR/cluster.env" <<EOF
BROKERS=$BROKERS
CONTROLLER_PORT=$CONTROLLER_PORT
PLAIN_PORTS="${PLAIN_PORTS% }"
SASL_PORTS="${SASL_PORTS% }"
MTLS_PORTS="${MTLS_PORTS% }"
PROXIED_PORTS="${PROXIED_PORTS% }"
PROXY_PORTS="${PROXY_PORTS% }"
CLUSTER_ID=$CLUSTER_ID
KEYSTORE_PASSWORD=$KEYSTORE_PASSWORD
KAFKA_VERSION=$KAFKA_VERSION
EOF
    cat >"$DIR/users.env" <<EOF
KAFKA_ADMIN_USER=admin
KAFKA_ADMIN_PASSWORD=$ADMIN_PASSWORD
KAFKA_WALRELAY_USER=walrelay
KAFKA_WALRELAY_PASSWORD=$WALRELAY_PASSWORD
EOF
    chmod 600 "$DIR/cluster.env" "$DIR/users.env"
    write_config
    make_tls
    format_all
  fi
  for n in $(seq 0 "$BROKERS"); do start_node "$n"; done
  if [[ -n "$owner" ]]; then start_watcher "$owner"; fi
  if ! wait_ready; then
    log "the cluster did not come up within ${START_TIMEOUT} s; the last lines of each node's log:"
    for n in $(seq 0 "$BROKERS"); do
      log "--- $(node_dir "$n")/server.log"
      tail -n 15 "$(node_dir "$n")/server.log" >&2 2>/dev/null || true
    done
    cmd_stop
    exit 1
  fi
  if [[ ! -f "$DIR/acls.done" ]]; then
    grant_walrelay_acls
    touch "$DIR/acls.done"
  fi
  cmd_env
}

write_config() {
  local voters="0@127.0.0.1:$CONTROLLER_PORT" rf=$((BROKERS < 3 ? BROKERS : 3))
  local isr=$((rf >= 2 ? 2 : 1))
  cat >"$DIR/log4j2.properties" <<'EOF'
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka.request.logger
logger.kafka.level = WARN
EOF
  # Topic defaults go to the controller too: in KRaft it creates topics, and gives them its
  # own min.insync.replicas (1 unless set) whatever the brokers say.
  local common="controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
auto.create.topics.enable=false
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.threads=1
num.recovery.threads.per.data.dir=1
group.initial.rebalance.delay.ms=0
"
  mkdir -p "$DIR/controller"
  cat >"$DIR/controller/server.properties" <<EOF
process.roles=controller
node.id=0
listeners=CONTROLLER://127.0.0.1:$CONTROLLER_PORT
listener.security.protocol.map=CONTROLLER:PLAINTEXT
log.dirs=$DIR/controller/data
$common
EOF
  local i plain sasl
  read -r -a plain <<<"$PLAIN_PORTS"
  read -r -a sasl <<<"$SASL_PORTS"
  local mtls proxied proxy
  read -r -a mtls <<<"$MTLS_PORTS"
  read -r -a proxied <<<"$PROXIED_PORTS"
  read -r -a proxy <<<"$PROXY_PORTS"
  for i in $(seq 1 "$BROKERS"); do
    mkdir -p "$DIR/broker-$i"
    cat >"$DIR/broker-$i/server.properties" <<EOF
process.roles=broker
node.id=$i
listeners=PLAINTEXT://127.0.0.1:${plain[$((i - 1))]},SASL_SSL://localhost:${sasl[$((i - 1))]},SSL://localhost:${mtls[$((i - 1))]},PROXIED://127.0.0.1:${proxied[$((i - 1))]}
advertised.listeners=PLAINTEXT://127.0.0.1:${plain[$((i - 1))]},SASL_SSL://localhost:${sasl[$((i - 1))]},SSL://localhost:${mtls[$((i - 1))]},PROXIED://127.0.0.1:${proxy[$((i - 1))]}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT
listener.name.ssl.ssl.client.auth=required
listener.name.ssl.ssl.truststore.type=PEM
listener.name.ssl.ssl.truststore.location=$DIR/tls/ca.pem
ssl.principal.mapping.rules=RULE:^CN=([a-z]+)$/\$1/,DEFAULT
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="$ADMIN_PASSWORD" user_walrelay="$WALRELAY_PASSWORD";
ssl.keystore.type=PKCS12
ssl.keystore.location=$DIR/tls/broker.p12
ssl.keystore.password=$KEYSTORE_PASSWORD
ssl.key.password=$KEYSTORE_PASSWORD
log.dirs=$DIR/broker-$i/data
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
log.segment.bytes=16777216
$common
EOF
    chmod 600 "$DIR/broker-$i/server.properties"  # passwords
  done
}

format_all() {
  # shellcheck disable=SC1091
  source "$DIR/users.env"
  local n pids=()
  for n in $(seq 0 "$BROKERS"); do
    local extra=()
    if [[ $n == 0 ]]; then
      extra=(--add-scram "SCRAM-SHA-512=[name=admin,password=$KAFKA_ADMIN_PASSWORD]"
             --add-scram "SCRAM-SHA-512=[name=walrelay,password=$KAFKA_WALRELAY_PASSWORD]")
    fi
    ktool kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" \
      -c "$(node_dir "$n")/server.properties" "${extra[@]}" >"$(node_dir "$n")/format.log" 2>&1 &
    pids+=($!)
  done
  local p ok=1
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  if [[ $ok == 0 ]]; then
    cat "$DIR"/*/format.log >&2
    die "formatting the KRaft storage failed"
  fi
}

# bootstrap_list HOST PORT...: "HOST:PORT,HOST:PORT,..." (TLS listeners use localhost, the
# name in the brokers' certificate).
bootstrap_list() {
  local host=$1 p out=""
  shift
  for p in "$@"; do out+="$host:$p,"; done
  echo "${out%,}"
}
# shellcheck disable=SC2086
plain_bootstrap() { bootstrap_list 127.0.0.1 $PLAIN_PORTS; }
# shellcheck disable=SC2086
sasl_bootstrap() { bootstrap_list localhost $SASL_PORTS; }
# shellcheck disable=SC2086
mtls_bootstrap() { bootstrap_list localhost $MTLS_PORTS; }

# The number of brokers the cluster's metadata lists (unfenced), asked of the running ones.
brokers_in_metadata() {
  ktool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$(plain_bootstrap)" \
    2>/dev/null | grep -c ' (id: [0-9]* rack: ' || true
}

wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT)) n
  while ((SECONDS < deadline)); do
    for n in $(seq 0 "$BROKERS"); do
      if ! alive "$n"; then
        log "node $n exited during start-up"
        return 1
      fi
    done
    # Every node says it started (a broker does so once unfenced: caught up with the
    # metadata, SCRAM users included, and serving every listener), and the metadata lists
    # every broker.
    local started=0
    for n in $(seq 0 "$BROKERS"); do
      grep -q "nodeId=$n\] Kafka Server started" "$(node_dir "$n")/server.log" 2>/dev/null &&
        started=$((started + 1))
    done
    if [[ $started == $((BROKERS + 1)) && "$(brokers_in_metadata)" == "$BROKERS" ]]; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

# The walrelay user's least privileges (docs/operations.md, Kafka ACLs): write and
# describe topics, the idempotent producer's IdempotentWrite on the cluster, and for the
# inbox's consumers read on topics and groups.
grant_walrelay_acls() {
  local b
  b=$(plain_bootstrap)
  ktool org.apache.kafka.tools.AclCommand --bootstrap-server "$b" --add \
    --allow-principal User:walrelay --operation Write --operation Describe \
    --operation DescribeConfigs --topic '*' --resource-pattern-type literal >/dev/null
  ktool org.apache.kafka.tools.AclCommand --bootstrap-server "$b" --add \
    --allow-principal User:walrelay --operation IdempotentWrite --cluster >/dev/null
  ktool org.apache.kafka.tools.AclCommand --bootstrap-server "$b" --add \
    --allow-principal User:walrelay --operation Read --topic '*' --group '*' >/dev/null
}

start_watcher() {
  local owner=$1
  kill -0 "$owner" 2>/dev/null || die "--owner $owner: no such process"
  setsid bash -c '
    while st=$(awk "{print \$3}" "/proc/$1/stat" 2>/dev/null) && [[ -n $st && $st != Z ]]; do
      sleep 1
    done
    bash "$2" stop --dir "$3" >/dev/null 2>&1' _ "$owner" "$HERE/kafka.sh" "$DIR" \
    >/dev/null 2>&1 </dev/null &
  echo $! >"$DIR/watcher.pid"
}

cmd_stop() {
  [[ -f "$DIR/cluster.env" ]] || return 0
  load
  # Brokers first, while the controller still answers their controlled shutdown; then the
  # controller. What does not exit in time is killed.
  stop_nodes 20 $(seq 1 "$BROKERS")
  stop_nodes 10 0
  if [[ -f "$DIR/watcher.pid" ]]; then
    local p
    p=$(cat "$DIR/watcher.pid")
    [[ "$p" != "$$" && "$p" != "$PPID" ]] && kill "$p" 2>/dev/null || true
    rm -f "$DIR/watcher.pid"
  fi
}

# stop_nodes SECONDS NODE...: SIGTERM (after SIGCONT, for a paused one), then SIGKILL.
stop_nodes() {
  local timeout=$1 n p
  shift
  for n in "$@"; do
    p=$(pid_of "$n")
    [[ -n "$p" ]] && pid_alive "$p" || continue
    kill -CONT "$p" 2>/dev/null || true
    kill -TERM "$p" 2>/dev/null || true
  done
  local deadline=$((SECONDS + timeout))
  for n in "$@"; do
    while alive "$n" && ((SECONDS < deadline)); do sleep 0.2; done
    if alive "$n"; then kill -KILL "$(pid_of "$n")" 2>/dev/null || true; fi
    rm -f "$(node_dir "$n")/pid"
  done
}

cmd_status() {
  load
  local n p state rc=0
  for n in $(seq 0 "$BROKERS"); do
    p=$(pid_of "$n")
    if [[ -n "$p" ]] && pid_alive "$p"; then
      state=running
      [[ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" == T ]] && state=paused
    else
      state=stopped
      rc=3
    fi
    if [[ $n == 0 ]]; then echo "controller 0: $state"; else echo "broker $n: $state"; fi
  done
  return $rc
}

broker_arg() {
  load
  [[ "${1:-}" =~ ^[1-9]$ && "$1" -le "$BROKERS" ]] || die "broker number: 1..$BROKERS"
}

cmd_env() {
  load
  # shellcheck disable=SC1091
  source "$DIR/users.env"
  echo "kafka_version=$KAFKA_VERSION"
  echo "brokers=$BROKERS"
  echo "ca=$DIR/tls/ca.pem"
  echo "other_ca=$DIR/tls/other-ca.pem"
  echo "users=$DIR/users.env"
  echo "bootstrap_sasl=$(sasl_bootstrap)"
  echo "bootstrap_mtls=$(mtls_bootstrap)"
  echo "client_cert=$DIR/tls/walrelay.pem"
  echo "client_key=$DIR/tls/walrelay.key"
  local proxied=() proxy=() i list=""
  read -r -a proxied <<<"${PROXIED_PORTS:-}"
  read -r -a proxy <<<"${PROXY_PORTS:-}"
  for i in "${!proxied[@]}"; do list+="$((i + 1)):${proxy[$i]}:${proxied[$i]},"; done
  echo "proxied=${list%,}"
  echo "bootstrap=$(plain_bootstrap)"
}

cmd_topic() {
  load
  local name=${1:?topic NAME PARTITIONS} partitions=${2:?topic NAME PARTITIONS}
  shift 2
  local rf=$((BROKERS < 3 ? BROKERS : 3)) args=() c
  for c in "$@"; do args+=(--config "$c"); done
  ktool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(plain_bootstrap)" --create \
    --if-not-exists --topic "$name" --partitions "$partitions" --replication-factor "$rf" \
    "${args[@]}" >/dev/null
}

# The Java clients of the same Kafka version, for tests that want a reader or writer
# independent of librdkafka.
cmd_consume() {
  load
  local topic=${1:?consume TOPIC N} n=${2:?consume TOPIC N}
  ktool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$(plain_bootstrap)" \
    --topic "$topic" --from-beginning --max-messages "$n" --timeout-ms 30000 \
    --property print.timestamp=true --property print.partition=true \
    --property print.headers=true --property print.key=true \
    --property headers.separator='|' --property null.literal='<null>' 2>/dev/null
}
cmd_records() {
  load
  local topic=${1:?records TOPIC}
  ktool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$(plain_bootstrap)" \
    --topic "$topic" --time -1 2>/dev/null | awk -F: '{n += $NF} END {print n + 0}'
}
cmd_produce() {
  load
  local topic=${1:?produce TOPIC}
  ktool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$(plain_bootstrap)" \
    --topic "$topic" --property parse.key=true --property key.separator=: >/dev/null
}

# --------------------------------------------------------------------------- main

[[ $# -ge 1 ]] || usage
cmd=$1
shift
if [[ $cmd == fetch ]]; then resolve; exit 0; fi
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n "$DIR" ]] || die "--dir DIR is required"
[[ -d "$DIR" ]] && DIR=$(cd "$DIR" && pwd)
set -- "${args[@]+"${args[@]}"}"

case "$cmd" in
  start) cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  topic) resolve; cmd_topic "$@" ;;
  consume) resolve; cmd_consume "$@" ;;
  produce) resolve; cmd_produce "$@" ;;
  records) resolve; cmd_records "$@" ;;
  acl) resolve; load; ktool org.apache.kafka.tools.AclCommand --bootstrap-server "$(plain_bootstrap)" "$@" ;;
  kill-broker)
    broker_arg "${1:-}"
    if alive "$1"; then
      p=$(pid_of "$1")
      kill -KILL "$p"
      while pid_alive "$p"; do sleep 0.05; done
    fi ;;
  start-broker) broker_arg "${1:-}"; start_node "$1" ;;
  stop-broker) broker_arg "${1:-}"; stop_nodes 30 "$1" ;;
  pause-broker) broker_arg "${1:-}"; alive "$1" || die "broker $1 is not running"; kill -STOP "$(pid_of "$1")" ;;
  resume-broker) broker_arg "${1:-}"; if alive "$1"; then kill -CONT "$(pid_of "$1")"; fi ;;
  *) usage ;;
esac
