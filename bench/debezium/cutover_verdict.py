#!/usr/bin/env python3
"""The verdict of one cut-over run of bench/debezium/cutover.sh.

cutover_verdict.py --mode MODE --committed FILE --records FILE
                   --switch1-confirmed LSN --switch2-confirmed LSN

--committed: every committed outbox row, "<id>\t<aggregate>\t<seq>" (seq: the writer's
global order). --records: the topic as Kafka's Java console consumer printed it
(scripts/kafka.sh consume: CreateTime, Partition, headers, key, value; per partition in
offset order). Who wrote a record: walrelay's carry the walrelay.position header (with the
commit LSN); Debezium's carry __debezium.context.runId, one per start of the connector.

Verdicts, one line per switch and one for the whole run:
- every committed event present at least once, and no event that was not committed (a
  rolled-back transaction's);
- each aggregate in one partition, and its events, taken in offset order and applied once
  (the first copy; what a consumer deduplicating on the id header applies), in the
  writer's order;
- switch 1 (Debezium -> walrelay): every event both published is one walrelay read after
  the slot's confirmed_flush_lsn at the stop (what the connector had sent but not
  confirmed), and walrelay sent nothing at or before that position;
- switch 2 (walrelay -> Debezium): every event both published lies after walrelay's
  confirmed_flush_lsn at its stop (what walrelay had sent but not confirmed).
Exit 1 when a verdict fails.
"""
import argparse
import collections
import sys


def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def parse_records(path):
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t", 4)
            if len(parts) != 5 or not parts[0].startswith(("CreateTime:", "LogAppendTime:")):
                continue
            headers = {}
            if parts[2] != "NO_HEADERS":
                for h in parts[2].split("|"):
                    name, _, value = h.partition(":")
                    headers[name] = value
            position = headers.get("walrelay.position")
            commit_lsn = None
            if position:
                fields = dict(f.split("=", 1) for f in position.split(";"))
                commit_lsn = lsn(fields["lsn"])
            records.append({
                "partition": int(parts[1].split(":", 1)[1]),
                "id": headers.get("id"),
                "run": "walrelay" if position else headers.get("__debezium.context.runId", "?"),
                "lsn": commit_lsn,
            })
    return records


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True)
    ap.add_argument("--committed", required=True)
    ap.add_argument("--records", required=True)
    ap.add_argument("--switch1-confirmed", required=True)
    ap.add_argument("--switch2-confirmed", required=True)
    a = ap.parse_args()
    c1, c2 = lsn(a.switch1_confirmed), lsn(a.switch2_confirmed)

    committed = {}
    with open(a.committed) as f:
        for line in f:
            eid, agg, seq = line.rstrip("\n").split("\t")
            committed[eid] = (agg, int(seq))
    records = parse_records(a.records)

    # The runs in the order they first appear: Debezium, walrelay, Debezium again.
    runs = []
    for r in records:
        if r["run"] not in runs:
            runs.append(r["run"])
    dbz_runs = [r for r in runs if r != "walrelay"]
    ok = True
    if len(dbz_runs) != 2 or "walrelay" not in runs:
        print(f"{a.mode}: expected two Debezium runs and walrelay's records, saw {runs}")
        sys.exit(1)
    by_run = collections.defaultdict(list)
    for r in records:
        by_run[r["run"]].append(r)
    ids = {run: {r["id"] for r in rs} for run, rs in by_run.items()}
    wr_lsn = {r["id"]: r["lsn"] for r in by_run["walrelay"]}
    d1, d2 = ids[dbz_runs[0]], ids[dbz_runs[1]]

    published = {r["id"] for r in records}
    missing = sorted(set(committed) - published, key=lambda e: committed[e][1])
    phantom = sorted(published - set(committed))
    partitions = collections.defaultdict(set)
    applied = collections.defaultdict(list)
    seen = set()
    for r in records:
        if r["id"] in committed:
            partitions[committed[r["id"]][0]].add(r["partition"])
    for p in sorted({r["partition"] for r in records}):
        for r in (x for x in records if x["partition"] == p):
            if r["id"] in committed and r["id"] not in seen:
                seen.add(r["id"])
                applied[committed[r["id"]][0]].append(committed[r["id"]][1])
    split = {agg: sorted(ps) for agg, ps in partitions.items() if len(ps) > 1}
    reordered = {agg: seqs for agg, seqs in applied.items()
                 if any(x >= y for x, y in zip(seqs, seqs[1:]))}
    duplicates = len(records) - len(published)

    # Switch 1: what the connector had sent and walrelay sent again.
    dup1 = d1 & ids["walrelay"]
    early = [e for e, l in wr_lsn.items() if l is not None and l <= c1]
    dup1_bad = [e for e in dup1 if wr_lsn[e] <= c1]
    verdict1 = not early and not dup1_bad
    print(f"{a.mode} switch 1, Debezium -> walrelay cutover: connector confirmed "
          f"{a.switch1_confirmed}; {len(dup1)} events published by both, all read after it: "
          f"{'yes' if not dup1_bad else 'NO'}; walrelay events at or before it: {len(early)} "
          f"-> {'PASS' if verdict1 else 'FAIL'}")
    # Switch 2: what walrelay had sent and the connector sent again.
    dup2 = ids["walrelay"] & d2
    dup2_bad = [e for e in dup2 if wr_lsn[e] <= c2]
    verdict2 = not dup2_bad
    print(f"{a.mode} switch 2, walrelay -> Debezium rollback: walrelay confirmed "
          f"{a.switch2_confirmed}; {len(dup2)} events published by both, all after it: "
          f"{'yes' if not dup2_bad else 'NO'} -> {'PASS' if verdict2 else 'FAIL'}")
    whole = not missing and not phantom and not split and not reordered
    print(f"{a.mode} run: {len(committed)} committed, {len(records)} records "
          f"(Debezium {len(by_run[dbz_runs[0]])} + walrelay {len(by_run['walrelay'])} + "
          f"Debezium {len(by_run[dbz_runs[1]])}), {duplicates} duplicates, "
          f"missing {len(missing)}, not committed {len(phantom)}, aggregates in more than one "
          f"partition {len(split)}, aggregates out of order {len(reordered)} "
          f"-> {'PASS' if whole else 'FAIL'}")
    for e in missing[:5]:
        print(f"  missing: {e} {committed[e]}")
    for e in phantom[:5]:
        print(f"  not committed but published: {e}")
    for agg, ps in list(split.items())[:3]:
        print(f"  {agg} in partitions {ps}")
    for agg, seqs in list(reordered.items())[:3]:
        bad = next(i for i, (x, y) in enumerate(zip(seqs, seqs[1:])) if x >= y)
        print(f"  {agg} applied out of order: ... {seqs[max(0, bad - 2):bad + 3]} ...")
    for e in (early + dup1_bad + dup2_bad)[:5]:
        print(f"  duplicate at or before a confirmed position: {e} lsn {wr_lsn[e]:X}")
    ok = verdict1 and verdict2 and whole
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
