#!/usr/bin/env python3
"""The verdict lines and the chart of bench/vs_debezium.sh, from its results TSV.

vs_debezium_report.py RESULTS.tsv [CHART.svg]

Medians over the rounds of each measure; peak RSS is the highest of any run. The goals of
issue 29: at least 5x Debezium's events per CPU-second, at most a tenth of its memory, a
lower p99. The chart (plain SVG, no plotting library): drain events/s per transaction
shape, and commit-to-readable latency p50 / p99 per rate, walrelay beside Debezium.
"""
import collections
import csv
import statistics
import sys

TOOLS = ("walrelay", "debezium")
COLORS = {"walrelay": "#1f77b4", "debezium": "#d62728"}


def load(path):
    rows = []
    with open(path) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            rows.append(row)
    return rows


def median(rows, measure, shape, tool, field):
    values = [float(r[field]) for r in rows
              if r["measure"] == measure and r["shape"] == shape and r["tool"] == tool
              and r[field] not in ("", None)]
    return statistics.median(values) if values else None


def verdicts(rows):
    lines = []
    shapes = sorted({r["shape"] for r in rows if r["measure"] == "drain"}, key=int)
    rates = sorted({r["shape"] for r in rows if r["measure"] == "latency"}, key=int)
    goals = []
    for s in shapes:
        w, d = (median(rows, "drain", s, t, "events_per_s") for t in TOOLS)
        if w and d:
            lines.append(f"walrelay/debezium drain events/s, {s}-row transactions: {w / d:.2f} "
                         f"({w:,.0f} vs {d:,.0f})")
        w, d = (median(rows, "drain", s, t, "cpu_us_per_event") for t in TOOLS)
        if w and d:
            lines.append(f"walrelay/debezium CPU per event, {s}-row transactions: {w:.2f} us vs "
                         f"{d:.2f} us (walrelay does {d / w:.1f}x Debezium's events per CPU-second)")
            goals.append(("events per CPU-second >= 5x", d / w >= 5, f"{d / w:.1f}x, {s}-row"))
        w, d = (median(rows, "drain", s, t, "first_record_s") for t in TOOLS)
        if w is not None and d is not None:
            lines.append(f"walrelay/debezium time from start to the first record, {s}-row "
                         f"backlog: {w:.2f} s vs {d:.2f} s")
    peaks = {t: max((float(r["peak_rss_mb"]) for r in rows
                     if r["tool"] == t and r["peak_rss_mb"]), default=None) for t in TOOLS}
    if all(peaks.values()):
        lines.append(f"walrelay/debezium peak RSS: {peaks['walrelay']:.0f} MB vs "
                     f"{peaks['debezium']:.0f} MB ({peaks['walrelay'] / peaks['debezium']:.2f})")
        goals.append(("memory <= 1/10", peaks["walrelay"] * 10 <= peaks["debezium"],
                      f"{peaks['walrelay'] / peaks['debezium']:.3f}"))
    for rate in rates:
        for field, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")):
            w, d = (median(rows, "latency", rate, t, field) for t in TOOLS)
            if w is not None and d is not None:
                lines.append(f"walrelay/debezium {label} at {rate} tx/s: {w:.1f} ms vs {d:.1f} ms")
                if field == "p99_ms":
                    goals.append((f"lower p99 at {rate} tx/s", w < d, f"{w:.1f} vs {d:.1f} ms"))
        w, d = (median(rows, "latency", rate, t, "cpu_us_per_event") for t in TOOLS)
        if w and d:
            lines.append(f"walrelay/debezium CPU per event at {rate} tx/s: {w:.1f} us vs {d:.1f} us")
    for name, met, value in goals:
        lines.append(f"goal {name}: {'met' if met else 'MISSED'} ({value})")
    return lines


def bars_panel(x0, title, groups, unit, fmt):
    """groups: [(label, {tool: value})]; returns SVG elements of one panel 420 wide."""
    out = [f'<text x="{x0 + 210}" y="24" text-anchor="middle" font-size="15" '
           f'font-weight="bold">{title}</text>']
    top = max((v for _, vals in groups for v in vals.values() if v), default=1) or 1
    base, height, width = 300, 240, 420
    gw = width / max(1, len(groups))
    for gi, (label, vals) in enumerate(groups):
        for ti, tool in enumerate(TOOLS):
            v = vals.get(tool)
            if v is None:
                continue
            h = height * v / top
            x = x0 + gi * gw + gw * 0.15 + ti * gw * 0.35
            out.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{gw * 0.33:.1f}" '
                       f'height="{h:.1f}" fill="{COLORS[tool]}"/>')
            out.append(f'<text x="{x + gw * 0.165:.1f}" y="{base - h - 4:.1f}" '
                       f'text-anchor="middle" font-size="11">{fmt(v)}</text>')
        out.append(f'<text x="{x0 + gi * gw + gw / 2:.1f}" y="{base + 18}" text-anchor="middle" '
                   f'font-size="12">{label}</text>')
    out.append(f'<line x1="{x0}" y1="{base}" x2="{x0 + width}" y2="{base}" stroke="black"/>')
    out.append(f'<text x="{x0}" y="{base + 40}" font-size="11">{unit}</text>')
    return out


def chart(rows, path):
    shapes = sorted({r["shape"] for r in rows if r["measure"] == "drain"}, key=int)
    rates = sorted({r["shape"] for r in rows if r["measure"] == "latency"}, key=int)
    drain = [(f"{s}-row tx", {t: median(rows, "drain", s, t, "events_per_s") for t in TOOLS})
             for s in shapes]
    latency = []
    for rate in rates:
        for field, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
            latency.append((f"{label} @ {rate}/s",
                            {t: median(rows, "latency", rate, t, field) for t in TOOLS}))
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="920" height="380" '
             'font-family="sans-serif">', '<rect width="920" height="380" fill="white"/>']
    parts += bars_panel(20, "Drain of a backlog: events/s (higher is better)", drain,
                        "median of the rounds; Debezium 3.6.1, 3 Kafka brokers", lambda v: f"{v:,.0f}")
    parts += bars_panel(480, "COMMIT to readable: latency (lower is better)", latency,
                        "milliseconds, median of the rounds", lambda v: f"{v:.1f} ms")
    for i, tool in enumerate(TOOLS):
        parts.append(f'<rect x="{20 + i * 110}" y="352" width="12" height="12" fill="{COLORS[tool]}"/>')
        parts.append(f'<text x="{36 + i * 110}" y="363" font-size="12">{tool}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    rows = load(sys.argv[1])
    for line in verdicts(rows):
        print(line)
    if len(sys.argv) > 2:
        chart(rows, sys.argv[2])
        print(f"chart: {sys.argv[2]}")


if __name__ == "__main__":
    main()
