#!/usr/bin/env bash
# soak.sh: an hour of steady writes on the Apache Kafka cluster with a fault every few
# minutes, then the chaos verdict and a verdict on the processes' resources (issue 45). Not
# in CI (it takes the machine for over an hour); run it before a release, and after a
# change to memory, connections or threads.
#
#   bash scripts/soak.sh
#
# What runs: scripts/chaos.sh on Apache Kafka (two relays on one slot, two ledger
# consumers, pgbench writing SOAK_RATE transactions per second, one payment and its event
# each: CHAOS_WRITER=pgbench) for SOAK_S seconds, the relays reaching PostgreSQL and
# every broker through Toxiproxy (CHAOS_NET_FAULTS=1). The schedule: a kill -9 of the
# streaming relay and a broker kill -9 and restart in the first 7 minutes, then, every
# 2.5-4 minutes, a black hole on the path to PostgreSQL (60 s) or to one broker (30 s),
# 200 +- 50 ms of latency with sliced streams on every path (120 s), or resets on every
# path every 5 s (60 s); nothing in the last 5 minutes. Every 10 s each relay's and
# ledger's RSS, C heap in use and retained, descriptors, threads and CPU time are sampled.
# CHAOS_SOAK_FAULTS and CHAOS_FAULT_GAP_S (chaos.sh) change the schedule, e.g. one fault
# repeated: CHAOS_SOAK_FAULTS=net-broker-blackhole:30 CHAOS_FAULT_GAP_S=30 SOAK_S=1800.
#
# The verdict (exit 0 only when both pass):
#   the chaos verdict: 0 lost, 0 phantom, 0 out of order per wallet in Kafka; 0 lost,
#     0 applied twice, every balance exact in the ledger; every scheduled fault executed
#     with its evidence; walrelay audit agrees id for id;
#   resources (scripts/lib/soak_report.py): over the last three quarters of the run, for
#     every process that lived through them, heap in use growth <= 5 % (the leak signal),
#     RSS growth <= 5 % or beyond it only by what the heap in use and the allocator's
#     retained memory account for, no growth of open descriptors or threads.
# Output in SOAK_OUT (default bench/soak): report.md, soak.svg, samples.tsv, chaos.txt.
#
# Env: SOAK_S (3600), SOAK_RATE (2000), SOAK_SEED (20261207), SOAK_OUT, SOAK_WORK
# (/tmp/walrelay-soak; removed at the end unless KEEP=1), BUILD_ROOT as chaos.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

SOAK_S=${SOAK_S:-3600}
RATE=${SOAK_RATE:-2000}
SEED=${SOAK_SEED:-20261207}
OUT=${SOAK_OUT:-bench/soak}
WORK=${SOAK_WORK:-/tmp/walrelay-soak}
mkdir -p "$OUT"

echo "soak.sh: $SOAK_S s at $RATE transactions/s on Apache Kafka, network and process faults (seed $SEED); output in $OUT"
set +e
KEEP=1 CHAOS_KAFKA=apache CHAOS_NET_FAULTS=1 CHAOS_WRITER=pgbench CHAOS_DURATION_S="$SOAK_S" CHAOS_RATE="$RATE" \
  CHAOS_SAMPLE_S=10 CHAOS_SEED="$SEED" CHAOS_WORK="$WORK" \
  bash scripts/chaos.sh 2>&1 | tee "$OUT/chaos.txt"
chaos_rc=${PIPESTATUS[0]}
set -e
cp "$WORK/samples.tsv" "$OUT/samples.tsv" 2>/dev/null || true
report_rc=0
python3 scripts/lib/soak_report.py "$OUT/samples.tsv" "$OUT/chaos.txt" "$OUT" || report_rc=$?
if [[ ${KEEP:-0} != 1 ]]; then
  bash scripts/pgtmp.sh destroy "$WORK/pg" >/dev/null 2>&1 || true
  rm -rf "$WORK"
fi
if (( chaos_rc != 0 || report_rc != 0 )); then
  echo "soak.sh: FAIL (chaos.sh exit $chaos_rc, resources exit $report_rc); see $OUT/report.md"
  exit 1
fi
echo "soak.sh: PASS; see $OUT/report.md"
