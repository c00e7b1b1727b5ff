/*
 * walrelay's delivery protocol, as a Promela model for SPIN (spec/README.md).
 *
 * Everything that can happen at once is a process: the writer (applications committing
 * outbox transactions), two relays (the active one and its standby; each restarts after a
 * failure, as systemd or Kubernetes restart `walrelay run`), the broker (appends what a
 * relay's producer sent, acknowledges it to the session that sent it) and the environment
 * (faults: a relay's sessions terminated under it, the slot invalidated, the slot dropped
 * and made again by `walrelay setup`, a topic refusing records for a while, a Kafka
 * transaction aborted by its coordinator). A fault may strike between any two steps.
 *
 * Each action names the source file whose code it models. Build-time switches:
 *   EXACTLY_ONCE                  --kafka-exactly-once (src/relay/core/exactly_once.cc)
 *   BUG_CONFIRM_BEFORE_ACK        confirm what was produced, not what Kafka acknowledged
 *   BUG_TRUST_UNKNOWN_SLOT        stream a slot whose origin is not walrelay's
 *   BUG_REDO_RECREATES_SLOT       a recovery redo drops the slot its first attempt made
 *   BUG_BOUND_SINCE_FIRST_FAILURE a topic's retry bound counts every failure ever seen
 *   BUG_IGNORE_CHECKPOINT         (exactly once) start without reading the checkpoint
 *   BUG_CONFIRM_BEFORE_COMMIT     (exactly once) confirm before commit_transaction returned
 * spec/check.sh checks the correct model in both modes and requires every BUG_ variant
 * to produce a counterexample.
 */

/* ---------------------------------------------------------------- the source transactions
 * Fixed shapes (their interleavings with everything else are what is explored):
 *   t0: two outbox rows of aggregate 0 (so a Kafka transaction could show half of it)
 *   t1: one row of aggregate 1, rolled back (never in the WAL, never visible in the table)
 *   t2: a table-less event of aggregate 0 (pg_logical_emit_message: in the WAL only)
 *   t3: one row of aggregate 1
 * An event is named t*EV+k. */
#define N     4
#define EV    2
#define NEV   8
#define NOBODY 2
#define NONE  255

byte nev[N];        /* events of each transaction */
byte aggof[N];
bool rolled[N];
bool tableless[N];
byte committed;     /* transactions [0, committed) have ended (committed or rolled back) */

/* ---------------------------------------------------------------- the slot (PostgreSQL)
 * slot/ and src/relay/lifecycle/slot_guard.cc. The server streams from the confirmed
 * position; its WAL holds every transaction from wal_from on while the slot is healthy. */
#define ORIGIN_MINE     0   /* made by walrelay and streamed by it (progress table) */
#define ORIGIN_RECOVERY 1   /* made by a recovery that has not finished */
#define ORIGIN_OTHER    2   /* made by someone else (setup, by hand) after the old one went */
byte slot_conf;     /* confirmed_flush: next transaction the server sends */
bool slot_ok = true;/* exists and is not invalidated */
byte origin = ORIGIN_MINE;
byte owner = NOBODY;/* the relay holding the slot's connection and the advisory lock */
bool excused[N];    /* a table-less event whose WAL the environment destroyed (documented) */

/* ---------------------------------------------------------------- the progress table
 * src/relay/core/progress.cc: the recorded bound (every transaction before it delivered)
 * and the recovering mark. */
byte bound;
bool recovering;

/* ---------------------------------------------------------------- Kafka
 * One partition (it keeps per-aggregate order as strictly as a keyed partition would).
 * A record is VISIBLE to read_committed readers, PENDING in an open transaction, or
 * ABORTED. */
#define LOGMAX 16
#define VISIBLE 0
#define PENDING 1
#define ABORTED 2
byte log_ev[LOGMAX];
byte log_st[LOGMAX];
byte log_ep[LOGMAX];
byte loglen;
byte copies[NEV];   /* visible copies of each event */
bool dead[NEV];     /* dead-lettered (src/relay/core/dead_letter.cc) */

/* The wire: what a relay's producer has sent and the broker has not appended yet, with the
 * producer session that sent it. The idempotent producer (src/kafka/producer.cc) appends a
 * session's records once each and in order; records of a dead session may still land. */
chan wire[2] = [3] of { byte, byte };
byte rsess[2];      /* each relay's current producer session */
byte racked[8];     /* relay r's acks per transaction: racked[r*N+t] (src/relay/core/ack_tracker.cc) */

/* Exactly-once mode: the transactional producer's epoch (bumped by init_transactions) and
 * the committed checkpoint (the next transaction after the last one committed). */
byte epoch;
byte checkpoint;

/* A topic refusing records (a missing topic, an ACL): the environment's outage. The
 * history the dead-letter bound is judged against: each relay's failed attempts since its
 * last successful one. */
#define RETRY_BOUND 2
bool topic_down;
byte streak[2];

/* Fault budgets: the state space stays finite. spec/check.sh runs several budgets, each
 * small enough to be explored whole (-D MAX_...=n). */
byte crashes, takeovers, losses, recreations, outages, coord_aborts;
#ifndef MAX_CRASHES
#define MAX_CRASHES   1
#endif
#ifndef MAX_TAKEOVERS
#define MAX_TAKEOVERS 1
#endif
#ifndef MAX_LOSSES
#define MAX_LOSSES    0
#endif
#ifndef MAX_RECREATE
#define MAX_RECREATE  0
#endif
#ifndef MAX_OUTAGES
#define MAX_OUTAGES   0
#endif
#ifndef MAX_COORD
#define MAX_COORD     0
#endif
#if defined(EXACTLY_ONCE) && (MAX_LOSSES > 0 || MAX_RECREATE > 0)
#error "lost-slot recovery repeats in exactly-once mode (docs/guarantees.md): not checked"
#endif

/* ---------------------------------------------------------------- invariants */

byte ct, ot, wt;    /* the checks' loop counters (reset to 0 after each use) */

/* Names that a failed assertion prints (hidden: not part of the state). */
hidden byte confirmed_never_passes_an_unacknowledged_event = 1;      /* invariant 1 */
hidden byte first_deliveries_follow_commit_order = 1;                /* invariant 2 */
hidden byte no_rolled_back_event_delivered = 1;
hidden byte exactly_once_no_duplicate_visible = 1;                   /* invariant 3 */
hidden byte exactly_once_no_transaction_partly_visible = 1;          /* invariant 3 */
hidden byte dead_letter_only_after_a_continuous_failure = 1;         /* invariant 13 */
hidden byte every_committed_event_delivered_in_the_end = 1;          /* invariant 1 */

/* Delivered: a visible copy in Kafka, or dead-lettered with its reason, or a table-less
 * event whose WAL the environment destroyed (a documented limit, never silent: the
 * relay's recovery says so). */
#define HANDLED(e) (copies[e] > 0 || dead[e] || excused[(e) / EV])

/* Invariant 1: the confirmed position never passes an event Kafka has not acknowledged. */
inline check_confirmed(upto) {
  d_step {
    ct = 0;
    do
    :: ct < upto ->
       if
       :: !rolled[ct] -> assert(confirmed_never_passes_an_unacknowledged_event && nev[ct] < 1 || HANDLED(ct * EV));
                         assert(confirmed_never_passes_an_unacknowledged_event && nev[ct] < 2 || HANDLED(ct * EV + 1))
       :: else -> skip
       fi;
       ct++
    :: else -> break
    od;
    ct = 0
  }
}

/* Invariant 2: a first delivery of an event comes after the first deliveries of every
 * earlier event of its aggregate (a replay repeats a suffix; it never reorders). */
inline check_first_delivery(e) {
  ot = 0;
  do
  :: ot < (e) / EV ->
     if
     :: aggof[ot] == aggof[(e) / EV] && !rolled[ot] ->
        assert(first_deliveries_follow_commit_order && nev[ot] < 1 || HANDLED(ot * EV));
        assert(first_deliveries_follow_commit_order && nev[ot] < 2 || HANDLED(ot * EV + 1))
     :: else -> skip
     fi;
     ot++
  :: else -> break
  od;
  ot = 0;
  assert(first_deliveries_follow_commit_order && (e) % EV == 0 || HANDLED((e) - 1))
}

/* A record becomes visible: order, no rolled-back event, and in exactly-once mode no
 * duplicate. */
inline became_visible(e) {
  assert(no_rolled_back_event_delivered && !rolled[(e) / EV]);
  if
  :: copies[(e)] == 0 -> check_first_delivery((e))
  :: else ->
#ifdef EXACTLY_ONCE
     assert(!exactly_once_no_duplicate_visible)  /* a duplicate visible to read_committed */
#else
     skip
#endif
  fi;
  copies[(e)]++
}

/* Exactly once: no source transaction is partly visible. */
inline check_whole() {
  wt = 0;
  do
  :: wt < N ->
     assert(exactly_once_no_transaction_partly_visible && nev[wt] < 2 || (copies[wt * EV] > 0) == (copies[wt * EV + 1] > 0));
     wt++
  :: else -> break
  od;
  wt = 0
}

/* The end: when nothing can move any more (every fault spent, the relays caught up), every
 * committed event is handled. */
active proctype final() {
  byte ft;
  timeout ->
  assert(committed == N);
  ft = 0;
  do
  :: ft < N ->
     if
     :: !rolled[ft] -> assert(every_committed_event_delivered_in_the_end && nev[ft] < 1 || HANDLED(ft * EV));
                       assert(every_committed_event_delivered_in_the_end && nev[ft] < 2 || HANDLED(ft * EV + 1))
     :: else -> skip
     fi;
     ft++
  :: else -> break
  od
}

/* ---------------------------------------------------------------- the writer */
active proctype writer() {
  d_step {
    nev[0] = 2; aggof[0] = 0;
    nev[1] = 1; aggof[1] = 1; rolled[1] = true;
    nev[2] = 1; aggof[2] = 0; tableless[2] = true;
    nev[3] = 1; aggof[3] = 1
  }
  do
  :: committed < N ->
     atomic {
       /* The WAL of a commit is kept only by a healthy slot: a table-less event committed
        * while the slot is lost or gone exists nowhere. */
       if
       :: tableless[committed] && !slot_ok -> excused[committed] = true
       :: else -> skip
       fi;
       committed++
     }
  :: else -> break
  od
}

/* ---------------------------------------------------------------- the broker */
inline deliver(r) {
  atomic {
    wire[r]?de, ds ->
    became_visible(de);  /* (the log itself is kept for transactions only) */
    if
    :: ds == rsess[r] -> racked[r * N + de / EV]++
    :: else -> skip  /* the session that sent it is gone: nobody hears the ack */
    fi
  }
}

active proctype broker() {
  byte de, ds;
end:
  do
  :: deliver(0)
  :: deliver(1)
  od
}

/* ---------------------------------------------------------------- the environment */
active proctype environment() {
  byte x;
end:
  do
  :: atomic { takeovers < MAX_TAKEOVERS && owner != NOBODY ->
       /* src/relay/run/relay.cc: a network partition or an operator ends the active
        * relay's database sessions (its advisory lock and the slot's connection); it does
        * not know yet: a zombie. */
       takeovers++; owner = NOBODY }
  :: atomic { losses < MAX_LOSSES && slot_ok ->
       /* max_slot_wal_keep_size invalidated the slot: the WAL it held is gone. */
       losses++; slot_ok = false; owner = NOBODY;
       x = slot_conf;
       do
       :: x < committed -> excused[x] = tableless[x]; x++
       :: else -> break
       od }
  :: atomic { recreations < MAX_RECREATE && losses == 0 && owner == NOBODY ->
       /* The slot dropped and made again by `walrelay setup` (or by hand): its WAL is
        * gone, the new one starts now, and the progress table knows nothing of it. */
       recreations++;
       x = slot_conf;
       do
       :: x < committed -> excused[x] = tableless[x]; x++
       :: else -> break
       od;
       slot_ok = true; slot_conf = committed; origin = ORIGIN_OTHER }
  :: atomic { outages < MAX_OUTAGES && !topic_down ->
       outages++; topic_down = true }
  :: topic_down -> topic_down = false
  :: atomic { coord_aborts < MAX_COORD ->
       /* The coordinator aborts an open transaction (transaction.timeout.ms). */
       coord_aborts++;
       x = 0;
       do
       :: x < loglen -> if :: log_st[x] == PENDING -> log_st[x] = ABORTED :: else -> skip fi; x++
       :: else -> break
       od }
  od
}

/* ---------------------------------------------------------------- the relays */

/* Produce one event. src/relay/core/pipeline.cc and src/relay/core/topic_errors.cc: a
 * topic that refuses it is retried while the failure is continuous, dead-lettered when it
 * lasted RETRY_BOUND attempts. Returns through `gone` when the session must end. */
inline produce(r, e) {
  do
  :: atomic { topic_down ->
       streak[r]++; fails++;
       if
       :: fails >= RETRY_BOUND ->
          /* The bound measures one continuous failure (invariant 13): as many failed
           * attempts, with no success between. */
          assert(dead_letter_only_after_a_continuous_failure && streak[r] >= RETRY_BOUND);
          dead[(e)] = true; racked[r * N + (e) / EV]++;
#ifndef BUG_BOUND_SINCE_FIRST_FAILURE
          fails = 0;
#endif
          break
       :: else -> skip
       fi }
  :: atomic { !topic_down ->
#ifdef EXACTLY_ONCE
       /* The record joins the open Kafka transaction; a fenced producer is refused. */
       if
       :: myepoch == epoch ->
          assert(loglen < LOGMAX);  /* a bound of the model, not of Kafka */
          log_ev[loglen] = (e); log_st[loglen] = PENDING; log_ep[loglen] = myepoch; loglen++;
          racked[r * N + (e) / EV]++
       :: else -> gone = true
       fi;
#else
       wire[r]!(e), rsess[r];
#endif
       streak[r] = 0;
#ifndef BUG_BOUND_SINCE_FIRST_FAILURE
       fails = 0;
#endif
       break }
  od
}

/* Confirm every transaction before `upto` to the server (the standby status update):
 * only over the slot's own connection, which a take-over or a lost slot has ended. */
inline confirm(r, upto) {
  atomic {
    if
    :: owner != r -> gone = true
    :: else ->
       check_confirmed(upto);
       if :: upto > slot_conf -> slot_conf = upto :: else -> skip fi
    fi
  }
}

/* Lost-slot recovery: src/relay/run/slot_recovery.cc and src/relay/recovery/backfill.cc.
 * Republish every row of a transaction at or after the recorded bound that the snapshot
 * sees, wait until Kafka acknowledged them, record the snapshot as the bound. */
inline recover(r) {
  recovering = true;
  atomic {
    if
    :: owner != r -> gone = true
    :: slot_ok && origin == ORIGIN_RECOVERY ->
#ifdef BUG_REDO_RECREATES_SLOT
       slot_conf = committed;   /* dropped and made again: the WAL it held is gone */
#endif
       snap = committed          /* an unfinished attempt's slot is kept */
    :: slot_ok && origin == ORIGIN_OTHER ->
       snap = committed          /* kept; rows since it began come twice */
    :: slot_ok && origin == ORIGIN_MINE ->
       snap = committed          /* a redo after the slot was made MINE: nothing to add */
    :: !slot_ok ->
       slot_ok = true; slot_conf = committed; origin = ORIGIN_RECOVERY; snap = committed
    fi
  }
  if
  :: gone -> goto failed
  :: else -> skip
  fi;
  rt = bound;
  do
  :: rt < snap ->
     if
     :: !rolled[rt] && !tableless[rt] ->
        rk = 0;
        do
        :: rk < nev[rt] ->
           if
           :: atomic { !topic_down -> wire[r]!rt * EV + rk, rsess[r]; streak[r] = 0;
#ifndef BUG_BOUND_SINCE_FIRST_FAILURE
                       fails = 0
#endif
                     }
           :: atomic { topic_down -> streak[r]++; fails++ };
              if
              :: fails >= RETRY_BOUND ->
                 assert(dead_letter_only_after_a_continuous_failure && streak[r] >= RETRY_BOUND);
                 dead[rt * EV + rk] = true; racked[r * N + rt]++;
#ifndef BUG_BOUND_SINCE_FIRST_FAILURE
                 fails = 0
#endif
              :: else -> goto retry
              fi
           fi;
           rk++;
retry:     skip
        :: else -> break
        od
     :: else -> skip
     fi;
     rt++
  :: else -> break
  od;
  /* Wait for every republished row's acknowledgement. */
  rt = bound;
  do
  :: rt < snap ->
     if
     :: rolled[rt] || tableless[rt] || racked[r * N + rt] >= nev[rt] -> rt++
     :: owner != r -> gone = true; break
     fi
  :: else -> break
  od;
  if
  :: gone -> goto failed
  :: else -> skip
  fi;
  atomic {
    if
    :: owner != r -> gone = true
    :: else -> bound = snap; origin = ORIGIN_MINE; recovering = false
    fi
  }
}

proctype relay(byte r) {
  byte pos, c, t, k, snap, rt, rk, fails, myepoch, skipto, opened;
  bool gone;
  byte de, ds;

end_standby:
  /* src/relay/run/relay.cc: take the advisory lock and the slot's connection. */
  atomic { owner == NOBODY -> owner = r; gone = false; rsess[r]++;
           t = 0; do :: t < N -> racked[r * N + t] = 0; t++ :: else -> break od }
#ifndef BUG_BOUND_SINCE_FIRST_FAILURE
  fails = 0;
#endif

#ifdef EXACTLY_ONCE
  /* init_transactions fences every older producer of the transactional.id and aborts
   * what it left open; then the committed checkpoint is read (src/relay/core/exactly_once.cc,
   * src/relay/run/session.cc). */
  atomic {
    epoch++; myepoch = epoch;
    t = 0;
    do
    :: t < loglen -> if :: log_st[t] == PENDING -> log_st[t] = ABORTED :: else -> skip fi; t++
    :: else -> break
    od;
#ifdef BUG_IGNORE_CHECKPOINT
    skipto = 0
#else
    skipto = checkpoint
#endif
  }
#endif

  /* src/relay/run/startup_checks.cc: a slot is streamed only when its origin is known. */
  if
#ifdef BUG_TRUST_UNKNOWN_SLOT
  :: !slot_ok || recovering -> recover(r)
#else
  :: !slot_ok || origin != ORIGIN_MINE || recovering -> recover(r)
#endif
  :: else -> skip
  fi;
  if :: gone -> goto failed :: else -> skip fi;

  if
  :: atomic { owner == r -> pos = slot_conf; c = pos; opened = 0 }
  :: owner != r -> goto failed
  fi;
  /* Stream (src/relay/run/session.cc, src/relay/core/pipeline.cc). */
end_streaming:
  do
  :: atomic { pos < committed && owner == r && !slot_ok -> gone = true };
     break
  :: pos < committed && owner == r && slot_ok ->
     /* The next committed transaction, in commit order. A rolled-back one is not in the
      * stream. */
     if
     :: rolled[pos] || nev[pos] == 0 -> skip
#ifdef EXACTLY_ONCE
     :: !rolled[pos] && pos < skipto ->
        skip  /* covered by the checkpoint: already in Kafka */
#endif
     :: else ->
        k = 0;
        do
        :: k < nev[pos] -> produce(r, pos * EV + k); if :: gone -> break :: else -> k++ fi
        :: else -> break
        od;
#ifdef EXACTLY_ONCE
        opened++
#endif
     fi;
     if :: gone -> break :: else -> pos++ fi
#ifdef EXACTLY_ONCE
  /* Commit the open Kafka transaction at a source commit: its records and the checkpoint
   * at once, if this producer is still the current epoch (else: fenced, stand by). */
  :: opened > 0 ->
     atomic {
       if
       :: myepoch != epoch -> gone = true
       :: else ->
          /* A record of this transaction aborted by the coordinator fails the commit
           * (librdkafka reports it): nothing of it becomes visible. */
          t = 0;
          do
          :: t < loglen ->
             if
             :: log_st[t] == ABORTED && log_ep[t] == myepoch -> gone = true
             :: else -> skip
             fi;
             t++
          :: else -> break
          od;
          if
          :: !gone ->
             t = 0;
             do
             :: t < loglen ->
                if
                :: log_st[t] == PENDING && log_ep[t] == myepoch ->
                   log_st[t] = VISIBLE; log_ep[t] = 0; became_visible(log_ev[t])
                :: else -> skip
                fi;
                t++
             :: else -> break
             od;
             t = 0;
             check_whole();
             checkpoint = pos; opened = 0
          :: else ->
             /* aborted: nothing of it visible (undo the flip) */
             t = 0;
             do
             :: t < loglen ->
                if
                :: log_ep[t] == myepoch && log_st[t] != ABORTED -> log_st[t] = ABORTED
                :: else -> skip
                fi;
                t++
             :: else -> break
             od
          fi
       fi
     }
     if :: gone -> break :: else -> skip fi
#endif
  /* Confirm: the ack tracker's contiguous prefix of fully acknowledged transactions. */
#if defined(BUG_CONFIRM_BEFORE_ACK) || defined(BUG_CONFIRM_BEFORE_COMMIT)
  :: c < pos -> c = pos;
#elif defined(EXACTLY_ONCE)
  :: c < pos && opened == 0 -> c = pos;   /* only what commit_transaction returned OK for */
#else
  :: c < pos && (rolled[c] || nev[c] == 0 || racked[r * N + c] >= nev[c]) ->
     do
     :: c < pos && (rolled[c] || nev[c] == 0 || racked[r * N + c] >= nev[c]) -> c++
     :: else -> break
     od;
#endif
     confirm(r, c);
     if :: gone -> break :: else -> skip fi
  /* Record the bound: the delivered position, trailing the confirmed one
   * (src/relay/core/progress.cc). */
  :: atomic { owner == r && bound < slot_conf && origin == ORIGIN_MINE && !recovering ->
       bound = slot_conf }
  :: owner != r -> break  /* the next request on a terminated session fails */
  :: atomic { crashes < MAX_CRASHES -> crashes++; gone = true }; break
  od;

failed:
  /* The session ends (crash-only recovery, one code path): what the producer sent may or
   * may not still land; the lock and the slot's connection are released; the process
   * restarts (as systemd or Kubernetes would) and waits for the slot. */
  atomic {
    if
    :: do  /* none of what was not yet appended lands (a later record cannot land without
            * an earlier one: the idempotent producer's sequence numbers) */
       :: wire[r]?de, ds -> skip
       :: empty(wire[r]) -> break
       od
    :: skip  /* all of it still lands */
    fi;
    if :: owner == r -> owner = NOBODY :: else -> skip fi;
    rsess[r]++
  }
  goto end_standby
}

/* RELAYS=1 checks one relay restarting after its own failures; 2 adds the standby that
 * takes over (and the zombie it replaces). */
#ifndef RELAYS
#define RELAYS 2
#endif
init {
  run relay(0);
#if RELAYS == 2
  run relay(1)
#endif
}
