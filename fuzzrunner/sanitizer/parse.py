"""compute-sanitizer reports -> violations.

A text report, as printed with ``--show-backtrace no`` (each line behind the tool's
``=========`` prefix)::

    ========= Uninitialized __global__ memory read of size 4 bytes
    =========     at _lora_shrink_kernel+0x80 in /repo/fuzzrunner/kernels/lora_shrink.py:29
    =========     by thread (0,0,0) in block (0,0,0)
    =========     Address 0x7f3c7ec000fc
    =========

A report starts at an unindented line and runs through its indented lines; an empty
prefixed line, another unindented one, or a line of the program's own output ends it.
Triton kernels carry Python line info, so the ``at`` line names the kernel and the
``.py`` line of the access. ``--save FILE --xml`` records are read by ``parse_xml``.
The reports of one case are deduplicated: one violation per signature, with a count.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from .. import source
from ..violation import Violation

_PREFIX = "========="
# Process-level lines, not reports. "N errors were skipped (error buffer overflow)" comes at exit
# (seen on an H200 after a kernel flooded initcheck): it belongs to no case, and the reports
# that did arrive already name the bug. "Error: process didn't terminate successfully" is the
# tool's line when the sanitized worker dies: the death is already a crash violation.
_SKIP = re.compile(r"^(COMPUTE-SANITIZER|(ERROR|LEAK|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY\b"
                   r"|\d[\d,]* errors? were skipped|Error: process didn't terminate successfully"
                   r"|(Error: )?Target application returned an error|.*\bbuffer overflow\b)", re.IGNORECASE)
# Unindented lines that the tool prints as part of the report above them.
_CONTINUATION = ("and ", "Target application returned an error", "Default timeout can be adjusted",
                 "Awaiting target completion")
_FRAME = re.compile(r"(?:^|\s)at\s+(?P<func>[^\s+][^+]*?)[+:](?P<pc>0x[0-9a-fA-F]+)"
                    r"(?:\s+in\s+(?P<file>\S+?):(?P<line>\d+))?(?=\s|$)")
_THREAD = re.compile(r"thread \((\d+),\s*(\d+),\s*(\d+)\)", re.IGNORECASE)
_BLOCK = re.compile(r"block \((\d+),\s*(\d+),\s*(\d+)\)")
_ADDRESS = re.compile(r"(?:Address|Access to|__shared__)\s+(0x[0-9a-fA-F]+)")
_SIZE = re.compile(r"of size ([\d,]+) bytes?")
_NEAREST = re.compile(r"and is (?:([\d,]+) bytes (after|before)|(inside)) the nearest allocation "
                      r"at (0x[0-9a-fA-F]+) of size ([\d,]+) bytes?")
_ACCESS = re.compile(r"^(?:Uninitialized|Invalid|Potential invalid) (__\w+__) (?:memory )?(\w+)")


@dataclass
class Report:
    """One report: its lines without the tool's prefix, the first one unindented."""
    lines: list = field(default_factory=list)

    @property
    def header(self) -> str:
        return self.lines[0].strip()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def reports(lines) -> list[Report]:
    """Group sanitizer output lines (the program's own output may be mixed in) into reports."""
    out, current = [], None
    for raw in lines:
        if not raw.startswith(_PREFIX):
            current = None  # the program's own output (a marker, a traceback) ends a report
            continue
        payload = raw[len(_PREFIX) + 1:].rstrip()
        if not payload.strip():
            current = None
            continue
        indented, stripped = payload[0].isspace(), payload.strip()
        if current is not None and (indented or stripped.startswith(_CONTINUATION)):
            current.lines.append(payload)
        elif indented or _SKIP.match(stripped):
            current = None  # a detail whose head we never saw, or a summary: not a report
        else:
            current = Report([stripped])
            out.append(current)
    return out


def kernel_name(func: str) -> str:
    """``void ns::k<int>(int *, int)`` -> ``k``; a bare address (no symbol) -> ``""``."""
    name = func.strip()
    clone = re.match(r"^\[clone ([^\]]+)\]", name)
    if clone:
        name = clone.group(1)
    name = name.split("(", 1)[0].split("<", 1)[0].strip()
    name = name.split()[-1].rsplit("::", 1)[-1] if name else ""
    return "" if re.fullmatch(r"0x[0-9a-fA-F]+", name) else name


_PACKAGE_ROOT = source.import_root(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = ("__pycache__", "corpus", "site-packages", "node_modules", "build", "dist")


@functools.lru_cache(maxsize=4)
def _python_files(root: str) -> dict:
    """Basename -> absolute paths of the Python files under ``root`` (for reports with stripped paths)."""
    index: dict = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        for f in files:
            if f.endswith(".py"):
                index.setdefault(f, []).append(os.path.join(top, f))
    return index


def _local(path: str) -> str:
    """A path reported on another machine (a saved log): the same file here, found by its longest
    tail under fuzzrunner's import root or the working directory; else the path as it is."""
    if os.path.exists(path):
        return path
    parts = path.replace("\\", "/").split("/")
    for k in range(1, len(parts) - 1):
        for root in (_PACKAGE_ROOT, os.getcwd()):
            candidate = os.path.join(root, *parts[k:])
            if os.path.isfile(candidate):
                return candidate
    return path


def location(path: str | None, line) -> str:
    """``file:line`` as ``fuzzrunner.source`` writes it; a bare file name found once, in fuzzrunner or
    in the working directory, gets its folder."""
    if not path:
        return ""
    if os.path.isabs(path):
        return source.location(_local(path), int(line))
    if os.sep not in path:
        for root in (os.path.join(_PACKAGE_ROOT, "fuzzrunner"), os.getcwd()):  # ours first
            found = set(_python_files(root).get(path, []))
            if len(found) == 1:
                return source.location(found.pop(), int(line))
            if found:
                break
    return f"{path}:{int(line)}"


def classify(header: str, text: str) -> tuple[str | None, str]:
    """(the tool that prints such a report, or None; the violation kind)."""
    if header.startswith("Uninitialized"):
        return "initcheck", "uninitialized-read"
    if header.startswith("Invalid __"):
        return "memcheck", "sanitizer-error" if "misaligned" in text else "out-of-bounds"
    if "hazard detected" in header or "Race reported" in header or header.startswith("Potential invalid"):
        return "racecheck", "sanitizer-error"
    if header.startswith(("Barrier error detected", "Warpgroup MMA sequence error")):
        return "synccheck", "sanitizer-error"
    return None, "sanitizer-error"


def _frame(lines: list) -> dict | None:
    """The access site: the first ``at`` line, else the first frame named anywhere in the report."""
    found = [(line.strip().startswith("at "), m) for line in lines for m in [_FRAME.search(line)] if m]
    found.sort(key=lambda t: not t[0])  # stable: "at" lines first, each group in report order
    return found[0][1].groupdict() if found else None


def _int(s: str) -> int:
    return int(s.replace(",", ""))  # 2025.3 prints thousands separators


def _details(text: str) -> dict:
    d: dict = {}
    for key, rx in (("thread", _THREAD), ("block", _BLOCK)):
        m = rx.search(text)
        if m:
            d[key] = [int(g) for g in m.groups()]
    m = _ADDRESS.search(text)
    if m:
        d["address"] = m.group(1)
    m = _SIZE.search(text.splitlines()[0])
    if m:
        d["size"] = _int(m.group(1))
    m = _ACCESS.match(text)
    if m:
        d["space"], d["access"] = m.group(1), m.group(2)
    m = _NEAREST.search(text)
    if m:
        d["nearest_allocation"] = {"address": m.group(4), "size": _int(m.group(5)),
                                   "where": m.group(3) or m.group(2),
                                   "distance": _int(m.group(1)) if m.group(1) else 0}
    return d


def _violation(header: str, text: str, frame: dict | None, tool: str | None, extra: dict) -> Violation:
    guess, kind = classify(header, text)
    kernel = kernel_name(frame["func"]) if frame else ""
    loc = location(frame.get("file"), frame.get("line")) if frame and frame.get("file") else ""
    message = header + (f" in {kernel}" if kernel else "") + (f" at {loc}" if loc else "")
    details = {**_details(text), **extra, "count": 1, "report": text[:4000]}
    if frame and frame.get("pc"):
        details["pc"] = frame["pc"]
    return Violation(guess or tool or "compute-sanitizer", kind, kernel, loc, "", message[:300], details)


def to_violation(report: Report, tool: str | None = None) -> Violation:
    return _violation(report.header, report.text, _frame(report.lines), tool, {})


def dedupe(violations) -> list[Violation]:
    """One violation per signature (tool, kind, kernel, location, tensor), counting the reports."""
    by_sig: dict = {}
    for v in violations:
        n = v.details.get("count", 1)
        if v.signature in by_sig:
            by_sig[v.signature].details["count"] += n
        else:
            v.details["count"] = n
            by_sig[v.signature] = v
    return list(by_sig.values())


def map_tensors(violations, allocations) -> list[Violation]:
    """Name the tensor each reported address falls in; ``allocations`` is ``(name, start, nbytes)``."""
    spans = sorted((int(start), int(start) + int(n), name) for name, start, n in allocations)
    out = []
    for v in violations:
        addr = v.details.get("address")
        hit = next((s for s in spans if addr and s[0] <= int(addr, 16) < s[1]), None)
        if hit and not v.tensor:
            v = dataclasses.replace(v, tensor=hit[2], details={**v.details, "offset": int(addr, 16) - hit[0]})
        out.append(v)
    return out


def from_reports(reps, tool: str | None = None, allocations=()) -> list[Violation]:
    """Deduplicated violations. A bad case prints thousands of reports (one per thread) at a few
    sites: a report whose first two lines were seen is only counted, unless addresses must be
    mapped to tensors."""
    if allocations:
        return dedupe(map_tensors([to_violation(r, tool) for r in reps], allocations))
    first: dict = {}
    for r in reps:
        key = (r.header, r.lines[1].strip() if len(r.lines) > 1 else "")
        if key in first:
            first[key].details["count"] += 1
        else:
            first[key] = to_violation(r, tool)
    return dedupe(first.values())


def parse_text(text: str, *, tool: str | None = None) -> list[Violation]:
    """Every report in ``text`` as a violation, deduplicated."""
    return from_reports(reports(text.splitlines()), tool)


# -- XML (--save FILE --xml) ------------------------------------------------------------------

def _axes(el) -> list | None:
    if el is None:
        return None
    xyz = [el.findtext(a) for a in ("x", "y", "z")]
    if all(v is not None and v.strip().lstrip("-").isdigit() for v in xyz):
        return [int(v) for v in xyz]
    m = re.search(r"(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", el.text or "")
    return [int(g) for g in m.groups()] if m else None


def _first(rec, *tags):
    return next((e for t in tags for e in [rec.find(f".//{t}")] if e is not None), None)


def _xml_violation(rec, tool: str | None) -> Violation:
    header = " ".join((rec.findtext(".//text") or rec.findtext("kind") or "").split())
    where = rec.find(".//where")
    frame = None
    if where is not None and where.findtext("func"):
        folder, name = where.findtext("path"), where.findtext("file")  # a file apart from its folder, if so
        path = os.path.join(folder, name) if folder and name else folder or name
        frame = {"func": where.findtext("func"), "file": path,
                 "line": (where.findtext("line") or "0").strip() or "0", "pc": where.findtext("pc")}
        if not frame["file"] or frame["line"] == "0":
            frame["file"] = None
    extra: dict[str, object] = {k: v for k, v in (("thread", _axes(_first(rec, "threadIdx", "thread"))),
                               ("block", _axes(_first(rec, "blockIdx", "block")))) if v}
    address, size = rec.findtext(".//address"), rec.findtext(".//size")
    if address:
        extra["address"] = address.strip() if address.strip().startswith("0x") else hex(int(address))
    if size and size.strip().isdigit():
        extra["size"] = int(size)
    whole = " ".join(" ".join(rec.itertext()).split())
    v = _violation(header, header + "\n" + whole, frame, tool, extra)
    v.details["report"] = ET.tostring(rec, encoding="unicode")[:4000]
    return v


def parse_xml(data: str | bytes, *, tool: str | None = None) -> list[Violation]:
    """The records of a ``--save FILE --xml`` file; a file cut short keeps its complete records."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    try:
        recs = list(ET.fromstring(text[text.find("<"):].strip()).iter("record"))
    except ET.ParseError:
        recs = [ET.fromstring(m) for m in re.findall(r"<record>.*?</record>", text, re.DOTALL)]
    return dedupe([_xml_violation(r, tool) for r in recs])
