#!/usr/bin/env bash
# librdkafka-backport.sh: Debian trixie's own source package of librdkafka 2.8.0, built on
# Debian 12 into .deb files once and cached (issue 46 part 3). Nothing is installed on the
# machine: the runtime library is unpacked beside the packages, and a walrelay built
# against Debian 12's librdkafka 2.0.2 runs on 2.8.0 through LD_LIBRARY_PATH (same soname,
# librdkafka.so.1; the package's dependency is librdkafka1 (>= 2.0.2)).
#
#   scripts/librdkafka-backport.sh            build when not cached; prints the lines
#                                             debs=DIR and libdir=DIR
#   eval "$(scripts/librdkafka-backport.sh)"  then LD_LIBRARY_PATH=$libdir walrelay ...
#
# The source: librdkafka_2.8.0-1 from trixie's main (deb.debian.org pool), its three files
# checked against the SHA-256 sums trixie's Sources index lists (pinned below), unpacked
# with dpkg-source and built with dpkg-buildpackage -b (DEB_BUILD_OPTIONS=nocheck: the
# package's own test suite needs a Kafka cluster). Build dependencies come from Debian 12
# (debhelper-compat 13, libssl, libsasl2, libcurl, zstd, lz4, rapidjson); root or sudo
# installs the missing ones. 4.5 minutes the first time here (2 cores, niced beside a build).
# Env: WALRELAY_CACHE (~/.cache/walrelay), JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=2.8.0
REVISION=1
POOL=http://deb.debian.org/debian/pool/main/libr/librdkafka
declare -A SHA256=(
  ["librdkafka_${VERSION}-${REVISION}.dsc"]=0e9f099090072fe33da42303e1878f7f4713f91b94aa6523a9d630fe67eb2b51
  ["librdkafka_${VERSION}.orig.tar.gz"]=5bd1c46f63265f31c6bfcedcde78703f77d28238eadf23821c2b43fc30be3e25
  ["librdkafka_${VERSION}-${REVISION}.debian.tar.xz"]=85381d3e0f2f8a5f871a408df59ed7ee3071a7bdbce9adefabfc5d3324418ed1
)
BUILD_DEPS=(debhelper dpkg-dev pkgconf libcurl4-openssl-dev liblz4-dev libsasl2-dev libssl-dev
  libzstd-dev python3 rapidjson-dev zlib1g-dev)
CACHE=${WALRELAY_CACHE:-$HOME/.cache/walrelay}/librdkafka-$VERSION-$REVISION
JOBS=${JOBS:-2}
ARCH=$(dpkg --print-architecture)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
say() { echo "librdkafka-backport: $*" >&2; }
fail() { say "$*"; exit 1; }

lib="$CACHE/root/usr/lib/$MULTIARCH/librdkafka.so.1"
if [ ! -e "$lib" ]; then
  rm -rf "$CACHE.part"
  mkdir -p "$CACHE.part/src"
  say "building librdkafka $VERSION-$REVISION (Debian trixie's source package) on $(. /etc/os-release; echo "$PRETTY_NAME"), once; cached in $CACHE"
  missing=()
  for p in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    say "installing build dependencies from Debian 12: ${missing[*]}"
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
      fail "apt-get install ${missing[*]} failed"
  fi
  for f in "${!SHA256[@]}"; do
    curl -fsS --retry 3 -o "$CACHE.part/src/$f" "$POOL/$f" || fail "download of $POOL/$f failed"
    echo "${SHA256[$f]}  $CACHE.part/src/$f" | sha256sum -c --quiet - ||
      fail "$f does not have the SHA-256 trixie's Sources lists (${SHA256[$f]})"
  done
  # The sums above are checked instead of the .dsc's signature (no Debian keyring needed).
  (cd "$CACHE.part/src" && dpkg-source --no-check -x "librdkafka_${VERSION}-${REVISION}.dsc" tree >/dev/null)
  (cd "$CACHE.part/src/tree" &&
    DEB_BUILD_OPTIONS="nocheck parallel=$JOBS" dpkg-buildpackage -b -uc -us >"$CACHE.part/build.log" 2>&1) ||
    { tail -30 "$CACHE.part/build.log" >&2; fail "dpkg-buildpackage failed (log above; all of it in $CACHE.part/build.log)"; }
  mkdir -p "$CACHE.part/debs" "$CACHE.part/root"
  mv "$CACHE.part"/src/*.deb "$CACHE.part/debs/"
  dpkg -x "$CACHE.part/debs/librdkafka1_${VERSION}-${REVISION}_${ARCH}.deb" "$CACHE.part/root"
  rm -rf "$CACHE.part/src" "$CACHE"
  mv "$CACHE.part" "$CACHE"
  [ -e "$lib" ] || fail "the built librdkafka1 package has no $lib"
fi
# What the library says it is, as a program linked against it sees it.
got=$(LD_LIBRARY_PATH="$(dirname "$lib")" python3 -c '
import ctypes, sys
l = ctypes.CDLL(sys.argv[1]); l.rd_kafka_version_str.restype = ctypes.c_char_p
print(l.rd_kafka_version_str().decode())' "$lib")
[ "$got" = "$VERSION" ] || fail "$lib says it is librdkafka $got, expected $VERSION"
echo "debs=$CACHE/debs"
echo "libdir=$(dirname "$lib")"
