#!/usr/bin/env python3
"""What a ctest run ran, from its console log.

  ctest_report.py CTEST.log SKIPS_FILE [ALSO_EXPECTED...]

Prints `passed N, failed N, skipped N` for the run, and every test that did not run with
ctest's word for it (Skipped, Disabled, Not Run). Exits 1 when the log shows no test run,
or a test did not run that neither SKIPS_FILE (tests/skips.txt) nor ALSO_EXPECTED names
(e.g. the Apache Kafka programs on a run with WALRELAY_TEST_KAFKA=dev). ctest counts a
skipped test among the passed ones ("100% tests passed"); this does not.
The counts are written to stdout's last line as `counts PASSED FAILED SKIPPED`.
"""
import re
import sys


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    log = open(argv[1], errors="replace").read()
    expected = {name: "asked for by the caller" for name in argv[3:]}
    for line in open(argv[2]):
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.strip().partition(" ")
            expected.setdefault(name, reason.strip())
    totals = re.findall(r"tests passed, (\d+) tests? failed out of (\d+)", log)
    if not totals:
        print("ctest ran no test (no summary line in its log)")
        return 1
    failed, total = map(int, totals[-1])
    not_run = []
    section = log.split("The following tests did not run:")
    if len(section) > 1:
        for line in section[-1].splitlines()[1:]:
            m = re.match(r"\s*\d+ - (\S+) \((.+)\)\s*$", line)
            if not m:
                break
            not_run.append((m.group(1), m.group(2)))
    skipped = len(not_run)
    passed = total - failed - skipped
    unexpected = [(n, why) for n, why in not_run if n not in expected]
    for name, why in not_run:
        mark = f"expected: {expected[name]}" if name in expected else "NOT EXPECTED"
        print(f"  did not run: {name} ({why}): {mark}")
    if total == 0:
        print("ctest ran no test")
        return 1
    if unexpected:
        print(f"FAIL: {len(unexpected)} test(s) did not run that this run must execute: "
              + ", ".join(n for n, _ in unexpected)
              + " (run one with --output-on-failure to see its reason)")
    print(f"counts {passed} {failed} {skipped}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
