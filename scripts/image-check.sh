#!/usr/bin/env bash
# image-check.sh: builds walrelay's container image (docker/Dockerfile) with podman on a
# Debian 12 base made from Debian's own packages (debootstrap: no image registry is needed),
# then runs it the way the Helm chart does and judges it from outside (issue 46).
#
#   scripts/image-check.sh [--debs DIR]
#
# --debs DIR  build the image from the walrelay_*.deb in DIR (scripts/package-check.sh
#             leaves them in its build directory; CI passes them so the code is compiled
#             once): the build context is only prebuilt/<the package>, which the
#             Dockerfile installs instead of compiling. Without it the Dockerfile's
#             own build stage compiles the tree (about 10 minutes on 2 cores).
#
# Checks, each failing the script:
#   the image: runs as uid 10001 (not root), its size, `walrelay --version` names this
#     tree's version and commit;
#   walrelay setup in the container, the configuration from a read-only mounted file and the
#     database password from a secret file (mode 0400, owner 10001): a role that needs the
#     password, and setup without the file is refused (so the file was read);
#   walrelay run and walrelay-ledger in containers with a read-only root filesystem (as the
#     chart's securityContext), the development Kafka from the same image, all on the host
#     network; /healthz and /readyz answer 200 from the host;
#   EVENTS payments written on the host, SIGTERM (podman stop) to the relay halfway: it
#     exits 0 saying "walrelay stopped cleanly", and the records in Kafka plus the outbox
#     rows the slot still holds equal what was written, each event once (a relay that
#     confirmed less than Kafka acknowledged would repeat the difference, more would lose
#     it); restarted, it delivers the rest: the ledger's verdict
#     (scripts/lib/ledger_verdict.sql) 0 lost, 0 applied twice, every balance exact, order
#     per wallet kept; a second SIGTERM leaves every event in Kafka once, none unconfirmed.
#
# Needs root (podman's rootful storage and runtime, a file owned by uid 10001), podman, runc,
# debootstrap (scripts/install-deps.sh), psql, curl, kcat. Podman runs with a containers.conf of
# its own (runc, cgroupfs, no default ulimits: what this sandbox allows) in WORK; the base
# image's root filesystem is cached as a tarball in ~/.cache/walrelay/image.
# Env: EVENTS (3000), WORK (/tmp/walrelay-image-check), IMAGE (localhost/walrelay:check),
# WALRELAY_CACHE (~/.cache/walrelay).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

EVENTS=${EVENTS:-3000}
WORK=${WORK:-/tmp/walrelay-image-check}
IMAGE=${IMAGE:-localhost/walrelay:check}
CACHE=${WALRELAY_CACHE:-$HOME/.cache/walrelay}/image
BASE_IMAGE=localhost/walrelay-debian:bookworm
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
DEBS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) DEBS=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "image-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

T0=$(date +%s)
CONTAINERS=(wr-check-broker wr-check-relay wr-check-ledger)
say() { printf '[image-check %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
fail() {
  echo "image-check: FAIL: $*" >&2
  for c in "${CONTAINERS[@]}"; do  # what each container said last, for the failure's cause
    podman container exists "$c" 2>/dev/null || continue
    echo "--- podman logs $c (last 15 lines)" >&2
    podman logs "$c" 2>&1 | tail -15 >&2
  done
  exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root (rootful podman, a secret file owned by uid 10001); CI runs it as root"
for tool in podman runc debootstrap psql curl kcat; do
  command -v "$tool" >/dev/null || fail "$tool is needed (scripts/install-deps.sh installs it)"
done

cleanup() {
  podman rm -f "${CONTAINERS[@]}" >/dev/null 2>&1 || true
  bash scripts/pgtmp.sh destroy "$WORK/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup
rm -rf "$WORK"
mkdir -p "$WORK" "$CACHE"
chmod 755 "$WORK"

# What this sandbox's kernel and seccomp allow: runc (crun is refused), cgroupfs (no systemd
# session), no default ulimits (raising nofile is refused), events to a file.
cat >"$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

# --- the Debian 12 base image, from Debian's packages --------------------------------------
base_tar="$CACHE/debian-$SUITE-minbase.tar.gz"
if [ ! -s "$base_tar" ]; then
  say "base image: debootstrap --variant=minbase $SUITE from $MIRROR (once; cached in $base_tar)"
  rootfs="$WORK/rootfs"
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; fail "debootstrap failed (log above)"; }
  # As Debian's bookworm-slim: no documentation, manual pages or translations, now or in
  # the packages installed later; no package lists or downloaded packages.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$rootfs"/usr/share/{man,info,locale,lintian}/* "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log
  tar -C "$rootfs" --numeric-owner -czf "$base_tar.part" .
  mv "$base_tar.part" "$base_tar"
  rm -rf "$rootfs"
fi
podman import --quiet "$base_tar" "$BASE_IMAGE" >/dev/null
say "base image $BASE_IMAGE: Debian $(podman run --rm --network none "$BASE_IMAGE" cat /etc/debian_version), debootstrap minbase of $(date -r "$base_tar" +%F)"

# --- the image -------------------------------------------------------------------------------
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
version=$(sed -n 's/^project(walrelay VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || fail "cannot read the version from CMakeLists.txt"
build_args=(--build-arg "DEBIAN_IMAGE=$BASE_IMAGE" --build-arg "WALRELAY_COMMIT=$commit")
if [ -n "$DEBS" ]; then
  context="$WORK/context"  # only prebuilt/walrelay_*.deb: the Dockerfile installs it
  mkdir -p "$context/prebuilt"
  deb=$(ls "$DEBS"/walrelay_"$version"_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || fail "no walrelay_${version}_*.deb in $DEBS (scripts/package-check.sh makes it)"
  cp "$deb" "$context/prebuilt/"
  say "podman build docker/Dockerfile from the package: $(basename "$deb")"
else
  context="$ROOT"
  say "podman build docker/Dockerfile from the source: compiling the tree in the build stage"
fi
t_build=$(date +%s)
podman build --network host -f "$ROOT/docker/Dockerfile" "${build_args[@]}" \
  -t "$IMAGE" "$context" >"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log"; fail "podman build failed (log above; all of it in $WORK/build.log)"; }
t_build=$(( $(date +%s) - t_build ))
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
say "image $IMAGE built in ${t_build}s: $(( size / 1000000 )) MB, user '$user'"
[ "$user" = "10001:10001" ] || fail "the image runs as '$user', expected 10001:10001"
uid=$(podman run --rm --network none --entrypoint id "$IMAGE" -u)
[ "$uid" = 10001 ] || fail "a container of the image runs as uid $uid"
got=$(podman run --rm --network none "$IMAGE" --version | head -n 1)
want="walrelay $version (commit $commit)"
[ "$got" = "$want" ] || fail "walrelay --version in the image printed '$got' first, expected '$want'"
say "in the image: $got; $(podman run --rm --network none --entrypoint dpkg-query "$IMAGE" -W -f '${Package} ${Version}, ' \
  walrelay librdkafka1 libpq5 | sed 's/, $//')"

# --- PostgreSQL on the host, a role that needs its password ----------------------------------
eval "$(bash scripts/pgtmp.sh start "$WORK/pg")"
export PGHOST PGPORT PGUSER PGDATABASE
password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
psql -q -v ON_ERROR_STOP=1 -c "CREATE ROLE relay LOGIN SUPERUSER REPLICATION PASSWORD '$password'"
# The relay's role authenticates with its password over TCP (scram), before pgtmp's trust
# lines; everything else stays as pgtmp made it.
hba="$WORK/pg/data/pg_hba.conf"
{ printf 'host all relay 127.0.0.1/32 scram-sha-256\nhost replication relay 127.0.0.1/32 scram-sha-256\n'
  cat "$hba"; } >"$hba.new"
cat "$hba.new" >"$hba"
psql -qAtc "SELECT pg_reload_conf()" >/dev/null
mkdir -p "$WORK/secret"
printf '%s\n' "$password" >"$WORK/secret/pgpassword"
chown -R 10001:10001 "$WORK/secret"
chmod 0500 "$WORK/secret"
chmod 0400 "$WORK/secret/pgpassword"

# --- the development Kafka, from the same image ----------------------------------------------
podman run -d --name wr-check-broker --network host --read-only --entrypoint walrelay-devbroker \
  "$IMAGE" --brokers 3 --topic outbox.payment:8 >/dev/null
BOOTSTRAP=""
for _ in $(seq 100); do
  BOOTSTRAP=$(podman logs wr-check-broker 2>/dev/null | sed -n 's/^bootstrap=//p' | head -1)
  [ -n "$BOOTSTRAP" ] && break
  sleep 0.1
done
[ -n "$BOOTSTRAP" ] || fail "walrelay-devbroker in the image printed no bootstrap line: $(podman logs wr-check-broker 2>&1 | tail -5)"
METRICS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "PostgreSQL 127.0.0.1:$PGPORT (role relay, scram), Kafka $BOOTSTRAP (walrelay-devbroker in the image)"

# --- the configuration, as the chart mounts it -----------------------------------------------
cat >"$WORK/walrelay.toml" <<EOF
[source]
dsn = "host=127.0.0.1 port=$PGPORT dbname=$PGDATABASE user=relay"
password_file = "/run/secrets/walrelay/pgpassword"

[kafka]
bootstrap_servers = "$BOOTSTRAP"

[flow]
status_interval_ms = 200

[ops]
metrics_address = "127.0.0.1:$METRICS_PORT"
log_format = "json"
EOF
chmod 0444 "$WORK/walrelay.toml"
RUN_AS_CHART=(--network host --read-only --tmpfs /tmp
  -v "$WORK/walrelay.toml:/etc/walrelay/walrelay.toml:ro" -v "$WORK/secret:/run/secrets/walrelay:ro")

say "walrelay setup in the container (config and password from mounted files)"
# Without the password file the role cannot log in: shows the file is what let setup in.
sed '/^password_file/d' "$WORK/walrelay.toml" >"$WORK/nopassword.toml"
chmod 0444 "$WORK/nopassword.toml"
if out=$(podman run --rm --network host --read-only -v "$WORK/nopassword.toml:/etc/walrelay/walrelay.toml:ro" \
    "$IMAGE" setup --config /etc/walrelay/walrelay.toml --create-tables 2>&1); then
  fail "setup without the password file succeeded: the role needs no password, the check proves nothing"
fi
echo "$out" | grep -q "password" || fail "setup without the password failed for another reason: $out"
podman run --rm "${RUN_AS_CHART[@]}" "$IMAGE" setup --config /etc/walrelay/walrelay.toml --create-tables \
  >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log"; fail "walrelay setup in the container failed"; }
psql -q -v ON_ERROR_STOP=1 -c "CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id uuid NOT NULL DEFAULT gen_random_uuid(), wallet text NOT NULL, amount bigint NOT NULL,
  seq bigint NOT NULL)"

say "walrelay run and walrelay-ledger in containers (read-only root filesystem, host network)"
podman run -d --name wr-check-relay "${RUN_AS_CHART[@]}" "$IMAGE" run --config /etc/walrelay/walrelay.toml >/dev/null
podman run -d --name wr-check-ledger --network host --read-only --tmpfs /tmp --entrypoint walrelay-ledger "$IMAGE" \
  --bootstrap "$BOOTSTRAP" --group ledger --topic outbox.payment \
  --conninfo "host=127.0.0.1 port=$PGPORT dbname=$PGDATABASE user=$PGUSER" \
  --replay-window-ms 86400000 --describe-configs-timeout-ms 1000 --stats-interval-ms 1000 \
  --property session.timeout.ms=6000 --property heartbeat.interval.ms=500 >/dev/null
for probe in healthz readyz; do
  code=000
  for _ in $(seq 300); do
    code=$(curl -s -o "$WORK/$probe" -w '%{http_code}' "http://127.0.0.1:$METRICS_PORT/$probe" || true)
    [ "$code" = 200 ] && break
    sleep 0.1
  done
  [ "$code" = 200 ] || fail "/$probe answered $code: $(cat "$WORK/$probe" 2>/dev/null); relay log: $(podman logs wr-check-relay 2>&1 | tail -5)"
done
say "/healthz and /readyz: 200 ($(head -c 120 "$WORK/readyz"))"

running() { [ "$(podman container inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
stop_relay() {  # podman stop (SIGTERM); the relay must exit 0 having said it stopped cleanly
  podman stop -t 60 wr-check-relay >/dev/null
  local rc
  rc=$(podman inspect --format '{{.State.ExitCode}}' wr-check-relay)
  podman logs wr-check-relay >"$WORK/relay.log" 2>&1
  [ "$rc" = 0 ] || fail "the relay exited $rc on SIGTERM"
  [ "$(grep -c "walrelay stopped cleanly" "$WORK/relay.log")" = "$1" ] ||
    fail "the relay's log does not say 'walrelay stopped cleanly' $1 time(s)"
}
# What the slot would send its next reader: the outbox inserts ('I' messages of pgoutput)
# past its confirmed position.
unsent() {
  psql -Atc "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('walrelay', NULL, NULL,
    'proto_version', '1', 'publication_names', 'walrelay_outbox') WHERE get_byte(data, 0) = 73"
}
in_kafka() {  # event ids in the topic: all, then distinct
  kcat -C -b "$BOOTSTRAP" -t outbox.payment -o beginning -e -q -f '%h\n' 2>/dev/null |
    tr ',' '\n' | sed -n 's/^event_id=//p' | sort | tee "$WORK/kafka-ids" | wc -l
}

say "writing $EVENTS payments (a payment row and its outbox row per transaction); SIGTERM to the relay halfway"
psql -q -v ON_ERROR_STOP=1 -v events="$EVENTS" -f scripts/lib/billing_writes.sql >/dev/null &
WRITER=$!
while kill -0 "$WRITER" 2>/dev/null && [ "$(psql -Atc "SELECT count(*) FROM payments")" -lt $((EVENTS / 2)) ]; do
  sleep 0.05
done
stop_relay 1
wait "$WRITER" || fail "the billing writes failed"
# Decoding reads flushed WAL only, and pgtmp's server commits asynchronously: wait until
# the last commit is flushed, so the slot's count below covers every write.
end_lsn=$(psql -Atc "SELECT pg_current_wal_insert_lsn()")
until [ "$(psql -Atc "SELECT pg_current_wal_flush_lsn() >= '$end_lsn'")" = t ]; do sleep 0.1; done
# A clean stop confirms exactly what Kafka acknowledged: what is in Kafka and what the slot
# still holds add up to what was written, each event once (more: acked events were not
# confirmed and would be sent again; fewer: confirmed events never reached Kafka).
UNSENT=$(unsent)
RECORDS=$(in_kafka)
DISTINCT=$(uniq "$WORK/kafka-ids" | wc -l)
say "stopped mid-stream: $RECORDS records in Kafka ($DISTINCT distinct events), $UNSENT outbox rows unconfirmed in the slot, $EVENTS written"
[ "$RECORDS" -gt 0 ] && [ "$UNSENT" -gt 0 ] ||
  fail "the stop did not land mid-stream ($RECORDS published, $UNSENT unconfirmed): the check below would prove nothing"
[ "$RECORDS" = "$DISTINCT" ] || fail "$((RECORDS - DISTINCT)) events twice in Kafka"
[ $((RECORDS + UNSENT)) = "$EVENTS" ] ||
  fail "published $RECORDS + unconfirmed $UNSENT != written $EVENTS: the clean stop confirmed $( [ $((RECORDS + UNSENT)) -gt "$EVENTS" ] && echo "less than Kafka acknowledged (repeats on restart)" || echo "more than Kafka acknowledged (loss)")"

say "restarting the relay container; the rest must arrive, nothing twice"
podman start wr-check-relay >/dev/null
applied=0
for _ in $(seq 120); do
  applied=$(psql -Atc "SELECT count(DISTINCT event_id) FROM wallet_credit" 2>/dev/null || echo 0)
  [ "$applied" -ge "$EVENTS" ] && break
  for c in "${CONTAINERS[@]}"; do running "$c" || fail "container $c stopped while $applied of $EVENTS payments were applied"; done
  sleep 1
done
read -r TOTAL LOST TWICE BAD_BALANCE DISORDER < <(psql -At -F ' ' -f scripts/lib/ledger_verdict.sql)
say "ledger verdict: $TOTAL written, $LOST lost, $TWICE applied twice, $BAD_BALANCE wrong balances, $DISORDER out of order"
[ "$TOTAL" = "$EVENTS" ] || fail "$TOTAL payments written, expected $EVENTS"
[ "$LOST" = 0 ] && [ "$TWICE" = 0 ] && [ "$BAD_BALANCE" = 0 ] && [ "$DISORDER" = 0 ] ||
  fail "the ledger's verdict is not clean"
stop_relay 2
UNSENT=$(unsent)
RECORDS=$(in_kafka)
DISTINCT=$(uniq "$WORK/kafka-ids" | wc -l)
[ "$UNSENT" = 0 ] && [ "$RECORDS" = "$EVENTS" ] && [ "$DISTINCT" = "$EVENTS" ] ||
  fail "after the second stop: $RECORDS records, $DISTINCT distinct events in Kafka, $UNSENT unconfirmed (expected $EVENTS, $EVENTS, 0)"
say "second SIGTERM: $RECORDS records in Kafka, each event once, 0 unconfirmed in the slot"
say "PASS: image $IMAGE ($(( size / 1000000 )) MB, uid 10001, build ${t_build}s), $EVENTS events through it, total $(( $(date +%s) - T0 ))s"
