#!/usr/bin/env python3
"""scripts/lib/soak_report.py's resource verdict on made-up samples: a heap in use that
grows is a leak (FAIL); RSS that grows by what the allocator retained is a high-water mark
(PASS); RSS that grows outside the heap fails; samples without heap columns judge RSS alone.
Usage: soak_report_test.py SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
REPORT = os.path.join(ROOT, "scripts/lib/soak_report.py")
CHAOS = "chaos verdict (made up for the test)\n  PASS\n"


def run(rss, heap, retained, with_heap=True):
    """One ledger sampled every 10 s for an hour; each argument is (first, last) in KiB,
    moving linearly between them from minute 20 to minute 40."""
    with tempfile.TemporaryDirectory() as d:
        cols = "epoch\tprocess\tpid\trss_kb\tfds\tthreads\tcpu_ticks\tpublished\trole"
        lines = [cols + ("\theap_kb\tretained_kb" if with_heap else "")]
        for i in range(361):
            t = 1_000_000 + 10 * i
            f = min(1.0, max(0.0, (i - 120) / 120))
            at = lambda pair: int(pair[0] + (pair[1] - pair[0]) * f)
            row = f"{t}\tledger-1\t42\t{at(rss)}\t12\t9\t{i * 10}\t\tconsumer"
            if with_heap:
                row += f"\t{at(heap)}\t{at(retained)}"
            lines.append(row)
        samples, chaos = os.path.join(d, "samples.tsv"), os.path.join(d, "chaos.txt")
        open(samples, "w").write("\n".join(lines) + "\n")
        open(chaos, "w").write(CHAOS)
        p = subprocess.run([sys.executable, REPORT, samples, chaos, os.path.join(d, "out")],
                           capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


failed = []


def expect(what, got, want_rc, want_text):
    rc, out = got
    if rc != want_rc or want_text not in out:
        failed.append(f"{what}: exit {rc} (want {want_rc}), '{want_text}' "
                      f"{'found' if want_text in out else 'missing'}\n{out}")


# RSS 36 -> 42 MiB (+17 %), the heap in use flat, the retained free memory +6 MiB: the
# soak of 2026-12-07's ledgers, were it a high-water mark.
expect("high-water mark", run((36864, 43008), (10240, 10300), (4096, 10240)), 0, "Resources: PASS")
# The heap in use grows 10 %: a leak, whatever RSS does.
expect("leak", run((36864, 38000), (10240, 11264), (4096, 4096)), 1, "heap in use grew 10.0 %")
# RSS +17 % with neither the heap in use nor the retained memory growing: outside the heap.
expect("outside the heap", run((36864, 43008), (10240, 10240), (4096, 4096)), 1,
       "outside the heap")
# Old samples (no heap columns): RSS alone, as the rule was.
expect("RSS alone", run((36864, 43008), None, None, with_heap=False), 1,
       "RSS grew 16.7 % over the window (limit 5 %)")
expect("RSS alone, flat", run((36864, 37000), None, None, with_heap=False), 0, "Resources: PASS")

if failed:
    print("\n\n".join(failed))
    sys.exit(1)
print("soak_report: 5 verdicts as expected")
