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
# When start fails it prints `false` for that eval, so a caller under `set -e` stops there
# instead of going on with PGHOST unset.
# The port is chosen at the first successful start (scripts/lib/ports.sh: below the
# kernel's ephemeral range) and kept by every later start; a first start whose port was
# taken in the meantime retries on another one.
# Env: WALRELAY_PG_BINDIR (default /usr/lib/postgresql/15/bin), WALRELAY_PORT_RANGE.
set -euo pipefail

BINDIR="${WALRELAY_PG_BINDIR:-/usr/lib/postgresql/15/bin}"

die() {
  echo "pgtmp.sh: $*" >&2
  [[ "${cmd:-}" != start ]] || echo false  # for the caller's eval "$(pgtmp.sh start ...)"
  exit 1
}
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

# shellcheck source=lib/ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

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
      as_user tee -a "$DATA/postgresql.conf" >/dev/null <<CONF

# pgtmp.sh (the port is set in pgtmp_extra.conf)
listen_addresses = '127.0.0.1'
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
    settings="# written by pgtmp.sh start"$'\n'
    for kv in "$@"; do
      [[ "$kv" == *=* && "${kv%%=*}" != "" ]] || die "setting '$kv' is not name=value"
      value="${kv#*=}"
      settings+="${kv%%=*} = '${value//\'/\'\'}'"$'\n'
    done
    # A port clients already know (DIR/port) is kept; a first start picks one, and picks
    # again when the server could not bind it (taken between the check and the bind).
    fixed_port=""; [[ -s "$DIR/port" ]] && fixed_port=$(port)
    for attempt in 1 2 3 4 5; do
      p=${fixed_port:-$(free_ports 1)} || die "no free TCP port (scripts/lib/ports.sh)"
      printf '%sport = %s\n' "$settings" "$p" | as_user tee "$DATA/pgtmp_extra.conf" >/dev/null
      log_before=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
      if as_user "$BINDIR/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null 2>&1; then
        echo "$p" >"$DIR/port"
        break
      fi
      if tail -c +"$((log_before + 1))" "$LOG" 2>/dev/null | grep -q "could not bind"; then
        if [[ -z "$fixed_port" && $attempt -lt 5 ]]; then
          echo "pgtmp.sh: port $p was taken before the server bound it; trying another" >&2
          continue
        fi
        [[ -n "$fixed_port" ]] &&
          die "port $p, which this server's clients know (DIR/port), is taken by another process (find it: ss -ltnp 'sport = :$p'); stop that process, or destroy $DIR to start afresh on a new port (log: $LOG)"
      fi
      tail -n 30 "$LOG" >&2 || true
      die "server did not start (log: $LOG)"
    done
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
