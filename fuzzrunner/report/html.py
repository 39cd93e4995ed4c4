"""One self-contained HTML page: a summary, each target's examples over time, its findings."""

from __future__ import annotations

import html
import math
import os
import re
import time
import urllib.parse
from pathlib import Path

from .. import names
from ..finding import case_text, triage_text
from ..sighting import found_text
from ..text import plural
from ..violation import cause_lines, window_lines
from .html_trend import CSS as _TREND_CSS
from .html_trend import badge, history_section, trend_section
from .json_report import SCHEMA, cluster_text, report_dict, skip_lines, write_text
from .junit import short, xml_safe

_CSS = """
:root{--ink:#1f2328;--muted:#656d76;--line:#d8dee4;--bg:#f6f8fa;--card:#fff;--accent:#0969da}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
 font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"DejaVu Sans",sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 24px 40px}
h1{font-size:24px;margin:0 0 2px}h2{font-size:18px;margin:0 0 12px}h3{font-size:15px;margin:20px 0 8px}
.sub,.meta,footer{color:var(--muted)}.meta{margin:-6px 0 12px}
.note{margin:2px 0;font-size:13px;color:#9a6700}
section{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:18px 20px;margin:18px 0;
 box-shadow:0 1px 2px rgba(31,35,40,.06)}
table{border-collapse:collapse;width:100%}
th{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);text-align:left;font-weight:600}
th,td{padding:7px 10px;border-bottom:1px solid var(--line);vertical-align:top}
td.mono{overflow-wrap:anywhere}.nw{white-space:nowrap}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.detail td{border-bottom:1px solid var(--line);padding-top:0;background:#fbfcfd}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12.5px}
pre{background:#f6f8fa;border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;max-height:320px}
.msg{margin:4px 0}.kind{display:inline-block;padding:1px 8px;border-radius:999px;color:#fff;font-size:12px;
 font-weight:600;white-space:nowrap}
.pill{display:inline-block;padding:1px 9px;border-radius:999px;font-size:12px;font-weight:600;margin-left:8px;
 vertical-align:2px}
.bad{background:#ffebe9;color:#a40e26}.good{background:#dafbe1;color:#116329}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
details summary{cursor:pointer;color:var(--muted)}
figure{margin:0 0 4px}svg{display:block;width:100%;height:auto}
svg text{font-family:inherit;font-size:11px;fill:#656d76}
.legend span{display:inline-block;margin-right:14px;font-size:12px;color:var(--muted)}
.legend i{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:5px;vertical-align:-1px}
"""


def _e(x) -> str:
    return html.escape(xml_safe(x), quote=True)


_BREAK = re.compile(r"([./_:])")


def _mono(x: str) -> str:
    """A code-ish table cell that may break after . / _ : rather than mid-word."""
    if not x:
        return '<td class="meta">&mdash;</td>'
    return '<td class="mono">' + _BREAK.sub(r"\1<wbr>", _e(x)) + "</td>"



def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def _kind(kind: str) -> str:
    return f'<span class="kind" style="background:{names.kind(kind).colour}">{_e(kind)}</span>'




def _pill(n: int) -> str:
    return f'<span class="pill {"bad" if n else "good"}">{plural(n, "finding")}</span>'


def _from_corpus(run: dict) -> set:
    return {r.get("id") for r in run["replayed"] if isinstance(r, dict) and r.get("still_failing")}


def _summary(report_runs: list) -> str:
    rows = "".join(
        f'<tr><td><a href="#run-{i}">{_e(r["target"])}</a></td><td class="num">{r["examples"]:,}</td>'
        f'<td class="num">{r["invalid"]:,}</td><td class="num">{_duration(r["duration_s"])}</td>'
        f'<td class="num">{len(r["findings"])}</td><td class="num mono">{_e(r["seed"])}</td>'
        f'<td class="mono">{_e(", ".join(r["faults"]) or "none")}</td></tr>' for i, r in enumerate(report_runs))
    return ('<section><h2>Summary</h2><table><thead><tr><th>Target</th><th class="num">Examples</th>'
            '<th class="num">Invalid</th><th class="num">Duration</th><th class="num">Findings</th>'
            f'<th class="num">Seed</th><th>Faults on</th></tr></thead><tbody>{rows}</tbody></table></section>')


def _href(repro: str, base: Path | None) -> str:
    """The repro script's link, relative to the HTML file (a relative path is from the working directory)."""
    p = Path(repro)
    if base is not None:
        p = Path(os.path.abspath(p))
        try:
            p = Path(os.path.relpath(p, base))
        except ValueError:  # another drive on Windows: keep it absolute
            pass
    return urllib.parse.quote(_path_bytes(p.as_posix()))  # bytes: a non-UTF-8 folder links as %FF, not a crash


def _path_bytes(path: str) -> bytes:
    """The file system's bytes of a path that came from it (undecodable bytes as surrogates)."""
    try:
        return os.fsencode(path)
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogatepass")


def _found(f: dict) -> str:
    """The "found" cell: how the bug showed (``found_text``), or the examples it took in a file without sources."""
    return found_text(f["found_by"], 0) if f.get("found_by") else plural(f["first_found_after_examples"], "example")


def _findings(run: dict, base: Path | None) -> str:
    if not run["findings"]:
        return f'<p class="meta">No findings in {plural(run["examples"], "example")}.</p>'
    known = _from_corpus(run)
    rows = []
    for f in run["findings"]:
        s = f["signature"]
        when = ("replayed from corpus" if f["id"] in known else
                f'<span>{_e(_found(f))}</span><br>'
                f'<span class="meta">{f["found_after_s"]:.1f} s</span>')
        repro = (f'<a href="{_e(_href(f["repro"], base))}" title="{_e(f["repro"])}">script</a>'
                 if f.get("repro") else '<span class="meta">&mdash;</span>')
        rows.append(
            f'<tr id="f-{_e(f["id"])}"><td>{_kind(s["kind"])}{badge(f)}</td>{_mono(s["tensor"])}{_mono(s["kernel"])}'
            f'{_mono(s["location"])}'
            f'<td>{when}</td><td>{"yes" if f["minimized"] else "no"}</td><td>{repro}</td></tr>'
            f'<tr class="detail"><td colspan="7"><div class="msg">{_e(f["message"])} '
            f'<span class="meta">[{_e(s["tool"])}, {_e(f["id"])}]</span>{_cause(f)}</div>{_window(f)}{_triage(f)}'
            f'<details><summary>case '
            f'({plural(len(f["case"].get("ops", [])), "op")})</summary><pre>{_e(case_text(f["case"]))}</pre>'
            f'</details></td></tr>')
    return ('<table class="findings"><thead><tr><th>Kind</th><th>Tensor</th><th>Kernel</th><th>Location</th>'
            f'<th>Found after</th><th>Minimized</th><th>Repro</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _triage(f: dict) -> str:
    """What the CPU replay of a GPU finding showed: reproduced as, not reproduced, or could not run."""
    t = f.get("triage")
    return f'<div class="msg triage">{_e(triage_text(t))}</div>' if isinstance(t, dict) else ""


def _cause(f: dict) -> str:
    """The op that should have written what was read (or the op that triggered the violation)."""
    lines = cause_lines((f.get("violation") or {}).get("details") or {}, f.get("message", ""))
    return "".join(f'<br><span class="meta">{_e(line)}</span>' for line in lines)


def _window(f: dict) -> str:
    """A numeric finding's expected and actual values around the worst element."""
    lines = window_lines(f["violation"].get("details", {}))
    return f'<pre class="window">{_e(chr(10).join(lines))}</pre>' if lines else ""


def _ticks(vmax: float, n: int = 6) -> list[float]:
    """0, step, 2 step, ... up to at least ``vmax``, with a step of 1, 2 or 5 times a power of ten."""
    raw = max(vmax, 1e-9) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(vmax / step - 1e-9)) + 1)] if vmax > 0 else [0, 1]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 or v == int(v) else f"{v:g}"


_W, _H, _L, _R, _T, _B = 1000, 260, 62, 18, 14, 42


def _plot(run: dict) -> str:
    """Examples over elapsed time, a marker where each finding was first found (hover for its title)."""
    points = sorted(tuple(p) for p in run["timeline"])
    if not points:
        return '<p class="meta">No examples ran: nothing to plot.</p>'
    if len(points) > 400:  # a nightly run has thousands of points; the eye needs a few hundred
        points = points[::math.ceil(len(points) / 400)] + [points[-1]]
    known = _from_corpus(run)
    marks = [f for f in run["findings"] if f["id"] not in known]
    tmax = max([run["duration_s"], points[-1][0]] + [f["found_after_s"] for f in marks]) or 1.0
    unit, scale = ("h", 3600) if tmax >= 7200 else ("min", 60) if tmax >= 180 else ("s", 1)
    xt = _ticks(tmax / scale)
    yt = _ticks(max([points[-1][1], run["examples"]] + [f["first_found_after_examples"] for f in marks]))
    pw, ph = _W - _L - _R, _H - _T - _B

    def x(t):
        return _L + pw * (t / scale) / xt[-1]

    def y(n):
        return _T + ph * (1 - n / yt[-1])

    out = [f'<svg viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
           f'aria-label="examples over time for {_e(run["target"])}">']
    for v in yt:
        out.append(f'<line x1="{_L}" x2="{_W - _R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eaeef2"/>'
                   f'<text x="{_L - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    for v in xt:
        out.append(f'<line x1="{x(v * scale):.1f}" x2="{x(v * scale):.1f}" y1="{_T + ph}" y2="{_T + ph + 5}" '
                   f'stroke="#8c959f"/><text x="{x(v * scale):.1f}" y="{_T + ph + 18}" '
                   f'text-anchor="middle">{_fmt(v)}</text>')
    line = " ".join(f"{x(t):.1f},{y(n):.1f}" for t, n, _ in [(0, 0, 0)] + points)
    out.append(f'<polygon points="{x(0):.1f},{y(0):.1f} {line} {x(points[-1][0]):.1f},{y(0):.1f}" '
               f'fill="#0969da" fill-opacity=".08"/><polyline points="{line}" fill="none" stroke="#0969da" '
               f'stroke-width="2" stroke-linejoin="round"/>'
               f'<line x1="{_L}" x2="{_W - _R}" y1="{_T + ph}" y2="{_T + ph}" stroke="#8c959f"/>'
               f'<text x="{_L + pw / 2:.0f}" y="{_H - 6}" text-anchor="middle">elapsed ({unit})</text>'
               f'<text transform="translate(14 {_T + ph / 2:.0f}) rotate(-90)" text-anchor="middle">examples</text>')
    for f in marks:
        s, cx, cy = f["signature"], x(f["found_after_s"]), y(f["first_found_after_examples"])
        out.append(f'<g><title>{_e(short(f))}&#10;found after {plural(f["first_found_after_examples"], "example")}, '
                   f'{f["found_after_s"]:.1f} s</title><line x1="{cx:.1f}" x2="{cx:.1f}" y1="{cy:.1f}" '
                   f'y2="{_T + ph}" stroke="{names.kind(s["kind"]).colour}" stroke-dasharray="3 3"/>'
                   f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="6" fill="{names.kind(s["kind"]).colour}" '
                   f'stroke="#fff" stroke-width="2"/></g>')
    out.append("</svg>")
    kinds = sorted({f["signature"]["kind"] for f in marks})
    legend = "".join(f'<span><i style="background:{names.kind(k).colour}"></i>{_e(k)}</span>'
                     for k in kinds)
    note = '<span>hover a marker for the finding</span>' if marks else ""
    return f'<figure>{"".join(out)}</figure><div class="legend">{legend}{note}</div>'


def _run_section(run: dict, index: int, base: Path | None, previous: dict | None = None) -> str:
    replayed = run["replayed"]
    again = sum(1 for r in replayed if isinstance(r, dict) and r.get("still_failing"))
    unsupported = len(run.get("unsupported", []))  # cases the release under test cannot run: kept, skipped
    parts = ([f"{len(replayed)} replayed, {again} still failing"] if replayed else []) + \
        ([f"{unsupported} not supported by this release (skipped, kept)"] if unsupported else [])
    corpus = f" &middot; corpus: {', '.join(parts)}" if parts else ""
    meta = (f'seed <span class="mono">{_e(run["seed"])}</span> &middot; faults on: '
            f'<span class="mono">{_e(", ".join(run["faults"]) or "none")}</span> &middot; '
            f'{plural(run["examples"], "example")} ({run["invalid"]:,} invalid) in {_duration(run["duration_s"])} '
            f'&middot; {plural(run["worker_restarts"], "worker restart")}{corpus}'
            + (f' &middot; {_e(cluster_text(run["cluster"]))}' if run.get("cluster") else ""))
    return (f'<section id="run-{index}"><h2>{_e(run["target"])}{_pill(len(run["findings"]))}</h2>'
            f'<p class="meta">{meta}</p>{_notes(run)}{_plot(run)}<h3>Findings</h3>{_findings(run, base)}'
            f'{trend_section(run, previous)}{_coverage(run)}</section>')


def _notes(run: dict) -> str:
    """What the run could not do, said where it is read: cases kept off the GPU, tool limits, warnings, errors."""
    lines = skip_lines(run.get("known_crash_skips", 0), run.get("known_crash_causes", []), run.get("generated", 0))
    lines += [f"tool limitation ({c['count']} case(s)): {c['message']}" for c in run.get("tool_limitations", [])]
    lines += [f"warning: {w}" for w in run.get("warnings", [])] + [f"ERROR: {e}" for e in run.get("errors", [])]
    return "".join(f'<p class="note">{_e(line)}</p>' for line in lines)


def html_text(results, *, base: Path | None = None) -> str:
    """The page; ``base`` is the folder it will live in, so repro links can be relative."""
    from .._version import __version__
    report = report_dict(results)
    report_runs = report["runs"]
    total = sum(len(r["findings"]) for r in report_runs)
    title = f"fuzzrunner: {plural(total, 'finding')} in {plural(len(report_runs), 'target')}"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    body = "".join(_run_section(r, i, base, report.get("previous")) for i, r in enumerate(report_runs))
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
            f'<style>{_CSS}{_TREND_CSS}</style></head><body><main><header><h1>fuzzrunner report</h1>'
            f'<p class="sub">{plural(total, "finding")} across {plural(len(report_runs), "target")} '
            f'&middot; generated {stamp}</p></header>'
            f'{_summary(report_runs)}{_skipped(report)}{history_section(report)}{body}'
            f'<footer>fuzzrunner {_e(__version__)} '
            f'&middot; report schema {SCHEMA}</footer></main></body></html>\n')
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")  # _e shows undecodable path bytes as \xNN


def _skipped(report: dict) -> str:
    items = report.get("skipped") or []
    if not items:
        return ""
    rows = "".join(f'<li><b>{_e(i["target"])}</b>: {_e(i["reason"])}</li>' for i in items)
    return f'<section class="skipped"><h2>Not run</h2><ul>{rows}</ul></section>'


def write_html(results, path) -> Path:
    path = Path(path)
    return write_text(path, html_text(results, base=path.absolute().parent))


# -- coverage of the case space (coverage.py) --------------------------------------------------

_COVERAGE_CSS = (".cov-never{background:#ffebe9;border:1px solid #ff8182;border-radius:8px;padding:8px 12px;"
                 "margin:0 0 12px}.cov-never b{color:#a40e26}.cov-bar{display:inline-block;height:9px;"
                 "background:#0969da;border-radius:2px;vertical-align:0}tr.never td{background:#fff5f5;color:#a40e26}"
                 ".heat{border-collapse:collapse;width:auto;font-size:10px}.heat td{width:15px;height:15px;padding:0;"
                 "border:1px solid #eef1f4}.heat td.zero{background:#fff5f5}.heat th{font-size:10px;padding:0 4px;"
                 "text-transform:none;letter-spacing:0;white-space:nowrap}.heat th.v{writing-mode:vertical-rl;"
                 "transform:rotate(180deg);vertical-align:bottom;padding:4px 0}.heat th.never{color:#a40e26}")
_HEAT_MAX = 60  # features in the heat map; more would make an unreadable page


def _coverage_names(cov: dict) -> list:
    return sorted(set(cov.get("declared", [])) | set(cov.get("features", {})))


def _coverage_table(cov: dict) -> str:
    cases, counts, never = cov["cases"], cov["features"], set(cov["never_reached"])
    rows = []
    for n in _coverage_names(cov):
        c = counts.get(n, 0)
        share = c / cases if cases else 0.0
        rows.append(f'<tr{" class=never" if n in never else ""}>{_mono(n)}<td class="num">{c:,}</td>'
                    f'<td class="num">{100 * share:.1f}%</td><td><span class="cov-bar" '
                    f'style="width:{max(1, round(160 * share)) if c else 0}px"></span>'
                    f'{" never reached" if n in never else ""}</td></tr>')
    return ('<table><thead><tr><th>Feature</th><th class="num">Cases</th><th class="num">Share</th><th></th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _heat_color(n: int, cases: int) -> str:
    """White to the accent blue, on a log scale of the share of cases (rare pairs stay visible)."""
    t = math.log1p(n) / math.log1p(max(cases, 1))
    r, g, b = (round(255 + (c - 255) * t) for c in (9, 105, 218))
    return f"#{r:02x}{g:02x}{b:02x}"


def _heat_map(cov: dict) -> str:
    """Feature x feature: how many cases had both (the diagonal: the feature); never together in pink."""
    names = _coverage_names(cov)[:_HEAT_MAX]
    counts, never, cases = cov["features"], set(cov["never_reached"]), cov["cases"]
    pairs = {(a, b): n for a, b, n in cov["pairs"]}
    head = "".join(f'<th class="v{" never" if n in never else ""}">{_e(n)}</th>' for n in names)
    rows = []
    for a in names:
        cells = []
        for b in names:
            n = counts.get(a, 0) if a == b else pairs.get((min(a, b), max(a, b)), 0)
            title = _e(a if a == b else f"{a} & {b}") + f": {n:,} case(s)"
            style = f' style="background:{_heat_color(n, cases)}"' if n else ""
            cells.append(f'<td{style if n else " class=zero"} title="{title}"></td>')
        rows.append(f'<tr><th{" class=never" if a in never else ""}>{_e(a)}</th>{"".join(cells)}</tr>')
    more = (f'<p class="meta">The first {_HEAT_MAX} of {len(_coverage_names(cov))} features.</p>'
            if len(_coverage_names(cov)) > _HEAT_MAX else "")
    return (f'<details open><summary>combinations reached (hover a cell; pink: never together)</summary>'
            f'<div style="overflow:auto"><table class="heat"><thead><tr><th></th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>{more}</details>')


def _coverage(run: dict) -> str:
    """The run's coverage: declared features never reached first (a clean pass on an unreached state
    proves nothing about it), then each feature's count and the feature x feature heat map."""
    cov = run.get("coverage")
    if not cov:
        return ""
    never = cov["never_reached"]
    steer = "steered towards rare features" if cov["steering"] else "not steered"
    meta = (f'<p class="meta">{plural(cov["cases"], "valid case")} run (replayed and generated), '
            f'{plural(len(cov["features"]), "feature")} reached; {steer}.</p>')
    if not cov["declared"]:
        warn = '<p class="meta">The target declares no feature space: unreached features cannot be named.</p>'
    elif never:
        warn = (f'<div class="cov-never"><b>{plural(len(never), "declared feature")} never reached:</b> '
                f'{", ".join(f"<code>{_e(n)}</code>" for n in never)}. Findings say nothing about these '
                f'states.</div>')
    else:
        warn = f'<p class="meta">All {len(cov["declared"])} declared features reached.</p>'
    body = _coverage_table(cov) + (_heat_map(cov) if _coverage_names(cov) else "")
    return f'<style>{_COVERAGE_CSS}</style><h3>Coverage</h3>{meta}{warn}{body}'
