#!/usr/bin/env python3
"""soak_report.py SAMPLES.tsv CHAOS.txt OUT_DIR: the soak's resource verdict and its chart.

SAMPLES.tsv is what scripts/chaos.sh's sampler wrote (CHAOS_SAMPLE_S): one line per process
and sample with its RSS, open descriptors, threads, CPU ticks and (relays) published events.
CHAOS.txt is the chaos run's output (its verdict is copied into the report).

The window is the last three quarters of the run (45 minutes of an hour). For every process
that lived through the whole window (the soak's process faults come before it), compared
between the window's first and last stretches (5 minutes, or a ninth of a shorter window):
  heap       the C heap in use (the leak signal: base/process_snapshot.h), mean of the last
             stretch at most 5 % above the mean of the first
  RSS        the same 5 %, or beyond it only by what the heap accounts for (in use plus the
             allocator's retained free memory: the high-water mark of a burst such as a
             broker outage); samples without heap columns judge RSS alone
  fds        the last stretch's median no higher than the most the process held before it
  threads    the same
Relays are compared in the role they end in (streaming or standby), from the first samples
of the window in that role: the faults move the stream between them.
and the streaming relays' CPU per published event over the window. Writes OUT_DIR/report.md
and OUT_DIR/soak.svg (RSS, descriptors and threads over time, one line per process), prints
the report, exits 1 when a check fails or no process lived through the window.
"""
import csv
import os
import sys
from collections import defaultdict

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def load(path):
    series = defaultdict(list)  # (process, pid) -> [sample dict]
    with open(path) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            try:
                s = {k: int(row[k]) for k in ("epoch", "rss_kb", "fds", "threads", "cpu_ticks")}
            except (ValueError, TypeError):
                continue
            s["published"] = int(row["published"]) if row.get("published", "").isdigit() else None
            for k in ("heap_kb", "retained_kb"):  # absent in samples from before 2026-12-07
                s[k] = int(row[k]) if (row.get(k) or "").isdigit() else None
            s["role"] = row.get("role") or "-"
            series[(row["process"], row["pid"])].append(s)
    return series


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def judge(series):
    starts = [s[0]["epoch"] for s in series.values()]
    ends = [s[-1]["epoch"] for s in series.values()]
    t0, t1 = min(starts), max(ends)
    window_start = t0 + (t1 - t0) // 4
    stretch = min(300, (t1 - window_start) // 9)
    rows, failures = [], []
    for (name, pid), samples in sorted(series.items()):
        if samples[0]["epoch"] > window_start or samples[-1]["epoch"] < t1 - 30:
            continue  # did not live through the window (a killed or restarted process)
        # Like with like: a relay's resources follow its role (a standby holds no Kafka
        # producer or stream), and the faults move the role between the two relays. The
        # first stretch is the window's first samples in the role the process ends in.
        last = [s for s in samples if s["epoch"] > t1 - stretch]
        if not last:
            continue
        role = last[-1]["role"]
        same = [s for s in samples if s["epoch"] >= window_start and s["role"] == role]
        first = [s for s in same if s["epoch"] < same[0]["epoch"] + stretch] if same else []
        last = [s for s in last if s["role"] == role]
        if not first or not last or first[-1]["epoch"] >= last[0]["epoch"]:
            continue
        rss0, rss1 = mean([s["rss_kb"] for s in first]), mean([s["rss_kb"] for s in last])
        growth = (rss1 - rss0) / rss0 * 100
        heap = None  # (in use first, last, growth %, retained first, last), all KiB
        if all(s["heap_kb"] is not None and s["retained_kb"] is not None for s in first + last):
            h0, h1 = mean([s["heap_kb"] for s in first]), mean([s["heap_kb"] for s in last])
            r0, r1 = mean([s["retained_kb"] for s in first]), mean([s["retained_kb"] for s in last])
            heap = (h0, h1, (h1 - h0) / h0 * 100 if h0 > 0 else float("inf"), r0, r1)
        # Descriptors and threads: the last stretch's median against the most the process
        # held before it in that role. Not the first stretch's: a connection a fault dropped
        # (a broker killed before the window) comes back when the client next needs it,
        # which is a return to the earlier count, not growth (the 15-minute trial showed
        # one); a leak passes any earlier count and stays there.
        before = [s for s in samples if s["epoch"] < last[0]["epoch"] and s["role"] == role]
        fd0, fd1 = max(s["fds"] for s in before), median([s["fds"] for s in last])
        th0, th1 = max(s["threads"] for s in before), median([s["threads"] for s in last])
        in_window = [s for s in samples if s["epoch"] >= window_start]
        cpu_s = (in_window[-1]["cpu_ticks"] - in_window[0]["cpu_ticks"]) / TICKS_PER_S
        pub = None
        if in_window[0]["published"] is not None and in_window[-1]["published"] is not None:
            pub = in_window[-1]["published"] - in_window[0]["published"]
        rows.append((f"{name} ({role})", pid, rss0 / 1024, rss1 / 1024, growth, heap, fd0, fd1, th0, th1, cpu_s, pub))
        if heap is None:
            if growth > 5:
                failures.append(f"{name} (pid {pid}): RSS grew {growth:.1f} % over the window (limit 5 %)")
        else:
            # A leak grows the heap in use. RSS may grow beyond 5 % only by what the heap
            # accounts for: the allocator's retained free memory (a high-water mark of a
            # burst, base/process_snapshot.h) plus the heap in use; growth outside the heap
            # (stacks, mappings) is judged as before.
            h0, h1, hg, r0, r1 = heap
            if hg > 5:
                failures.append(f"{name} (pid {pid}): heap in use grew {hg:.1f} % over the window "
                                f"({h0 / 1024:.1f} -> {h1 / 1024:.1f} MiB; limit 5 %): a leak")
            unexplained = (rss1 - rss0) - max(0.0, h1 - h0) - max(0.0, r1 - r0)
            if growth > 5 and unexplained > 0.05 * rss0:
                failures.append(f"{name} (pid {pid}): RSS grew {growth:.1f} % over the window, "
                                f"{unexplained / 1024:.1f} MiB of it outside the heap (limit 5 % of RSS)")
        if fd1 > fd0:
            failures.append(f"{name} (pid {pid}): open descriptors grew from {fd0} to {fd1}")
        if th1 > th0:
            failures.append(f"{name} (pid {pid}): threads grew from {th0} to {th1}")
    if not rows:
        failures.append("no process lived through the whole window: nothing to judge")
    return t0, t1, window_start, stretch, rows, failures


def chart(series, t0, window_start, path):
    panels = [("RSS (MiB)", lambda s: s["rss_kb"] / 1024),
              ("C heap in use (MiB)", lambda s: (s["heap_kb"] or 0) / 1024),
              ("open descriptors", lambda s: s["fds"]), ("threads", lambda s: s["threads"])]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"]
    width, height, left, top, ph, gap = 920, 800, 70, 30, 150, 40
    pw = width - left - 190
    t_end = max(s[-1]["epoch"] for s in series.values())
    span = max(1, t_end - t0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13">walrelay soak: resources per process over '
           f'{span // 60} min (window judged: after the dashed line)</text>']
    keys = sorted(series)
    for p, (title, value) in enumerate(panels):
        y0 = top + p * (ph + gap) + 10
        vmax = max(value(s) for v in series.values() for s in v) * 1.1 or 1
        out.append(f'<text x="{left}" y="{y0 - 4}">{title}</text>')
        out.append(f'<rect x="{left}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        wx = left + (window_start - t0) / span * pw
        out.append(f'<line x1="{wx:.1f}" y1="{y0}" x2="{wx:.1f}" y2="{y0 + ph}" stroke="#555" '
                   'stroke-dasharray="4,3"/>')
        out.append(f'<text x="{left - 6}" y="{y0 + 8}" text-anchor="end">{vmax:.0f}</text>')
        out.append(f'<text x="{left - 6}" y="{y0 + ph}" text-anchor="end">0</text>')
        for i, key in enumerate(keys):
            pts = " ".join(f'{left + (s["epoch"] - t0) / span * pw:.1f},'
                           f'{y0 + ph - value(s) / vmax * ph:.1f}' for s in series[key])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[i % len(colors)]}" '
                       'stroke-width="1.2"/>')
    for i, (name, pid) in enumerate(keys):
        y = top + 20 + i * 16
        out.append(f'<rect x="{left + pw + 15}" y="{y - 9}" width="10" height="10" '
                   f'fill="{colors[i % len(colors)]}"/>')
        out.append(f'<text x="{left + pw + 30}" y="{y}">{name} (pid {pid})</text>')
    out.append(f'<text x="{left}" y="{height - 8}">minutes since the first sample: 0 .. '
               f'{span / 60:.0f}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    samples, chaos_out, out_dir = sys.argv[1:]
    if not os.path.exists(samples):
        sys.exit(f"soak_report.py: {samples} does not exist: the chaos run ended before it sampled (see its output)")
    series = load(samples)
    if not series:
        sys.exit(f"soak_report.py: no samples in {samples}")
    t0, t1, window_start, stretch, rows, failures = judge(series)
    os.makedirs(out_dir, exist_ok=True)
    chart(series, t0, window_start, os.path.join(out_dir, "soak.svg"))
    verdict = []
    try:
        lines = open(chaos_out).read().splitlines()
        at = next(i for i, l in enumerate(lines) if l.startswith("chaos verdict"))
        verdict = lines[at:]
    except (OSError, StopIteration):
        failures.append(f"no chaos verdict in {chaos_out}")
    rep = [f"# Soak: {(t1 - t0) / 60:.0f} minutes",
           "",
           f"Window judged: the last {(t1 - window_start) / 60:.0f} minutes; first and last "
           f"stretches of {stretch} s compared. Chart: soak.svg.",
           "",
           "| process (role) | pid | RSS first (MiB) | RSS last (MiB) | growth | heap in use first/last (MiB) | "
           "growth | heap retained first/last (MiB) | fds (most before/last median) | "
           "threads (most before/last median) | CPU s in window | events published in window | CPU µs/event |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, pid, r0, r1, g, heap, fd0, fd1, th0, th1, cpu, pub in rows:
        per = f"{cpu / pub * 1e6:.1f}" if pub else "-"
        if heap is None:
            hcols = "- | - | -"
        else:
            h0, h1, hg, k0, k1 = heap
            hcols = f"{h0 / 1024:.1f}/{h1 / 1024:.1f} | {hg:+.1f} % | {k0 / 1024:.1f}/{k1 / 1024:.1f}"
        rep.append(f"| {name} | {pid} | {r0:.1f} | {r1:.1f} | {g:+.1f} % | {hcols} | {fd0}/{fd1} | {th0}/{th1} | "
                   f"{cpu:.1f} | {pub if pub is not None else '-'} | {per} |")
    rep += ["", "```", *verdict, "```", ""]
    rep.append("Resources: " + ("PASS" if not failures else "FAIL"))
    rep += [f"- {f}" for f in failures]
    text = "\n".join(rep) + "\n"
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(text)
    print(text)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
