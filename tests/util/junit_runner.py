"""Runs the unittest suite in a directory and writes a JUnit XML report (unittest has none).

    python junit_runner.py [--xml PATH] [TEST_DIR]

Each test method becomes one <testcase> (subtests fold into their test) with <failure>,
<error> or <skipped>. Exits 1 if anything failed or errored, or if no test ran at all (a
suite that runs nothing must not look green), else 0.
"""
import argparse
import os
import sys
import time
import traceback
import unittest
import xml.etree.ElementTree as ET

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # keep grpc core's INFO lines out of the log


class RecordingResult(unittest.TextTestResult):
    """TextTestResult that also keeps (test id, seconds, outcome, message, details) per test."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = {}  # test id -> dict, in first-seen order
        self._started = {}

    def _record(self, test, outcome, message="", details=""):
        test_id = test.id()
        rec = self.records.setdefault(test_id, {"outcome": "passed", "message": "", "details": "",
                                                "seconds": 0.0})
        # The first failure/error (e.g. of one subtest) is what the case reports.
        if rec["outcome"] not in ("failure", "error"):
            rec.update(outcome=outcome, message=message, details=details)

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        started = self._started.pop(test.id(), None)
        rec = self.records.setdefault(test.id(), {"outcome": "passed", "message": "",
                                                  "details": "", "seconds": 0.0})
        if started is not None:
            rec["seconds"] = time.monotonic() - started

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    @staticmethod
    def _exc(err):
        """(one-line message, full traceback) of an exc_info triple."""
        text = str(err[1])
        message = text.splitlines()[0][:500] if text else err[0].__name__
        return message, "".join(traceback.format_exception(*err))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", *self._exc(err))

    def addError(self, test, err):
        super().addError(test, err)
        # Errors in setUpClass/module fixtures arrive with a _ErrorHolder "test".
        self._record(test, "error", *self._exc(err))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "failure" if issubclass(err[0], test.failureException) else "error"
            message, details = self._exc(err)
            self._record(test, kind, f"{subtest.id()}: {message}", details)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failure", "unexpected success")


def write_xml(path, records, seconds):
    counts = {k: sum(r["outcome"] == k for r in records.values())
              for k in ("failure", "error", "skipped")}
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="python_client_test",
                          tests=str(len(records)), failures=str(counts["failure"]),
                          errors=str(counts["error"]), skipped=str(counts["skipped"]),
                          time=f"{seconds:.3f}")
    for test_id, rec in records.items():
        classname, _, name = test_id.rpartition(".")
        case = ET.SubElement(suite, "testcase", classname=classname, name=name,
                             time=f"{rec['seconds']:.3f}")
        if rec["outcome"] in ("failure", "error", "skipped"):
            child = ET.SubElement(case, rec["outcome"], message=rec["message"])
            if rec["details"]:
                child.text = rec["details"]
    ET.ElementTree(suites).write(path, encoding="UTF-8", xml_declaration=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--xml", default="", help="JUnit XML output path (default: none)")
    parser.add_argument("--pattern", default="test*.py", help="test file name pattern")
    parser.add_argument("test_dir")
    args = parser.parse_args()

    suite = unittest.defaultTestLoader.discover(args.test_dir, pattern=args.pattern,
                                                top_level_dir=args.test_dir)
    runner = unittest.TextTestRunner(resultclass=RecordingResult, verbosity=2, stream=sys.stderr)
    started = time.monotonic()
    result = runner.run(suite)
    if args.xml:
        write_xml(args.xml, result.records, time.monotonic() - started)
    if result.testsRun == 0:
        print("junit_runner: no tests ran", file=sys.stderr)
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
