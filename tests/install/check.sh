#!/usr/bin/env bash
# Installs the build tree BUILD into a scratch prefix, then builds tests/install/consumer/
# against it twice, with find_package(walrelay) and with pkg-config, and runs both.
#   tests/install/check.sh BUILD_DIR
set -euo pipefail
BUILD=$1
SRC=$(cd "$(dirname "$0")/consumer" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
test -x "$WORK/prefix/bin/walrelay"
"$WORK/prefix/bin/walrelay" --help >/dev/null

echo "--- find_package(walrelay)"
cmake -S "$SRC" -B "$WORK/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/cmake-build" >/dev/null
"$WORK/cmake-build/consumer"

echo "--- pkg-config walrelay-inbox walrelay-outbox"
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig:$(find "$WORK/prefix" -name pkgconfig -type d | tr '\n' ':')"
# shellcheck disable=SC2046
c++ -std=c++20 "$SRC/consumer.cc" -o "$WORK/consumer-pc" \
  $(pkg-config --cflags --libs walrelay-inbox walrelay-outbox)
"$WORK/consumer-pc"
