#!/usr/bin/env bash
# pg-failover-check.sh MAJOR [MODE...]: a PostgreSQL failover under a running relay, on a
# primary and a physical standby of PostgreSQL MAJOR, with a writer committing throughout
# (issue 30). MODE (default: synced unsynced on 17+, recovery before 17):
#   synced     17+: walrelay's failover slot (source.slot_failover, the default) is
#              synchronized to the standby, and the primary has synchronized_standby_slots
#              = the standby's slot: a logical walsender sends nothing the standby has not
#              flushed
#   unsynced   17+: the same without synchronized_standby_slots: what the relay may
#              publish that the new primary never had
#   recovery   no failover slot (any version; --source-slot-failover false): the slot is
#              gone on the promoted standby and walrelay's lost-slot recovery republishes
#              from the outbox table after the bound it recorded (a replicated row)
#   conflict   16+, no failover: a logical slot on a standby without hot_standby_feedback,
#              whose catalog rows the primary then vacuums away: the standby invalidates
#              it (conflicting on 16, invalidation_reason rows_removed on 17+), and
#              `walrelay lag` against the standby must call it lost with that reason
# A run: primary P and standby S (a copy of P's data directory taken while P was stopped,
# streaming from P through the physical slot `standby1`, hot_standby_feedback and
# sync_replication_slots on); `walrelay run` with both servers in its DSN
# (target_session_attrs = primary) creates its slot on P, into the dev broker; single-row
# transactions committed (synchronous_commit on) by a writer that reconnects the same way.
# Then S is frozen (SIGSTOP; in synced and unsynced only its walreceiver, so that its flush
# position stops while its slot sync goes on) and P's walsender to it terminated, for FREEZE
# seconds while the writer goes on; P is killed (kill -9 of every process of it: a crashed machine), S
# thawed and promoted; the writer and the relay carry on against S.
# Verdict, from an independent consumer (bench/e2e/e2e_probe) against the rows the new
# primary S holds: every one published (missing must be 0), each aggregate in order, the
# duplicates counted, and the phantoms: events published that S never had (rows P
# committed that never reached S). synced must have 0 phantoms and must not call its own
# slot untrusted on S (invariant 11 across the failover: S's copy of the slot is never
# confirmed past the progress record S holds); unsynced reports both.
# Every mode must also stream from S again (its slot there active) within RESUME_LIMIT
# seconds of the promotion: walrelay notices the switch in bounded time.
# Premises, checked before the verdict: the new primary holds at least MIN_COMMITTED rows
# and the primary committed at least MIN_FREEZE_ROWS while the standby was frozen (the rows
# that can become phantoms); synced's "0 phantoms" counts only beside its control: a run
# with synced must also run unsynced, and unsynced must report phantoms > 0 (the freeze
# window had writes that the relay published and the new primary never had).
# Exit 1 when a verdict fails.
#   scripts/pg-failover-check.sh 18               both failover modes on PostgreSQL 18
#   scripts/pg-failover-check.sh 17 conflict      the standby slot conflict on 17
# Needs the main build (BUILD_ROOT, default build: walrelay, walrelay-devbroker, e2e_probe).
# Env: PHASE_SECONDS (5), FREEZE (3), RESUME_LIMIT (30), MIN_COMMITTED (500),
# MIN_FREEZE_ROWS (50), WORK (/tmp/walrelay-failover).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_ROOT=${BUILD_ROOT:-build}
WALRELAY=$ROOT/$BUILD_ROOT/main/src/cli/walrelay
DEVBROKER=$ROOT/$BUILD_ROOT/main/src/kafka/walrelay-devbroker
PROBE=$ROOT/$BUILD_ROOT/main/bench/e2e/e2e_probe
PHASE_SECONDS=${PHASE_SECONDS:-5}
FREEZE=${FREEZE:-3}
RESUME_LIMIT=${RESUME_LIMIT:-30}
MIN_COMMITTED=${MIN_COMMITTED:-500}
MIN_FREEZE_ROWS=${MIN_FREEZE_ROWS:-50}
WORK_BASE=${WORK:-/tmp/walrelay-failover}
[[ $# -ge 1 ]] || { sed -n '2,/^# Env:/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
MAJOR=$1
shift
MODES=("$@")
if [[ ${#MODES[@]} -eq 0 ]]; then
  if ((MAJOR >= 17)); then MODES=(synced unsynced); else MODES=(recovery); fi
fi
if [[ " ${MODES[*]} " == *" synced "* && " ${MODES[*]} " != *" unsynced "* ]]; then
  echo "pg-failover-check.sh: synced asserts 0 phantoms only beside its control: run unsynced in the same run (e.g. $MAJOR synced unsynced)" >&2
  exit 2
fi
for m in "${MODES[@]}"; do
  case $m in
    recovery) ;;
    conflict) ((MAJOR >= 16)) ||
      { echo "pg-failover-check.sh: mode conflict needs logical decoding on a standby: PostgreSQL 16 or later (got $MAJOR)" >&2; exit 2; } ;;
    synced | unsynced) ((MAJOR >= 17)) ||
      { echo "pg-failover-check.sh: mode $m needs failover slots: PostgreSQL 17 or later (got $MAJOR)" >&2; exit 2; } ;;
    *) echo "pg-failover-check.sh: unknown mode $m (synced, unsynced, recovery, conflict)" >&2; exit 2 ;;
  esac
done
for b in "$WALRELAY" "$DEVBROKER" "$PROBE"; do
  [[ -x $b ]] || { echo "pg-failover-check.sh: build first ($b)" >&2; exit 2; }
done
BINDIR=$(bash scripts/postgres.sh bindir "$MAJOR")
export WALRELAY_PG_BINDIR=$BINDIR

log() { echo "pg-failover-check.sh: $(date +%T) $*" >&2; }
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
q() {  # q PORT SQL
  psql -X -A -t -q -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$1 user=walrelay dbname=postgres" -c "$2"
}

PIDS=()
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  [[ -n ${WORK:-} ]] || return 0
  for n in p s; do
    [[ -f $WORK/$n/data/postmaster.pid ]] && pkill -CONT -P "$(head -1 "$WORK/$n/data/postmaster.pid")" 2>/dev/null
    bash scripts/pgtmp.sh stop "$WORK/$n" >/dev/null 2>&1  # the logs stay in $WORK
  done
}
trap cleanup EXIT

# every process of the server in DIR: the postmaster and its children
server_pids() {
  local pm
  pm=$(head -1 "$1/data/postmaster.pid")
  echo "$pm" $(pgrep -P "$pm")
}

# start_pair FEEDBACK [PRIMARY_SETTING...]: the primary P (the outbox table and publication,
# writer_ctl) and the standby S streaming from it through the physical slot standby1 with
# hot_standby_feedback = FEEDBACK (and sync_replication_slots on 17+); sets PP and SP.
start_pair() {
  local feedback=$1
  shift
  eval "$(bash scripts/pgtmp.sh start "$WORK/p" synchronous_commit=on "$@")"
  local pp=$PGPORT
  psql -X -q -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$pp user=walrelay dbname=postgres" -c "
    CREATE TABLE outbox (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id uuid NOT NULL,
      aggregate_type text, aggregate_id text NOT NULL, topic text, event_type text NOT NULL,
      payload jsonb NOT NULL, headers jsonb, created_at timestamptz NOT NULL DEFAULT now());
    CREATE PUBLICATION walrelay_outbox FOR TABLE outbox;
    CREATE TABLE writer_ctl (stop boolean NOT NULL); INSERT INTO writer_ctl VALUES (false);"
  # The standby: P's data directory copied while P is stopped (what pg_basebackup would
  # give; the npm servers do not ship it), without P's slots.
  bash scripts/pgtmp.sh stop "$WORK/p"
  mkdir -p "$WORK/s"
  cp -a "$WORK/p/data" "$WORK/s/data"
  rm -rf "$WORK/s/data/pg_replslot/"* "$WORK/s/data/postmaster.pid"
  touch "$WORK/s/data/standby.signal"
  [[ $(id -u) == 0 ]] && chown -R postgres: "$WORK/s"
  local sp=$((pp + 1))
  while (exec 3<>"/dev/tcp/127.0.0.1/$sp") 2>/dev/null; do sp=$((sp + 1)); done
  echo "$sp" >"$WORK/s/port"
  eval "$(bash scripts/pgtmp.sh start "$WORK/p" synchronous_commit=on "$@")"
  q "$pp" "SELECT pg_create_physical_replication_slot('standby1')" >/dev/null
  local standby_sync=()
  ((MAJOR >= 17)) && standby_sync=(sync_replication_slots=on)
  bash scripts/pgtmp.sh start "$WORK/s" "port=$sp" "unix_socket_directories=$WORK/s" \
    "primary_conninfo=host=127.0.0.1 port=$pp user=walrelay dbname=postgres" \
    primary_slot_name=standby1 "hot_standby_feedback=$feedback" "${standby_sync[@]}" >/dev/null
  PP=$pp
  SP=$sp
}

run_mode() {
  local mode=$1
  cleanup
  WORK=$WORK_BASE.$mode
  PIDS=()
  rm -rf "$WORK"
  mkdir -p "$WORK"
  chmod 755 "$WORK"
  local sync_setting=()
  [[ $mode == synced ]] && sync_setting=(synchronized_standby_slots=standby1)
  start_pair on "${sync_setting[@]}"
  local pp=$PP sp=$SP

  "$DEVBROKER" --brokers 1 --topic outbox.payment:6 --bootstrap-file "$WORK/bootstrap" \
    </dev/null >"$WORK/devbroker.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do [[ -s $WORK/bootstrap ]] && break; sleep 0.05; done
  local boot
  boot=$(sed -n 's/^bootstrap=//p' "$WORK/bootstrap")
  local mport
  mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local both="host=127.0.0.1,127.0.0.1 port=$pp,$sp user=walrelay dbname=postgres target_session_attrs=primary connect_timeout=2"
  local failover=true
  [[ $mode == recovery ]] && failover=false
  "$WALRELAY" run --source-dsn "$both" --source-slot walrelay --source-slot-failover "$failover" \
    --kafka-bootstrap-servers "$boot" --ops-metrics-address "127.0.0.1:$mport" \
    --flow-status-interval-ms 100 >"$WORK/walrelay.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 300); do
    [[ "$(q "$pp" "SELECT active FROM pg_replication_slots WHERE slot_name = 'walrelay'")" == t ]] && break
    sleep 0.1
  done
  if [[ $mode != recovery ]]; then
    # A synchronized slot is first kept as a temporary one on the standby, which promotion
    # drops, until the standby's catalog xmin allows it ("could not synchronize
    # replication slot ... could lead to data loss" in the standby's log): the next
    # running-transactions record on the primary (every 15 s, or pg_log_standby_snapshot)
    # lets the primary's slot advance past it. Only then is the slot failover-safe.
    local ready=""
    for i in $(seq 1 90); do
      ready=$(q "$sp" "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = 'walrelay'" 2>/dev/null || true)
      [[ $ready == t ]] && break
      ((i % 2 == 0)) && q "$pp" "SELECT pg_log_standby_snapshot()" >/dev/null
      sleep 1
    done
    [[ $ready == t ]] ||
      { log "walrelay's slot is not a persistent synchronized slot on the standby after 90 s (failover slot on the primary: $(q "$pp" "SELECT failover FROM pg_replication_slots WHERE slot_name = 'walrelay'"); the standby's log: $WORK/s/server.log)"; return 1; }
    log "$mode: the standby holds walrelay's slot as a persistent synchronized slot after $i s"
    # What an operator checks before relying on it: walrelay lag against the standby.
    local seen
    seen=$("$WALRELAY" lag --dsn "host=127.0.0.1 port=$sp user=walrelay dbname=postgres" \
      --slot walrelay --json | python3 -c '
import json, sys
s = json.load(sys.stdin)["slots"][0]
print(s["failover"], s["synced"], s["temporary"])')
    [[ $seen == "True True False" ]] ||
      { log "walrelay lag on the standby shows failover, synced, temporary = $seen for walrelay's slot (expected True True False)"; return 1; }
    log "$mode: walrelay lag on the standby: failover, synced, not temporary"
  fi
  log "$mode: primary :$pp, standby :$sp, walrelay streams its slot (PostgreSQL $MAJOR)"

  # The writer: sessions of single-row transactions; session k writes seq k*10^7 + 1, ...
  # When its server goes away it starts a new session against whichever is primary.
  echo 0 >"$WORK/stop"
  (
    k=0
    while [[ $(cat "$WORK/stop") == 0 ]]; do
      k=$((k + 1))
      psql -X -q "$both" -c "
        DO \$\$ DECLARE n bigint := $k * 10000000; BEGIN
          LOOP
            EXIT WHEN (SELECT stop FROM writer_ctl);
            n := n + 1;
            INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
            VALUES (('00000000-0000-4000-8000-' || lpad(to_hex(n), 12, '0'))::uuid, 'payment',
                    'agg-' || (n % 17), 'PaymentCaptured', jsonb_build_object('seq', n));
            COMMIT;
            PERFORM pg_sleep(0.002);
          END LOOP;
        END \$\$" >>"$WORK/writer.log" 2>&1 || sleep 0.2
    done
  ) &
  local writer=$!
  sleep "$PHASE_SECONDS"

  local standby_pids primary_pids
  read -r -a standby_pids <<<"$(server_pids "$WORK/s")"
  read -r -a primary_pids <<<"$(server_pids "$WORK/p")"
  local before_freeze at_kill
  before_freeze=$(q "$pp" "SELECT count(*) FROM outbox")
  # Failover modes freeze only the standby's walreceiver: its flush position stops while its
  # slot sync worker goes on copying the primary's slot, the window in which the standby's
  # slot can be confirmed up to WAL the standby has but whose progress record it has not
  # (issue 41, item 14). recovery freezes every process of the standby.
  local frozen=("${standby_pids[@]}") what="the standby"
  if [[ $mode != recovery ]]; then
    frozen=("$(q "$sp" "SELECT pid FROM pg_stat_wal_receiver")")
    what="the standby's walreceiver (pid ${frozen[0]})"
  fi
  local records_before
  records_before=$(q "$pp" "SELECT xmin FROM walrelay_progress WHERE slot = 'walrelay' AND source = '*'")
  log "$mode: freezing $what for $FREEZE s while the writer commits on the primary ($before_freeze rows so far)"
  kill -STOP "${frozen[@]}"
  # Cut the stream too: WAL already sent sits in the frozen standby's socket buffer and
  # would still arrive after the thaw; what is written from now on does not.
  q "$pp" "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication WHERE application_name <> 'walrelay' AND state <> 'startup'" >/dev/null
  sleep "$FREEZE"
  local p_lsn
  p_lsn=$(q "$pp" "SELECT pg_current_wal_lsn()")
  at_kill=$(q "$pp" "SELECT count(*) FROM outbox")
  # Whether the relay recorded progress while the standby received nothing: the progress
  # row's xmin moved (the record the standby's slot copy may be confirmed past).
  local records_after recorded_in_freeze=0
  records_after=$(q "$pp" "SELECT xmin FROM walrelay_progress WHERE slot = 'walrelay' AND source = '*'")
  [[ $records_after != "$records_before" ]] && recorded_in_freeze=1
  log "$mode: killing every process of the primary (at $p_lsn, $at_kill rows: $((at_kill - before_freeze)) committed during the freeze), thawing and promoting the standby"
  kill -9 "${primary_pids[@]}" 2>/dev/null || true
  kill -CONT "${frozen[@]}"
  as_pg "$BINDIR/pg_ctl" -D "$WORK/s/data" -w -t 60 promote >/dev/null
  # How long until walrelay streams from the new primary (its slot there active): it must
  # notice the switch in bounded time, not hang on the dead server.
  local promoted_ns resumed_ms=-1
  promoted_ns=$(date +%s%N)
  for _ in $(seq 1 600); do
    if [[ "$(q "$sp" "SELECT active FROM pg_replication_slots WHERE slot_name = 'walrelay'" 2>/dev/null || true)" == t ]]; then
      resumed_ms=$((($(date +%s%N) - promoted_ns) / 1000000))
      break
    fi
    sleep 0.1
  done
  log "$mode: walrelay streams from the new primary $resumed_ms ms after the promotion (-1: not within 60 s; limit ${RESUME_LIMIT}s)"
  sleep "$PHASE_SECONDS"
  # The DO block runs in the server: it stops when it reads writer_ctl.stop (killing psql
  # would not stop it).
  echo 1 >"$WORK/stop"
  q "$sp" "UPDATE writer_ctl SET stop = true" >/dev/null
  wait "$writer" 2>/dev/null || true

  local committed
  q "$sp" "SELECT payload->>'seq', aggregate_id FROM outbox ORDER BY id" | tr '|' ' ' >"$WORK/committed"
  committed=$(wc -l <"$WORK/committed")
  local end_lsn
  end_lsn=$(q "$sp" "SELECT pg_current_wal_lsn()")
  for _ in $(seq 1 300); do
    [[ "$(q "$sp" "SELECT confirmed_flush_lsn >= '$end_lsn' FROM pg_replication_slots WHERE slot_name = 'walrelay'")" == t ]] && break
    sleep 0.1
  done
  # Every record the topic holds: the reader stops once nothing came for 5 s (phantoms
  # make the distinct count larger than the rows, so a count cannot be the end).
  "$PROBE" read --bootstrap "$boot" --topic outbox.payment --count 1000000000 --timeout 5 \
    --id-header event_id --records "$WORK/records" >"$WORK/read" 2>&1 || true
  log "$mode: the new primary holds $committed events; walrelay: $(grep -c "connect\|reconnect\|retry" "$WORK/walrelay.log") lines about (re)connecting"
  python3 - "$mode" "$WORK/committed" "$WORK/records" "$resumed_ms" "$RESUME_LIMIT" \
    "$MIN_COMMITTED" "$((at_kill - before_freeze))" "$MIN_FREEZE_ROWS" "$WORK_BASE.phantoms" \
    "$recorded_in_freeze" "$WORK/walrelay.log" <<'PY'
import collections, sys
mode, committed_path, records_path = sys.argv[1:4]
resumed_ms, limit_s = int(sys.argv[4]), float(sys.argv[5])
min_committed, freeze_rows, min_freeze_rows = map(int, sys.argv[6:9])
phantoms_file = sys.argv[9]
recorded_in_freeze, log_path = sys.argv[10] == "1", sys.argv[11]
# The relay calls its own slot untrusted when the promoted standby's copy is confirmed past
# the progress record the standby holds (it then recovers: duplicates and a lost-slot alert).
distrusted = sum("not the slot walrelay streamed" in l for l in open(log_path, errors="replace"))
agg_of = {}
order = []
for line in open(committed_path):
    seq, agg = line.split()
    agg_of[int(seq)] = agg
records = [tuple(map(int, l.split())) for l in open(records_path)]
published = {s for _, _, s in records}
missing = sorted(set(agg_of) - published)
phantoms = sorted(published - set(agg_of))
dups = len(records) - len(published)
seen, applied = set(), collections.defaultdict(list)
for p in sorted({p for p, _, _ in records}):
    for _, _, s in sorted((r for r in records if r[0] == p), key=lambda r: r[1]):
        if s in agg_of and s not in seen:
            seen.add(s)
            applied[agg_of[s]].append(s)
reordered = [a for a, seqs in applied.items() if any(x >= y for x, y in zip(seqs, seqs[1:]))]
resumed = 0 <= resumed_ms <= limit_s * 1000
premises = {
    f"the new primary holds >= {min_committed} rows ({len(agg_of)})": len(agg_of) >= min_committed,
    f"the primary committed >= {min_freeze_rows} rows during the freeze ({freeze_rows})":
        freeze_rows >= min_freeze_rows,
    f"the relay published records ({len(records)})": len(records) > 0,
}
if mode != "recovery":
    premises["the relay recorded progress while the standby's walreceiver was frozen"] = \
        recorded_in_freeze
for name, held in premises.items():
    print(f"  premise {'ok  ' if held else 'FAIL'} {name}")
with open(phantoms_file, "a") as f:
    f.write(f"{mode} {len(phantoms)}\n")
ok = (all(premises.values()) and not missing and not reordered
      and (mode != "synced" or (not phantoms and not distrusted)) and resumed)
print(f"failover {mode}: {len(agg_of)} events on the new primary, {len(records)} records; "
      f"missing {len(missing)}, phantoms (published, never on the new primary) {len(phantoms)}, "
      f"its own slot called untrusted on the new primary {distrusted} times, "
      f"duplicates {dups}, aggregates out of order {len(reordered)}, streaming from the new "
      f"primary {resumed_ms} ms after the promotion (limit {limit_s:g} s) -> "
      f"{'PASS' if ok else 'FAIL'}")
for s in missing[:5]:
    print(f"  missing: seq {s}")
for s in phantoms[:5]:
    print(f"  phantom: seq {s}")
sys.exit(0 if ok else 1)
PY
}

# conflict: a slot on the standby invalidated by a recovery conflict, seen by `walrelay lag`.
run_conflict() {
  cleanup
  WORK=$WORK_BASE.conflict
  PIDS=()
  rm -rf "$WORK"
  mkdir -p "$WORK"
  chmod 755 "$WORK"
  start_pair off
  local pp=$PP sp=$SP
  # Logical decoding on the standby (16+): creating the slot waits for a running-transactions
  # record from the primary, which pg_log_standby_snapshot() writes at once.
  q "$sp" "SELECT pg_create_logical_replication_slot('on_standby', 'pgoutput')" \
    >"$WORK/create.log" 2>&1 &
  local creator=$!
  for _ in $(seq 1 60); do
    kill -0 "$creator" 2>/dev/null || break
    q "$pp" "SELECT pg_log_standby_snapshot()" >/dev/null
    sleep 0.5
  done
  wait "$creator" || { log "conflict: no logical slot on the standby: $(cat "$WORK/create.log")"; return 1; }
  local standby_dsn="host=127.0.0.1 port=$sp user=walrelay dbname=postgres"
  local before_rc=0 after_rc=0
  "$WALRELAY" lag --dsn "$standby_dsn" --slot on_standby --json >"$WORK/lag-before.json" \
    2>"$WORK/lag-before.err" || before_rc=$?
  # Catalog rows the slot still needs, removed on the primary: without hot_standby_feedback
  # nothing holds them back, and replaying the removal invalidates the standby's slot.
  q "$pp" "CREATE TABLE conflict_t (a int)"
  q "$pp" "DROP TABLE conflict_t"
  q "$pp" "VACUUM pg_class"
  q "$pp" "VACUUM pg_attribute"
  q "$pp" "SELECT pg_log_standby_snapshot()" >/dev/null
  local invalidated=""
  for _ in $(seq 1 60); do
    invalidated=$(q "$sp" "SELECT conflicting FROM pg_replication_slots WHERE slot_name = 'on_standby'")
    [[ $invalidated == t ]] && break
    sleep 0.5
  done
  "$WALRELAY" lag --dsn "$standby_dsn" --slot on_standby --json >"$WORK/lag-after.json" \
    2>"$WORK/lag-after.err" || after_rc=$?
  "$WALRELAY" lag --dsn "$standby_dsn" --slot on_standby >"$WORK/lag-after.txt" 2>&1 || true
  log "conflict: the standby's slot conflicting = $invalidated (PostgreSQL $MAJOR)"
  python3 - "$MAJOR" "$before_rc" "$WORK/lag-before.json" "$after_rc" "$WORK/lag-after.json" <<'PY'
import json, sys
major, before_rc, before_path, after_rc, after_path = sys.argv[1:6]
def slot(path):
    try:
        doc = json.load(open(path))
        return next(s for s in doc["slots"] if s["slot_name"] == "on_standby")
    except (ValueError, StopIteration) as e:  # lag failed: its error is in the .err file
        err = open(path.replace(".json", ".err")).read().strip()
        print(f"  FAIL walrelay lag gave no slot on_standby ({e}): {err[-300:]}")
        return {"state": "(none)", "reason": ""}
before, after = slot(before_path), slot(after_path)
reason = "rows_removed" if int(major) >= 17 else "conflicting"
checks = {
    "before: walrelay lag reads the standby's slot (exit 0 or 1)": before_rc in ("0", "1"),
    "before: not lost": before["state"] != "lost",
    "after: state lost": after["state"] == "lost",
    "after: exit code 2 (critical)": after_rc == "2",
    f"after: the reason names {reason} and hot_standby_feedback":
        reason in after["reason"] and "hot_standby_feedback" in after["reason"],
}
for name, ok in checks.items():
    print(f"  {'ok  ' if ok else 'FAIL'} {name}")
print(f"  walrelay lag on the standby, after: state {after['state']}, reason: {after['reason']}")
ok = all(checks.values())
print(f"conflict on PostgreSQL {major}: -> {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

status=0
rm -f "$WORK_BASE.phantoms"
for m in "${MODES[@]}"; do
  if [[ $m == conflict ]]; then run_conflict || status=1; else run_mode "$m" || status=1; fi
done
# synced's 0 phantoms means something only if its control, unsynced, saw phantoms: the
# freeze window then had writes the relay published before the new primary had them.
if [[ " ${MODES[*]} " == *" synced "* ]]; then
  control=$(sed -n 's/^unsynced //p' "$WORK_BASE.phantoms" 2>/dev/null | tail -n 1)
  if [[ ${control:-0} -gt 0 ]]; then
    log "control: unsynced published $control phantoms in this run; synced's 0 is a finding"
  else
    log "control FAILED: unsynced published ${control:-no} phantoms in this run, so synced's 0 phantoms proves nothing (was the freeze window written to?)"
    status=1
  fi
fi
exit "$status"
