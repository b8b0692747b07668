"""The report as one self-contained HTML page: inline CSS, no script, no external resource.

Element ids and classes are the page's contract with its tests and with anyone who
scrapes it: ``#coverage`` (one ``tr.coverage-row`` per region, its ``td.consumers`` saying what in torch reads
the annotation: ``tr.inductor-region`` for a region regional Inductor compiles, ``tr.memory-budget-region`` for
one with an activation memory budget), ``#unannotated``
(one ``li`` per unannotated backward op), ``section.region`` (``table.forward-ops``,
``table.backward-ops``), ``tr.op`` rows with ``id="op-<graph>-<op>"``, backward rows
linking to their forward row with ``a.forward-link``, ``tr.unannotated`` and
``tr.gradient-accumulation`` for highlighted rows, ``section.dynamo-graph``; ``#region-maps`` holds the
pictures of svg.py. With ``--profile``: ``#region-times`` (one ``tr.region-time-row`` per region, ``data-region``,
its ``td`` of times carrying ``data-us``), or ``#region-times-none`` when no annotated kernel ran; ``#trace`` names
the Chrome trace beside the page; ``#region-time-chart`` holds svg.py's bar chart, beside ``#region-maps``.
"""
from __future__ import annotations

import html
import re

from .model import COMPILE_WITH_INDUCTOR, MEMORY_BUDGET, Report
from .svg import region_colours, region_maps, region_time_chart

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: .4em 0 1em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; }
code, td.mono { font-family: ui-monospace, monospace; font-size: 12px; }
tr.unannotated td { background: #ffd6d6; }
tr.gradient-accumulation td { background: #fff3c4; }
tr.inductor-region td.consumers, tr.memory-budget-region td.consumers { background: #dff3df; }
tr:target td { outline: 2px solid #1a5fb4; }
.columns { display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }
.legend span { padding: 1px 6px; margin-right: 1em; }
.meta { color: #555; }
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def op_id(graph, op) -> str:
    return "op-{}-{}".format(graph.index, re.sub(r"[^A-Za-z0-9_.-]", "_", op.qualified_name))


def _percent(value) -> str:
    return "–" if value is None else f"{value:.0f}%"


def _coverage(report: Report) -> str:
    rows = []
    for r in report.regions:
        read_by = r.consumers
        classes = ["coverage-row"] + (["inductor-region"] if any(c.startswith("regional Inductor") for c in read_by)
                                      else []) + (["memory-budget-region"] if any(
                                          c.startswith("activation memory budget") for c in read_by) else [])
        rows.append(
            f'<tr class="{" ".join(classes)}" data-region="{_e(r.name)}"><td class="mono">{_e(r.name)}</td>'
            f'<td class="num">{len(r.forward)}</td><td class="num">{len(r.backward)}</td>'
            f'<td class="num">{_percent(r.backward_annotated_percent)}</td>'
            f'<td class="num">{r.gradient_accumulation}</td><td class="consumers">{_e("; ".join(read_by))}</td></tr>')
    return ('<table id="coverage"><tr><th>region</th><th>forward ops</th><th>backward ops</th>'
            '<th>% backward annotated</th><th>gradient-accumulation ops</th>'
            f'<th title="keys {COMPILE_WITH_INDUCTOR}, {MEMORY_BUDGET}">read by torch</th></tr>'
            + "".join(rows) + "</table>")


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}"


def _region_times(profile) -> str:
    """The table of ``profile`` (profile.ProfilePage), or why it is empty."""
    trace = (f'<p id="trace">Chrome trace of the run: <code>{_e(profile.trace)}</code>, beside this page (open it in '
             'Perfetto or chrome://tracing; the scopes are named <code>annotation key=value, ...</code>).</p>')
    if not profile.times:
        return (trace + '<p id="region-times-none">No kernel ran inside an annotation scope: the script compiled '
                "nothing annotated (with Inductor, aot_eager or regional Inductor), or "
                "ran no step after compiling.</p>")
    total = sum(t.total_us for t in profile.times) or 1.0
    rows = []
    for t in profile.times:
        name = profile.names.get(t.key, t.key)
        rows.append(
            f'<tr class="region-time-row" data-region="{_e(name)}"><td class="mono">{_e(name)}</td>'
            f'<td class="num" data-us="{t.forward_us:.3f}">{_ms(t.forward_us)}</td>'
            f'<td class="num">{t.forward_kernels}</td>'
            f'<td class="num" data-us="{t.backward_us:.3f}">{_ms(t.backward_us)}</td>'
            f'<td class="num">{t.backward_kernels}</td>'
            f'<td class="num">{100.0 * t.total_us / total:.0f}%</td></tr>')
    return (trace + '<table id="region-times"><tr><th>region</th><th>forward ms</th><th>forward kernel calls</th>'
            '<th>backward ms</th><th>backward kernel calls</th><th>share of annotated time</th></tr>'
            + "".join(rows) + "</table>")


def _unannotated(report: Report) -> str:
    items = report.unannotated_backward
    if not items:
        return '<p id="unannotated-none">Every backward op carries an annotation.</p>'
    lis = []
    for b in items:
        link = f'<a href="#{op_id(b.graph, b.op)}">{_e(b.op.qualified_name)}</a>'
        origin = (f' from forward op <a class="forward-link" href="#{op_id(*b.forward)}">'
                  f'{_e(b.forward[1].qualified_name)}</a>' if b.forward else " (no forward op with its seq_nr)")
        lis.append(f"<li>backward graph {b.graph.index}: {link} <code>{_e(b.op.target)}</code>{origin}</li>")
    return '<ul id="unannotated">' + "".join(lis) + "</ul>"


def _forward_table(rows) -> str:
    body = "".join(
        f'<tr class="op" id="{op_id(g, op)}"><td>{g.index}</td><td class="mono">{_e(op.qualified_name)}</td>'
        f'<td class="mono">{_e(op.target)}</td><td class="num">{_e(op.seq_nr if op.seq_nr is not None else "")}</td></tr>'
        for g, op in rows)
    return ('<table class="forward-ops"><tr><th>graph</th><th>forward op</th><th>target</th><th>seq_nr</th></tr>'
            + body + "</table>")


def _backward_table(rows) -> str:
    body = []
    for b in rows:
        classes = ["op"] + (["unannotated"] if b.unannotated else []) + (
            ["gradient-accumulation"] if b.op.gradient_accumulation else [])
        link = (f'<a class="forward-link" href="#{op_id(*b.forward)}">{_e(b.forward[1].qualified_name)}</a>'
                if b.forward else "")
        body.append(
            f'<tr class="{" ".join(classes)}" id="{op_id(b.graph, b.op)}"><td>{b.graph.index}</td>'
            f'<td class="mono">{_e(b.op.qualified_name)}</td><td class="mono">{_e(b.op.target)}</td>'
            f'<td class="num">{_e(b.op.seq_nr if b.op.seq_nr is not None else "")}</td><td class="mono">{link}</td>'
            f'<td class="mono">{_e(b.op.custom) if b.op.custom else ""}</td></tr>')
    return ('<table class="backward-ops"><tr><th>graph</th><th>backward op</th><th>target</th><th>seq_nr</th>'
            '<th>forward op</th><th>annotation</th></tr>' + "".join(body) + "</table>")


def _regions(report: Report) -> str:
    parts = []
    for r in report.regions:
        parts.append(
            f'<section class="region" data-region="{_e(r.name)}"><h3><code>{_e(r.name)}</code></h3>'
            f'<div class="columns"><div><h4>forward ({len(r.forward)})</h4>{_forward_table(r.forward)}</div>'
            f'<div><h4>backward ({len(r.backward)})</h4>{_backward_table(r.backward)}</div></div></section>')
    return "".join(parts)


def _dynamo_graphs(report: Report) -> str:
    parts = []
    for g in report.graphs:
        if g.kind != "dynamo":
            continue
        rows = "".join(
            f'<tr class="op" id="{op_id(g, op)}"><td class="mono">{_e(op.qualified_name)}</td>'
            f'<td class="mono">{_e(op.target)}</td><td class="mono">{_e(op.custom) if op.custom else ""}</td></tr>'
            for op in g.ops)
        parts.append(
            f'<section class="dynamo-graph" id="graph-{g.index}"><h3>graph {g.index} '
            f'(compilation {g.compile_index}, {len(g.ops)} ops)</h3>'
            f'<table><tr><th>op</th><th>target</th><th>annotation</th></tr>{rows}</table></section>')
    return "".join(parts) or "<p>No Dynamo graph was captured.</p>"


def render(report: Report, *, title: str, details: list, profile=None) -> str:
    """The page. ``details`` are short lines shown under the title (command, torch, rank); ``profile``, a
    profile.ProfilePage, adds the time per region."""
    counts = ", ".join(f"{report.count(k)} {k}" for k in ("dynamo", "forward", "backward", "inference"))
    meta = "".join(f"<div>{_e(line)}</div>" for line in details)
    timing = maps = ""
    if profile is not None:
        timing = f"""<h2>Time per region</h2>
<p class="legend">The profiler's CPU time of the kernel scopes of each region (Inductor's kernel_annotations flag),
summed over every step the script ran; compilation is not profiled. A kernel call is one scope: a kernel, an extern
call, or a run of ops of one region in a graph that runs eagerly.</p>
{_region_times(profile)}"""
        chart = region_time_chart(profile.times, profile.names, region_colours(report))
        maps = f'<div id="region-time-chart"><h3>time per region</h3>{chart}</div>' if chart else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
<div class="meta">{meta}<div id="graph-counts">graphs captured: {counts}</div></div>
<h2>Coverage</h2>
{_coverage(report)}
{timing}
<h2>Regions at a glance</h2>
<p class="legend">Per compilation: forward ops (top row) and backward ops (bottom row) coloured by region, a line
from each backward op to the forward op it was traced from; backward ops without an annotation are white with a
red outline and a cross.</p>
<div class="columns"><div id="region-maps">{region_maps(report)}</div>{maps}</div>
<h2>Backward ops without an annotation</h2>
<p class="legend"><span style="background:#ffd6d6">no annotation</span>
<span style="background:#fff3c4">gradient accumulation (not counted)</span></p>
{_unannotated(report)}
<h2>Regions: forward and backward ops</h2>
{_regions(report)}
<h2>Dynamo graphs</h2>
{_dynamo_graphs(report)}
</body></html>
"""
