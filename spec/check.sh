#!/usr/bin/env bash
# spec/check.sh: model-checks walrelay's delivery protocol (spec/walrelay.pml) with SPIN.
#
#   spec/check.sh           every budget of the correct model (each must be explored whole
#                           with no error) and every BUG_ variant (each must produce a
#                           counterexample); about 2 minutes on 2 cores
#   spec/check.sh --quick   the budgets that take under 10 s, and the variants
#
# Installs Debian's spin (6.5.2) when missing. Each check compiles SPIN's verifier (pan)
# in its own directory under $WORK (default /tmp/walrelay-spec) and keeps its output;
# a failed variant leaves its counterexample there (spin -t -p replays it).
# Env: WORK, JOBS (checks at once, default 2), PAN_MEMORY_MB (per check, default 4096).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODEL=$ROOT/spec/walrelay.pml
WORK=${WORK:-/tmp/walrelay-spec}
JOBS=${JOBS:-2}
PAN_MEMORY_MB=${PAN_MEMORY_MB:-4096}
QUICK=0; [[ ${1:-} == --quick ]] && QUICK=1
SPIN_VERSION=6.5.2

if ! command -v spin >/dev/null 2>&1; then
  echo "spec/check.sh: installing spin (Debian's package, $SPIN_VERSION)" >&2
  if [[ $(id -u) == 0 ]]; then SUDO=(); else SUDO=(sudo); fi
  "${SUDO[@]}" apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq spin gcc >/dev/null
fi
spin -V | grep -q "Spin Version $SPIN_VERSION" ||
  { echo "spec/check.sh: spin $SPIN_VERSION expected, found: $(spin -V)" >&2; exit 1; }

# name | expect (pass: explored whole with no error; fail:INVARIANT a counterexample that
# breaks that invariant, named as in walrelay.pml) | quick | flags | premises: statements
# (as pan prints them) that a passing budget must have reached, so that its faults did
# happen in the explored space (a budget whose fault is never taken would pass vacuously)
CHECKS=(
  "one-relay-crashes-and-a-lost-slot|pass|1|-DRELAYS=1 -DMAX_CRASHES=2 -DMAX_LOSSES=1 -DMAX_TAKEOVERS=0|crashes = (crashes+1);losses = (losses+1);origin = 1;bound = snap"
  "one-relay-slot-made-again-by-setup|pass|1|-DRELAYS=1 -DMAX_CRASHES=2 -DMAX_RECREATE=1 -DMAX_TAKEOVERS=0|crashes = (crashes+1);recreations = (recreations+1);bound = snap"
  "one-relay-topic-outages|pass|1|-DRELAYS=1 -DMAX_CRASHES=1 -DMAX_OUTAGES=2 -DMAX_TAKEOVERS=0|outages = (outages+1);dead[((pos*2)+k)] = 1;streak[r] = 0"
  "standby-take-over-and-a-crash|pass|0|-DRELAYS=2 -DMAX_CRASHES=1 -DMAX_TAKEOVERS=1|crashes = (crashes+1);takeovers = (takeovers+1)"
  "exactly-once-crashes-and-a-coordinator-abort|pass|1|-DEXACTLY_ONCE -DRELAYS=1 -DMAX_CRASHES=2 -DMAX_TAKEOVERS=0 -DMAX_COORD=1|crashes = (crashes+1);coord_aborts = (coord_aborts+1);checkpoint = pos"
  "exactly-once-zombie-fenced|pass|0|-DEXACTLY_ONCE -DRELAYS=2 -DMAX_CRASHES=0 -DMAX_TAKEOVERS=1 -DMAX_COORD=1|takeovers = (takeovers+1);coord_aborts = (coord_aborts+1);((myepoch!=epoch))"
  "bug-confirm-before-ack|fail:confirmed_never_passes_an_unacknowledged_event|1|-DBUG_CONFIRM_BEFORE_ACK -DRELAYS=1 -DMAX_TAKEOVERS=0|"
  "bug-trust-a-slot-of-unknown-origin|fail:confirmed_never_passes_an_unacknowledged_event|1|-DBUG_TRUST_UNKNOWN_SLOT -DRELAYS=1 -DMAX_RECREATE=1 -DMAX_TAKEOVERS=0|"
  "bug-recovery-redo-drops-its-slot|fail:confirmed_never_passes_an_unacknowledged_event|1|-DBUG_REDO_RECREATES_SLOT -DRELAYS=1 -DMAX_CRASHES=2 -DMAX_LOSSES=1 -DMAX_TAKEOVERS=0|"
  "bug-dead-letter-bound-since-first-failure|fail:dead_letter_only_after_a_continuous_failure|1|-DBUG_BOUND_SINCE_FIRST_FAILURE -DRELAYS=1 -DMAX_OUTAGES=2 -DMAX_TAKEOVERS=0|"
  "bug-exactly-once-ignores-the-checkpoint|fail:exactly_once_no_duplicate_visible|1|-DEXACTLY_ONCE -DBUG_IGNORE_CHECKPOINT -DRELAYS=1 -DMAX_TAKEOVERS=0|"
  "bug-exactly-once-confirms-before-commit|fail:confirmed_never_passes_an_unacknowledged_event|1|-DEXACTLY_ONCE -DBUG_CONFIRM_BEFORE_COMMIT -DRELAYS=1 -DMAX_TAKEOVERS=0|"
)

run_check() {  # name expect premises flags...: one verdict line; exit 0 when as expected
  local name=$1 expect=$2 premises=$3; shift 3
  local dir=$WORK/$name
  rm -rf "$dir"; mkdir -p "$dir"; cp "$MODEL" "$dir/"
  local start=$SECONDS
  (
    cd "$dir"
    spin -a "$@" walrelay.pml >spin.log 2>&1 &&
      gcc -O2 -w -DSAFETY -DNOFAIR -DCOLLAPSE -DMEMLIM="$PAN_MEMORY_MB" -o pan pan.c >gcc.log 2>&1 &&
      ./pan -m20000 -w24 >pan.log 2>&1
  ) || true
  local log=$dir/pan.log errors states what
  if [[ ! -s $log ]]; then
    echo "FAIL  $name: the verifier was not built ($(tail -n 3 "$dir"/spin.log "$dir"/gcc.log 2>/dev/null | tr '\n' ' '))"
    return 1
  fi
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log" | head -n 1)
  states=$(awk '/states, stored/ { print $1; exit }' "$log")
  if grep -q -E "max search depth too small|out of memory|Search not completed" "$log" && [[ ${errors:-0} == 0 ]]; then
    echo "FAIL  $name: the search did not finish ($(grep -m1 -E "too small|out of memory|not completed" "$log")); $dir/pan.log"
    return 1
  fi
  if [[ $expect == pass ]]; then
    if [[ $errors == 0 ]]; then
      local unreached premise
      unreached=$(sed -n '/^unreached in proctype/,$p' "$log")
      IFS=';' read -r -a premise <<<"$premises"
      for p in "${premise[@]}"; do
        if grep -qF "\"$p\"" <<<"$unreached"; then
          echo "FAIL  $name: no error, but its premise never happened: \"$p\" was never reached ($log)"
          return 1
        fi
      done
      echo "ok    $name: $states states explored, no error, premises reached (${premises//;/, }) ($(( SECONDS - start )) s)"
      return 0
    fi
    what=$(grep -m1 -E "assertion violated|invalid end state" "$log" || echo "error")
    echo "FAIL  $name: $what; replay: cd $dir && spin -t -p $* walrelay.pml"
    return 1
  fi
  local invariant=${expect#fail:}
  if [[ ${errors:-0} -ge 1 ]] && [[ -f $dir/walrelay.pml.trail ]]; then
    what=$(grep -m1 -E "assertion violated|invalid end state" "$log" | sed 's/^pan:1: //')
    if [[ $what == *"$invariant"* ]]; then
      echo "ok    $name: counterexample breaks $invariant as required (at ${what##*(at }; replay: cd $dir && spin -t -p $* walrelay.pml)"
      return 0
    fi
    echo "FAIL  $name: a counterexample, but not of $invariant: $what"
    return 1
  fi
  echo "FAIL  $name: the defect went unnoticed ($states states, no error): the model cannot fail on it"
  return 1
}

mkdir -p "$WORK"
echo "spec/check.sh: $(spin -V | head -n 1); model spec/walrelay.pml; results in $WORK" >&2
names=(); failed=0
for entry in "${CHECKS[@]}"; do
  IFS='|' read -r name expect quick flags premises <<<"$entry"
  [[ $QUICK == 1 && $quick == 0 ]] && { echo "skip  $name (--quick)"; continue; }
  # shellcheck disable=SC2086 # the flags are words
  run_check "$name" "$expect" "$premises" $flags >"$WORK/$name.verdict" 2>&1 &
  names+=("$name")
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
done
wait || true
for name in "${names[@]}"; do
  cat "$WORK/$name.verdict"
  grep -q "^ok " "$WORK/$name.verdict" || failed=1
done
if [[ $failed == 1 ]]; then
  echo "spec/check.sh: FAILED (see above)"; exit 1
fi
echo "spec/check.sh: every budget explored with no error; every BUG_ variant caught"
