#!/usr/bin/env python3
"""profile_breakdown.py: where each microsecond of a walrelay profile goes.

    bench/profile_breakdown.py PERF_DATA [US_PER_EVENT]

Reads `perf script` of a `perf record` profile with call graphs and splits the samples two
ways. Use DWARF call graphs (`perf record --call-graph dwarf`, bench/compare.sh
PERF_CALLGRAPH=dwarf): libc and libstdc++ have no frame pointers, so with `-g` the chain
stops there and their samples cannot be given to their caller ("kernel/libc only").
  - thread: walrelay's main thread, librdkafka's broker threads (rdk:broker*), librdkafka's
    main thread (rdk:main), other;
  - owner: the first frame of the call chain, from the sampled instruction up, that belongs
    to walrelay, librdkafka, libpq or libstdc++ (libc, the kernel, the vDSO and the loader
    work for whoever called them: malloc called by librdkafka counts as librdkafka's), and
    what the sample itself was in (kernel, libc, or the owner's own code).
With US_PER_EVENT (the run's CPU per event measured without perf), every share is also
given in microseconds per event. perf's own overhead is in the samples' total, not in the
shares.
"""
import collections
import subprocess
import sys


def dso_kind(dso: str) -> str:
    base = dso.rsplit("/", 1)[-1]
    if base.startswith("[kernel") or base.startswith("[vdso") or base == "[vsyscall]":
        return "kernel" if base.startswith("[kernel") else "vdso"
    if base.startswith("librdkafka"):
        return "librdkafka"
    if base.startswith("libpq"):
        return "libpq"
    if base.startswith("libstdc++"):
        return "libstdc++"
    if base.startswith("libc.so") or base.startswith("libc-") or base.startswith("libm"):
        return "libc"
    if base.startswith("ld-linux"):
        return "loader"
    if base.startswith("libssl") or base.startswith("libcrypto"):
        return "openssl"
    if base.startswith("libz") or base.startswith("liblz4") or base.startswith("libzstd"):
        return "compression"
    if base in ("walrelay",) or base.startswith("walrelay"):
        return "walrelay"
    if base.startswith("libsimdjson"):
        return "walrelay"  # the decoder's library
    return "other:" + base


OWNERS = ("walrelay", "librdkafka", "libpq", "libstdc++", "openssl", "compression")


def thread_of(comm: str) -> str:
    if comm.startswith("rdk:broker"):
        return "librdkafka broker threads"
    if comm.startswith("rdk:"):
        return "librdkafka " + comm
    if comm.startswith("walrelay"):
        return "walrelay main thread"
    return "other (" + comm + ")"


def parse(perf_data: str):
    out = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "comm,ip,dso"],
        check=True, capture_output=True, text=True, errors="replace").stdout
    samples = []
    comm, frames = None, []
    for line in out.splitlines():
        if not line.strip():
            if comm is not None:
                samples.append((comm, frames))
            comm, frames = None, []
            continue
        if not line.startswith((" ", "\t")) and comm is None:
            comm = line.strip().split()[0]
            continue
        parts = line.strip().split()
        if len(parts) >= 2 and parts[-1].startswith("(") and parts[-1].endswith(")"):
            dso = parts[-1][1:-1]
            if dso != "inlined":  # an inlined frame: its caller's line names the DSO
                frames.append(dso)
    if comm is not None:
        samples.append((comm, frames))
    return samples


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    us = float(sys.argv[2]) if len(sys.argv) > 2 else None
    samples = parse(sys.argv[1])
    total = len(samples)
    if total == 0:
        print("no samples")
        return 1
    by_thread = collections.Counter()
    by_owner = collections.Counter()
    for comm, frames in samples:
        thread = thread_of(comm)
        kinds = [dso_kind(f) for f in frames] or ["unknown"]
        leaf = kinds[0]
        owner = next((k for k in kinds if k in OWNERS), "kernel/libc only")
        what = "own code" if leaf == owner else leaf
        by_thread[thread] += 1
        by_owner[(thread, owner, what)] += 1

    def fmt(n):
        share = 100.0 * n / total
        return f"{share:5.1f} %" + (f"  {us * n / total:6.2f} us/event" if us else "")

    print(f"{total} samples")
    for thread, n in by_thread.most_common():
        print(f"{thread:32s} {fmt(n)}")
        for (t, owner, what), m in sorted(by_owner.items(), key=lambda kv: -kv[1]):
            if t != thread or 100.0 * m / total < 0.5:
                continue
            print(f"    {owner + ': ' + what:44s} {fmt(m)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
