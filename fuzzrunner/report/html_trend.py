"""The HTML report's trend: per run a table of new / still-open / fixed findings, and for the
report a chart of findings per target over the earlier reports kept in ``history``."""

from __future__ import annotations

import html
import re

from ..signature import Signature
from .junit import plural, xml_safe
from .trend import FIXED, NEW, OPEN, history_entry

CSS = """
.trend{display:inline-block;padding:1px 8px;border-radius:999px;font-size:12px;font-weight:600;white-space:nowrap}
.trend.new{background:#ffebe9;color:#a40e26}.trend.still-open{background:#fff8c5;color:#7d4e00}
.trend.fixed{background:#dafbe1;color:#116329}
"""

_LABEL = {NEW: "new", OPEN: "still open", FIXED: "fixed"}
_LINES = ("#0969da", "#d1242f", "#1a7f37", "#8250df", "#e07b00", "#bf3989", "#57606a")


_BREAK = re.compile(r"([./_:])")  # a site may break after these rather than mid-word


def _e(x) -> str:
    return html.escape(xml_safe(x), quote=True)


def badge(f: dict) -> str:
    """A finding's trend as a small label; nothing when the report has no previous one."""
    t = f.get("trend")
    return f' <span class="trend {_e(t)}">{_LABEL[t]}</span>' if t in _LABEL else ""


def trend_section(run: dict, previous: dict | None) -> str:
    """The run's findings against the previous report; empty when there was none."""
    if "fixed" not in run:
        return ""
    when = f' (written {_e(previous.get("written_at"))})' if previous and previous.get("written_at") else ""
    rows = [(f, f.get("trend")) for f in run["findings"]] + [(f, FIXED) for f in run["fixed"]]
    rows.sort(key=lambda p: (NEW, OPEN, FIXED).index(p[1]) if p[1] in _LABEL else 3)
    counts = {t: sum(1 for _, s in rows if s == t) for t in _LABEL}
    head = (f'<p class="meta trend-counts">Against the previous report{when}: {counts[NEW]} new, '
            f'{counts[OPEN]} still open, {counts[FIXED]} fixed.</p>')
    if not rows:
        return f'<h3>Trend</h3>{head}'
    body = "".join(_trend_row(f, t) for f, t in rows)
    return (f'<h3>Trend</h3>{head}<table class="trend-table"><thead><tr><th>Status</th><th>Finding</th>'
            f'<th>Site</th><th>Id</th></tr></thead><tbody>{body}</tbody></table>')


def _trend_row(f: dict, status: str) -> str:
    s = f["signature"]
    what = _e(Signature.from_dict(s).short(where="", tool=False))
    site = _BREAK.sub(r"\1<wbr>", _e(s.get("site") or s["location"]))
    ident = (f'<a href="#f-{_e(f["id"])}">{_e(f["id"])}</a>' if status != FIXED else _e(f["id"]))
    return (f'<tr class="trend-{_e(status)}"><td><span class="trend {_e(status)}">{_LABEL.get(status, "?")}</span>'
            f'</td><td>{what}</td><td class="mono">{site}</td>'
            f'<td class="mono nw">{ident}</td></tr>')


_W, _H, _L, _R, _T, _B = 1000, 220, 62, 18, 14, 52


def history_section(report: dict) -> str:
    """Findings per target in each earlier report and this one; empty without a history."""
    points = list(report.get("history") or []) + [history_entry(report)]
    if len(points) < 2:
        return ""
    targets = sorted({t for p in points for t in p["runs"]})
    top = max([p["runs"][t]["findings"] for p in points for t in p["runs"]] + [1])
    pw, ph = _W - _L - _R, _H - _T - _B

    def x(i):
        return _L + pw * i / (len(points) - 1)

    def y(n):
        return _T + ph * (1 - n / top)

    out = [f'<svg class="history" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
           f'aria-label="findings per report over time">']
    for n in sorted({0, top, top // 2}):
        out.append(f'<line x1="{_L}" x2="{_W - _R}" y1="{y(n):.1f}" y2="{y(n):.1f}" stroke="#eaeef2"/>'
                   f'<text x="{_L - 8}" y="{y(n) + 4:.1f}" text-anchor="end">{n}</text>')
    step = max(1, len(points) // 8)
    for i in sorted(set(range(0, len(points) - 1, step)) | {len(points) - 1}):
        label = (points[i].get("written_at") or "?")[:16].replace("T", " ") if i < len(points) - 1 else "this report"
        anchor = "start" if i == 0 else "end" if i == len(points) - 1 else "middle"
        out.append(f'<text x="{x(i):.1f}" y="{_T + ph + 18}" text-anchor="{anchor}">{_e(label)}</text>')
    for k, t in enumerate(targets):
        color = _LINES[k % len(_LINES)]
        seq = [(i, p["runs"][t]["findings"]) for i, p in enumerate(points) if t in p["runs"]]
        line = " ".join(f"{x(i):.1f},{y(n):.1f}" for i, n in seq)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{x(i):.1f}" cy="{y(n):.1f}" r="4" fill="{color}"><title>{_e(t)}: '
                f'{plural(n, "finding")} ({_e(points[i].get("written_at") or "this report")})</title></circle>'
                for i, n in seq]
    out.append("</svg>")
    legend = "".join(f'<span><i style="background:{_LINES[k % len(_LINES)]}"></i>{_e(t)}</span>'
                     for k, t in enumerate(targets))
    return (f'<section id="history"><h2>Findings over time</h2><p class="meta">{plural(len(points), "report")}, '
            f'oldest first (hover a point)</p><figure>{"".join(out)}</figure><div class="legend">{legend}</div>'
            f'</section>')
