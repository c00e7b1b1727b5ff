#!/usr/bin/env python3
"""Instructions (Ir) of a callgrind profile, split by object: walrelay's own code,
librdkafka, libpq, libc (allocator included), libstdc++, other libraries.

callgrind_split.py CALLGRIND_OUT...     prints "total=N walrelay=N librdkafka=N ..." for the
                                        sum of the files (one per thread with
                                        --separate-threads=yes, or one per process)

Self cost only: every cost line counts for the object of the function it is in; the line
after a calls= line is the inclusive cost of that call and is skipped (it is counted where
the callee's own lines are). Object names come from ob= (and cob= for calls), with
callgrind's name compression ("(id) name" defines, "(id)" refers).
"""
import collections
import os
import sys

GROUPS = (("librdkafka", "librdkafka"), ("libpq", "libpq"), ("libc", "libc.so"),
          ("libc", "ld-linux"), ("libstdc++", "libstdc++"), ("kernel", "[kernel"))


def group_of(obj, main_names):
    base = os.path.basename(obj)
    if base in main_names or base.startswith("walrelay"):
        return "walrelay"
    for group, needle in GROUPS:
        if needle in base:
            return group
    return "other"


def split(path, main_names, totals):
    names = {}
    obj = "?"
    skip_next = False
    events = None
    with open(path, errors="replace") as f:
        for line in f:
            if not line or line[0] == "\n":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    totals[group_of(obj, main_names)] += int(parts[1])
                continue
            if line.startswith("events:"):
                events = line.split()[1:]
                if events[0] != "Ir":
                    sys.exit(f"{path}: the first event is {events[0]}, not Ir")
            elif line.startswith("ob="):
                obj = resolve(line[3:].strip(), names)
            elif line.startswith(("cob=", "cfi=", "cfl=", "cfn=", "fl=", "fi=", "fe=", "fn=")):
                if line.startswith("cob="):
                    resolve(line[4:].strip(), names)
            elif line.startswith("calls="):
                skip_next = True


def resolve(text, names):
    if text.startswith("("):
        ident, _, rest = text.partition(")")
        rest = rest.strip()
        if rest:
            names[ident] = rest
        return names.get(ident, rest or "?")
    return text


def main():
    files = sys.argv[1:]
    if not files:
        sys.exit(__doc__)
    totals = collections.Counter()
    for path in files:
        split(path, {"walrelay"}, totals)
    order = ["walrelay", "librdkafka", "libpq", "libc", "libstdc++", "kernel", "other"]
    total = sum(totals.values())
    print(f"total={total} " + " ".join(f"{g}={totals[g]}" for g in order if totals[g]))


if __name__ == "__main__":
    main()
