"""The report's picture: per compilation, its forward and backward ops as two rows of cells coloured by
region, the regions as bands with their op counts, lines from each backward op to the forward op it was
traced from, and the backward ops without an annotation marked.

With ``--profile``, a second picture beside it: per region, its forward and backward time as two bars.

Inline SVG only (the page stays self-contained, no script). Element classes are the page's contract:
``svg.region-map`` (one per compilation, ``data-compilation``), ``g.region-band`` (``data-region``, its
``text.region-label``), ``rect.op-cell`` (``fw`` / ``bw``, ``unannotated``, ``gradient-accumulation``),
``line.pairing``, ``path.unannotated-mark``; ``svg.region-times`` with one ``g.region-time`` per region
(``data-region``, its ``text.region-label``, ``rect.time-bar`` ``fw`` / ``bw`` with ``data-us``, the time in
microseconds, and ``data-kernels``, and a ``text.time-label`` beside each bar).
"""
from __future__ import annotations

import html

from .model import FORWARD_KINDS, NO_REGION, Report, region_of

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7")
NO_REGION_COLOUR = "#bbbbbb"
CELL, GAP, ROW, LEFT, BAND = 10, 2, 18, 90, 16


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def region_colours(report: Report) -> dict:
    """{region name: colour}: the annotated regions in palette order, the unannotated ops grey."""
    annotated = [r.name for r in report.regions if r.name != NO_REGION]
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(annotated)}
    colours[NO_REGION] = NO_REGION_COLOUR
    return colours


def _compilation_svg(index: int, forward: list, backward: list, report: Report, colours: dict) -> str:
    """``forward``: [(graph, op)] of the compilation's forward graphs; ``backward``: its BackwardOps."""
    width = LEFT + max(len(forward), len(backward), 1) * (CELL + GAP) + 20
    regions = [r for r in report.regions
               if any(g.compile_index == index for g, _ in r.forward) or any(b.graph.compile_index == index
                                                                                 for b in r.backward)]
    bands_height = len(regions) * BAND
    fw_y = bands_height + 8
    bw_y = fw_y + ROW + 40
    height = bw_y + ROW + 14
    x_of = {}
    parts = [f'<text x="4" y="{fw_y + CELL}" font-size="11">forward</text>',
             f'<text x="4" y="{bw_y + CELL}" font-size="11">backward</text>']
    for i, (g, op) in enumerate(forward):
        x = LEFT + i * (CELL + GAP)
        x_of[(g.index, op.qualified_name)] = x
        parts.append(f'<rect class="op-cell fw" x="{x}" y="{fw_y}" width="{CELL}" height="{ROW}" '
                     f'fill="{colours[region_of(op.custom)]}"><title>{_e(op.qualified_name)} '
                     f'{_e(op.target)}</title></rect>')
    for i, b in enumerate(backward):
        x = LEFT + i * (CELL + GAP)
        classes = "op-cell bw" + (" unannotated" if b.unannotated else "") + (
            " gradient-accumulation" if b.op.gradient_accumulation else "")
        fill = "#fff3c4" if b.op.gradient_accumulation else "#ffffff" if b.unannotated else colours[b.region]
        stroke = ' stroke="#d00000" stroke-width="2"' if b.unannotated else ""
        parts.append(f'<rect class="{classes}" x="{x}" y="{bw_y}" width="{CELL}" height="{ROW}" fill="{fill}"'
                     f'{stroke}><title>{_e(b.op.qualified_name)} {_e(b.op.target)}</title></rect>')
        if b.unannotated:
            parts.append(f'<path class="unannotated-mark" d="M{x} {bw_y + ROW + 3} l{CELL} 8 M{x + CELL} '
                         f'{bw_y + ROW + 3} l-{CELL} 8" stroke="#d00000" stroke-width="1.5"/>')
        if b.forward and (b.forward[0].index, b.forward[1].qualified_name) in x_of:
            fx = x_of[(b.forward[0].index, b.forward[1].qualified_name)] + CELL / 2
            parts.append(f'<line class="pairing" x1="{fx}" y1="{fw_y + ROW}" x2="{x + CELL / 2}" y2="{bw_y}" '
                         f'stroke="{colours[b.region]}" stroke-opacity="0.45" stroke-width="1"/>')
    for row, r in enumerate(regions):
        xs = [x_of[(g.index, op.qualified_name)] for g, op in r.forward if g.compile_index == index]
        fw = len(xs)
        bw = sum(1 for b in r.backward if b.graph.compile_index == index)
        y = row * BAND
        span = (f'<rect x="{min(xs)}" y="{y + 2}" width="{max(xs) - min(xs) + CELL}" height="{BAND - 4}" '
                f'fill="{colours[r.name]}" fill-opacity="0.35"/>' if xs else "")
        parts.append(f'<g class="region-band" data-region="{_e(r.name)}">{span}'
                     f'<text class="region-label" x="{min(xs) + 2 if xs else LEFT}" y="{y + BAND - 4}" font-size="11">'
                     f'{_e(r.name)}: {fw} forward, {bw} backward ops</text></g>')
    return (f'<svg class="region-map" data-compilation="{index}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="regions of compilation {index}">' + "".join(parts) + "</svg>")


def region_maps(report: Report) -> str:
    """One picture per AOTAutograd compilation that has a forward or backward graph."""
    colours = region_colours(report)
    compilations = sorted({g.compile_index for g in report.graphs if g.kind in FORWARD_KINDS + ("backward",)})
    out = []
    for index in compilations:
        forward = [(g, op) for g in report.graphs if g.compile_index == index and g.kind in FORWARD_KINDS
                   for op in g.ops]
        backward = [b for b in report.backward if b.graph.compile_index == index]
        out.append(f'<figure><figcaption>compilation {index}</figcaption>'
                   f'{_compilation_svg(index, forward, backward, report, colours)}</figure>')
    return "".join(out) or "<p>No forward or backward graph was captured.</p>"


BAR_LEFT, BAR_WIDTH, BAR_HEIGHT, LABEL_HEIGHT = 70, 300, 12, 16


def region_time_chart(times: list, names: dict, region_colours: dict) -> str:
    """Per region (``times``: profile.RegionTime, ``names``: {key: name on the page}), its forward and backward
    time as bars on one scale, the longest time the full width; the region's colour, backward paler."""
    if not times:
        return ""
    longest = max(max(t.forward_us, t.backward_us) for t in times) or 1.0
    row = LABEL_HEIGHT + 2 * (BAR_HEIGHT + 3) + 8
    width, height = BAR_LEFT + BAR_WIDTH + 190, row * len(times) + 4
    parts = []
    for i, t in enumerate(times):
        name = names.get(t.key, t.key)
        colour = region_colours.get(name, NO_REGION_COLOUR)
        y = i * row
        bars = [f'<text class="region-label" x="4" y="{y + 12}" font-size="11">{_e(name)}</text>']
        for j, (kind, label, us, kernels, opacity) in enumerate((
                ("fw", "forward", t.forward_us, t.forward_kernels, 1.0),
                ("bw", "backward", t.backward_us, t.backward_kernels, 0.55))):
            by = y + LABEL_HEIGHT + j * (BAR_HEIGHT + 3)
            bar = BAR_WIDTH * us / longest
            bars.append(
                f'<text x="4" y="{by + BAR_HEIGHT - 2}" font-size="10">{label}</text>'
                f'<rect class="time-bar {kind}" data-us="{us:.3f}" data-kernels="{kernels}" x="{BAR_LEFT}" y="{by}" '
                f'width="{bar:.2f}" height="{BAR_HEIGHT}" fill="{colour}" fill-opacity="{opacity}">'
                f'<title>{_e(name)} {label}: {us / 1000:.3f} ms, {kernels} kernel calls</title></rect>'
                f'<text class="time-label" x="{BAR_LEFT + bar + 4:.2f}" y="{by + BAR_HEIGHT - 2}" font-size="10">'
                f'{us / 1000:.3f} ms, {kernels} kernel calls</text>')
        parts.append(f'<g class="region-time" data-region="{_e(name)}">{"".join(bars)}</g>')
    return (f'<svg class="region-times" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="time per region">' + "".join(parts) + "</svg>")
