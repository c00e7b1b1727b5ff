#!/usr/bin/env bash
# Builds walrelay's Debian packages from a production tree (no tests, no failpoints),
# installs them on this machine, checks them as a user would, removes them (purge) and
# checks that nothing is left. Run as root (CI does); it refuses to touch a machine where a
# walrelay package is already installed.
#   scripts/package-check.sh [BUILD_DIR]   (default build/pkg; the .deb files stay in it)
# Checks: walrelay --version names the version and the commit; `systemd-analyze verify` of
# the installed unit; the walrelay system user; a service outside the tree builds against
# the installed walrelay-dev (find_package and pkg-config) and runs; after purge no file of
# either package and no walrelay user or group remain.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/pkg}
JOBS=${JOBS:-2}
fail() { echo "package-check: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (dpkg -i); CI runs it as root"
for p in walrelay walrelay-dev; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "installed"; then
    fail "package $p is installed on this machine; this check would remove it"
  fi
done

echo "--- production build ($BUILD: -DWALRELAY_BUILD_TESTS=OFF -DWALRELAY_BUILD_BENCH=OFF)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWALRELAY_WERROR=ON \
  -DWALRELAY_BUILD_TESTS=OFF -DWALRELAY_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS"
version=$(sed -n 's/^#define WALRELAY_VERSION "\(.*\)"/\1/p' "$BUILD/generated/walrelay/version.h")
commit=$(sed -n 's/^#define WALRELAY_GIT_COMMIT "\(.*\)"/\1/p' "$BUILD/generated/walrelay/version.h")
arch=$(dpkg --print-architecture)
rm -f "$BUILD"/*.deb
(cd "$BUILD" && cpack -G DEB >/dev/null)
deb="$BUILD/walrelay_${version}_${arch}.deb"
dev="$BUILD/walrelay-dev_${version}_${arch}.deb"
[ -f "$deb" ] && [ -f "$dev" ] || fail "cpack did not make $deb and $dev: $(ls "$BUILD"/*.deb)"
ls -l "$deb" "$dev"

echo "--- install"
dpkg -i "$deb" "$dev" >/dev/null
files=$(mktemp)
trap 'rm -f "$files"' EXIT
dpkg -L walrelay walrelay-dev | while read -r f; do [ -d "$f" ] || echo "$f"; done >"$files"
echo "$(wc -l <"$files") files installed"

echo "--- walrelay --version"
got=$(/usr/bin/walrelay --version)
echo "$got"
[ "$(head -n 1 <<<"$got")" = "walrelay $version (commit $commit)" ] ||
  fail "walrelay --version printed '$got', expected 'walrelay $version (commit $commit)' first"
# The second line names the libraries loaded: the package's dependencies, resolved.
rdk=$(dpkg-query -W -f '${Version}' librdkafka1 | sed 's/-.*//')
grep -qx "librdkafka $rdk, libpq [0-9]*\.[0-9]*" <<<"$(sed -n 2p <<<"$got")" ||
  fail "walrelay --version's second line is '$(sed -n 2p <<<"$got")', expected 'librdkafka $rdk, libpq N.N'"

echo "--- the walrelay system user"
entry=$(getent passwd walrelay) || fail "the package made no walrelay user"
uid=$(echo "$entry" | cut -d: -f3)
[ "$uid" -lt 1000 ] || fail "walrelay's uid $uid is not a system uid"
[ "$(echo "$entry" | cut -d: -f7)" = /usr/sbin/nologin ] || fail "walrelay has a login shell: $entry"

if command -v systemd-analyze >/dev/null; then
  echo "--- systemd-analyze verify /usr/lib/systemd/system/walrelay.service"
  out=$(systemd-analyze verify /usr/lib/systemd/system/walrelay.service 2>&1 || true)
  [ -z "$out" ] || fail "systemd-analyze verify: $out"
  grep -q '^ExecStart=/usr/bin/walrelay run' /usr/lib/systemd/system/walrelay.service ||
    fail "the installed unit does not start /usr/bin/walrelay"
fi

echo "--- a service built against walrelay-dev (find_package, then pkg-config)"
work=$(mktemp -d)
cmake -S tests/install/consumer -B "$work/cmake" -G Ninja >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/consumer"
# shellcheck disable=SC2046
c++ -std=c++20 tests/install/consumer/consumer.cc -o "$work/consumer-pc" \
  $(pkg-config --cflags --libs walrelay-inbox walrelay-outbox)
"$work/consumer-pc"
rm -rf "$work"

echo "--- purge"
dpkg --purge walrelay-dev walrelay >/dev/null
left=$(while read -r f; do [ -e "$f" ] && echo "$f"; done <"$files" || true)
[ -z "$left" ] || fail "files left after purge: $left"
! getent passwd walrelay >/dev/null || fail "the walrelay user is left after purge"
! getent group walrelay >/dev/null || fail "the walrelay group is left after purge"
echo "package-check: walrelay_${version}_${arch}.deb and walrelay-dev: built, installed," \
  "checked, purged; nothing left"
