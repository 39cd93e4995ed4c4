"""JUnit XML for CI: one suite per target, one passing test for the campaign, one failure per finding."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ..finding import case_text, triage_text
from ..sighting import found_text
from ..signature import Signature
from ..text import plural
from ..violation import window_lines
from .json_report import report_dict, runs, write_text

# XML 1.0 cannot hold these even escaped; a stray terminal escape in a message would break CI's parser.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text) -> str:
    return _XML_ILLEGAL.sub(_escape, str(text))


def _escape(m) -> str:
    """``\\xNN``; a path's undecodable byte (held as a surrogate, U+DC80..U+DCFF) as that byte."""
    code = ord(m.group())
    return f"\\x{code - 0xDC00 if 0xDC80 <= code <= 0xDCFF else code:02x}"


def short(f: dict) -> str:
    return Signature.from_dict(f["signature"]).short()


def test_name(f: dict) -> str:
    """A JUnit test's name: the finding's stable identity (its function, not its line), so the
    same test turns green once the bug is fixed, and a line shift does not rename it."""
    s = f["signature"]
    return f"{Signature.from_dict(s).short(where=s.get('site') or s['location'])} ({f['id']})"


_TREND = {"new": "new since the previous report", "still-open": "still open: also in the previous report"}


def failure_text(f: dict) -> str:
    """What CI shows under a failing test: the message, the case to paste, the repro."""
    case = case_text(f["case"])
    state = "minimized case" if f["minimized"] else "case (not minimized)"
    repro = f"python {f['repro']}" if f.get("repro") else "not exported"
    trend = f"; {_TREND[f['trend']]}" if f.get("trend") in _TREND else ""
    window = "".join(f"\n{line}" for line in window_lines(f["violation"].get("details", {})))
    window += f"\n{triage_text(f['triage'])}" if f.get("triage") else ""
    how = found_text(f.get("found_by") or {}, f["first_found_after_examples"])
    return (f"{f['message']}{window}\n\n{how} "
            f"({f['found_after_s']:.1f} s); finding {f['id']}{trend}\n\n{state}:\n{case}\n\nrepro: {repro}\n")


def junit_text(results) -> str:
    root = ET.Element("testsuites", name="fuzzrunner")
    for run in runs(report_dict(results)):
        found, fixed = run["findings"], run.get("fixed", [])
        suite = ET.SubElement(root, "testsuite", name=xml_safe(run["target"]), tests=str(1 + len(found) + len(fixed)),
                              failures=str(len(found)), errors="0", skipped="0", time=f"{run['duration_s']:.3f}")
        props = ET.SubElement(suite, "properties")
        for key in ("seed", "faults", "examples", "invalid", "worker_restarts"):
            value = ",".join(run[key]) if key == "faults" else run.get(key)
            ET.SubElement(props, "property", name=key, value=xml_safe(value))
        cls = xml_safe(f"fuzzrunner.{run['target']}")
        ok = ET.SubElement(suite, "testcase", classname=cls, name=xml_safe(f"{run['target']}: fuzz campaign"),
                           time=f"{run['duration_s']:.3f}")
        ET.SubElement(ok, "system-out").text = xml_safe(
            f"{plural(run['examples'], 'example')} ({run['invalid']} invalid), {plural(len(found), 'finding')}, "
            f"seed {run['seed']}, {plural(run['worker_restarts'], 'worker restart')}")
        for f in found:
            tc = ET.SubElement(suite, "testcase", classname=cls, name=xml_safe(test_name(f)), time="0")
            fail = ET.SubElement(tc, "failure", message=xml_safe(f["message"]), type=xml_safe(f["signature"]["kind"]))
            fail.text = xml_safe(failure_text(f))
        for f in fixed:  # the same name as when it failed: CI shows the test turn green
            tc = ET.SubElement(suite, "testcase", classname=cls, name=xml_safe(test_name(f)), time="0")
            ET.SubElement(tc, "system-out").text = xml_safe(
                f"fixed: in the previous report, not found by this run\n"
                f"was: {f['message']}")
    for item in (results.get("skipped", []) if isinstance(results, dict) else []):
        suite = ET.SubElement(root, "testsuite", name=xml_safe(item["target"]), tests="1", failures="0",
                              errors="0", skipped="1", time="0")
        tc = ET.SubElement(suite, "testcase", classname=xml_safe(f"fuzzrunner.{item['target']}"),
                           name=xml_safe(f"{item['target']}: fuzz campaign"), time="0")
        ET.SubElement(tc, "skipped", message=xml_safe(item["reason"]))
    ET.indent(root)
    return ET.tostring(root, encoding="us-ascii", xml_declaration=True).decode("ascii") + "\n"


def write_junit(results, path) -> Path:
    return write_text(path, junit_text(results))
