#!/usr/bin/env python3
"""What a GoogleTest program ran, from its --gtest_output=xml report.

  gtest_report.py REPORT.xml LABEL [SKIPS_FILE]

Prints one line `LABEL: N passed, N failed, N skipped`, then every skipped test with the
reason it gave (GTEST_SKIP's message) and every failed test. Exits 1 when the program ran
no test at all (a filter that matches nothing, a program that exits before its tests),
when a test failed, or when a test skipped that SKIPS_FILE (tests/skips.txt) does not
name: a run whose cases skipped did not test what its caller asked for.
"""
import sys
import xml.etree.ElementTree as ET


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    path, label = argv[1:3]
    expected = set()
    if len(argv) == 4:
        for line in open(argv[3]):
            if line.strip() and not line.startswith("#"):
                expected.add(line.split()[0])
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"{label}: no test report ({e}): the program ended before writing it")
        return 1
    passed, failed, skipped = [], [], []
    for case in root.iter("testcase"):
        name = f'{case.get("classname")}.{case.get("name")}'
        if case.get("status") == "notrun":
            continue  # DISABLED_ tests: not selected
        skip = case.find("skipped")
        if skip is not None or case.get("result") == "skipped":
            reason = (skip.get("message") if skip is not None else "") or ""
            skipped.append((name, " ".join(reason.split())))
        elif case.find("failure") is not None:
            failed.append(name)
        else:
            passed.append(name)
    print(f"{label}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    unexpected = [name for name, _ in skipped if name not in expected]
    for name, reason in skipped:
        kind = "skipped" if name in expected else "SKIPPED, not in tests/skips.txt"
        print(f"  {kind}: {name}: {reason or '(no reason given)'}")
    for name in failed:
        print(f"  failed: {name}")
    status = 0
    if not passed and not failed and not skipped:
        print(f"{label}: FAIL: no test ran (does the filter match any test?)")
        status = 1
    if failed:
        status = 1
    if unexpected:
        print(f"{label}: FAIL: {len(unexpected)} test(s) skipped that this run must execute")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
