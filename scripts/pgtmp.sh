#!/usr/bin/env bash
# pgtmp.sh: a throwaway PostgreSQL for quickstarts and benchmarks (the shell twin of
# tests/support/pg_cluster.h).
#
#   pgtmp.sh start   DIR [name=value ...]  initdb (first time) + start; prints export lines
#   pgtmp.sh stop    DIR                   fast shutdown (no-op when stopped)
#   pgtmp.sh status  DIR                   exit 0 and export lines when running, 3 when not
#   pgtmp.sh destroy DIR                   stop and remove DIR
#
# The server listens on 127.0.0.1:<free port> and on a unix socket in DIR, with
# wal_level=logical, 20 slots/senders, fsync off, role walrelay (trust). Extra settings
# given to `start` replace those of the previous start (DIR/data/pgtmp_extra.conf).
# As root, DIR is handed to the `postgres` user (else `nobody`) and the server runs as it;
# every parent of DIR must be traversable by that user.
# Usage: eval "$(scripts/pgtmp.sh start /tmp/pg wal_sender_timeout=10s)"
# Env: WALRELAY_PG_BINDIR (default /usr/lib/postgresql/15/bin).
set -euo pipefail

BINDIR="${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin}"

die() { echo "pgtmp.sh: $*" >&2; exit 1; }
usage() { sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 2 ]] || usage
cmd="$1"; dir_arg="$2"; shift 2

RUN_USER=""
if [[ "$(id -u)" == 0 ]]; then
  if id postgres >/dev/null 2>&1; then RUN_USER=postgres
  elif id nobody >/dev/null 2>&1; then RUN_USER=nobody
  else die "running as root and neither 'postgres' nor 'nobody' exists"; fi
fi

as_user() {
  if [[ -n "$RUN_USER" ]]; then
    if command -v runuser >/dev/null 2>&1; then runuser -u "$RUN_USER" -- "$@"
    else su -s /bin/sh "$RUN_USER" -c "$(printf '%q ' "$@")"; fi
  else
    "$@"
  fi
}

if [[ "$cmd" == start ]]; then mkdir -p "$dir_arg" || die "cannot create $dir_arg"; fi
DIR="$(cd "$dir_arg" 2>/dev/null && pwd -P)" || DIR="$dir_arg"
DATA="$DIR/data"
LOG="$DIR/server.log"

running() { [[ -f "$DATA/postmaster.pid" ]] && as_user "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
port() { cat "$DIR/port"; }
print_env() {
  echo "export PGHOST=$DIR PGPORT=$(port) PGUSER=walrelay PGDATABASE=postgres"
}

free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 40000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  die "no free TCP port found"
}

case "$cmd" in
  start)
    [[ -x "$BINDIR/initdb" ]] || die "PostgreSQL binaries not found in $BINDIR; install postgresql-15 or set WALRELAY_PG_BINDIR"
    if [[ -n "$RUN_USER" ]]; then
      chown "$RUN_USER:" "$DIR"; chmod 700 "$DIR"
      as_user test -w "$DIR" || die "user $RUN_USER cannot reach $DIR (a parent directory is not traversable); pick a DIR under /tmp"
    fi
    if running; then
      [[ $# -eq 0 ]] || echo "pgtmp.sh: already running; settings not applied (stop first)" >&2
      print_env; exit 0
    fi
    if [[ ! -f "$DATA/PG_VERSION" ]]; then
      as_user "$BINDIR/initdb" -D "$DATA" -U walrelay --auth=trust -E UTF8 --locale=C \
        --no-sync --no-instructions >"$DIR/initdb.log" 2>&1 \
        || { tail -n 30 "$DIR/initdb.log" >&2; die "initdb failed (log: $DIR/initdb.log)"; }
      free_port >"$DIR/port"
      as_user tee -a "$DATA/postgresql.conf" >/dev/null <<CONF

# pgtmp.sh
listen_addresses = '127.0.0.1'
port = $(port)
unix_socket_directories = '$DIR'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
fsync = off
synchronous_commit = off
full_page_writes = off
log_line_prefix = '%m [%p] '
include_if_exists = 'pgtmp_extra.conf'
CONF
    fi
    extra="# written by pgtmp.sh start"$'\n'
    for kv in "$@"; do
      [[ "$kv" == *=* && "${kv%%=*}" != "" ]] || die "setting '$kv' is not name=value"
      value="${kv#*=}"
      extra+="${kv%%=*} = '${value//\'/\'\'}'"$'\n'
    done
    printf '%s' "$extra" | as_user tee "$DATA/pgtmp_extra.conf" >/dev/null
    if ! as_user "$BINDIR/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null 2>&1; then
      tail -n 30 "$LOG" >&2 || true
      die "server did not start (log: $LOG)"
    fi
    print_env
    ;;
  stop)
    if running; then as_user "$BINDIR/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; fi
    ;;
  status)
    if running; then print_env; exit 0; fi
    echo "pgtmp.sh: no server running in $DIR" >&2; exit 3
    ;;
  destroy)
    if running; then as_user "$BINDIR/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null; fi
    [[ ! -e "$DIR" ]] || rm -rf -- "$DIR"
    ;;
  *) usage ;;
esac
