#!/usr/bin/env python3
"""Compares the records Debezium and walrelay published for the same outbox rows.

compare_records.py SCENARIO EVENTS DEBEZIUM_FILE WALRELAY_FILE

Each file holds the Java console consumer's lines (scripts/kafka.sh consume), each after
the routed topic's name (without its side's prefix) and a tab:
<topic>\tCreateTime:<ms>\tPartition:<p>\t<name:value|...>\t<key>\t<value>. Records are matched by
the event id header (`id`, Debezium's and walrelay's debezium profile's). Prints one verdict
line and the first differences of each kind; exit 1 when a record is missing on a side or a
partition differs (a cut-over would reorder aggregates).
"""
import sys

IGNORED_HEADERS = {"walrelay.position"}  # walrelay's own, documented difference
# Debezium 3's context headers (connector name, task, run id): not reproduced by walrelay,
# counted apart (docs/migrating-from-debezium.md, "What differs").
CONTEXT_PREFIX = "__debezium.context."


def parse(path):
    records = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            topic, _, line = line.rstrip("\n").partition("\t")
            if not line.startswith(("CreateTime:", "LogAppendTime:")):
                continue
            parts = line.split("\t", 4)
            if len(parts) != 5:
                continue
            ts_type, ts = parts[0].split(":", 1)
            partition = int(parts[1].split(":", 1)[1])
            headers = []
            if parts[2] != "NO_HEADERS":
                for h in parts[2].split("|"):
                    name, _, value = h.partition(":")
                    headers.append((name, value))
            event_id = dict(headers).get("id")
            records[event_id] = {
                "topic": topic, "ts_type": ts_type, "ts": int(ts), "partition": partition,
                "headers": [h for h in headers
                            if h[0] not in IGNORED_HEADERS and not h[0].startswith(CONTEXT_PREFIX)],
                "context_headers": sum(1 for h in headers if h[0].startswith(CONTEXT_PREFIX)),
                "key": parts[3], "value": parts[4]}
    return records


def main():
    scenario, events, dbz_path, wr_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dbz, wr = parse(dbz_path), parse(wr_path)
    missing_wr = sorted(set(dbz) - set(wr))
    missing_dbz = sorted(set(wr) - set(dbz))
    both = sorted(set(dbz) & set(wr))
    diffs = {k: [] for k in ("topic", "partition", "key", "value", "headers", "timestamp type")}
    ts_delta = []
    for eid in both:
        d, w = dbz[eid], wr[eid]
        for field, kind in (("topic", "topic"), ("partition", "partition"), ("key", "key"),
                            ("value", "value"),
                            ("headers", "headers"), ("ts_type", "timestamp type")):
            if d[field] != w[field]:
                diffs[kind].append((eid, d[field], w[field]))
        ts_delta.append(w["ts"] - d["ts"])
    equal = {k: len(both) - len(v) for k, v in diffs.items()}
    context = sum(1 for eid in both if dbz[eid]["context_headers"])
    ts = (f"{context}/{len(both)} with Debezium's __debezium.context.* headers; "
          f"timestamp walrelay-debezium min {min(ts_delta)} ms max {max(ts_delta)} ms"
          if ts_delta else "no timestamps")
    print(f"scenario {scenario}: debezium {len(dbz)}/{events}, walrelay {len(wr)}/{events} records; "
          + ", ".join(f"{k} equal {equal[k]}/{len(both)}" for k in equal) + f"; {ts}")
    for kind, items in diffs.items():
        for eid, d, w in items[:3]:
            print(f"  {kind} differs for {eid}:\n    debezium: {d!r}\n    walrelay: {w!r}")
    for eid in missing_wr[:3]:
        print(f"  only debezium published {eid}")
    for eid in missing_dbz[:3]:
        print(f"  only walrelay published {eid}")
    bad = missing_wr or missing_dbz or diffs["partition"] or diffs["topic"] or len(dbz) < events
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
