"""Figures of the planner (ipulab.plan), pure functions of plain data (its JSON records):
memory per IPU by kind against the In-Processor Memory line, step time by part, a table of
mappings, and the whole `ipulab plan --report` page."""
from __future__ import annotations

from html import escape

from bokeh.layouts import column
from bokeh.models import ColumnDataSource, Div, Span
from bokeh.plotting import figure

from .palette import SERIES

MIB = 2**20


def memory_bars(memory_per_ipu: list[dict], sram_bytes: int, title: str = "") -> figure:
    """Stacked bars, one per pipeline stage (an IPU of it): bytes per kind in MiB, and a red
    line at the In-Processor Memory of one IPU."""
    kinds = list(memory_per_ipu[0]) if memory_per_ipu else []
    stages = [f"stage {i}" for i in range(len(memory_per_ipu))]
    data = {"stage": stages}
    data.update({k: [m[k] / MIB for m in memory_per_ipu] for k in kinds})
    top = max([sum(m.values()) for m in memory_per_ipu] + [sram_bytes]) / MIB
    f = figure(x_range=stages, title=title or "Memory per IPU by kind", height=300, width=620,
               y_axis_label="MiB", y_range=(0, top * 1.1), toolbar_location=None)
    if kinds:
        f.vbar_stack(kinds, x="stage", width=0.7, source=ColumnDataSource(data),
                     color=list(SERIES[:len(kinds)]),
                     legend_label=[k.replace("_", " ") for k in kinds])
        f.add_layout(f.legend[0], "right")      # beside the bars, never over them
        f.legend.label_text_font_size = "8pt"
    f.add_layout(Span(location=sram_bytes / MIB, dimension="width", line_color="#d62728",
                      line_dash="dashed", line_width=2))
    return f


def time_breakdown(times: dict, title: str = "") -> figure:
    """Horizontal bars: seconds per step by part (compute, bubble, collectives, streaming)."""
    parts = list(times)
    f = figure(y_range=parts[::-1], title=title or "Step time by part", height=240, width=620,
               x_axis_label="seconds per step", toolbar_location=None)
    f.hbar(y=parts, right=[times[p] for p in parts], height=0.6, color=SERIES[0])
    return f


def mapping_table(records: list[dict], limit: int = 40) -> Div:
    """An HTML table of mapping records (fits first as given): t, p, r, rts, phases, state,
    peak MiB per IPU, samples/s, reason."""
    head = ("t", "p", "layers", "r", "rts", "phases", "state", "fits", "MiB/IPU",
            "samples/s", "why")
    rows = []
    for r in records[:limit]:
        t = "x".join(str(x) for x in r["tensor_parallel"] if x > 1) or "1"
        cells = (t, r["pipeline"], "/".join(map(str, r["layers_per_stage"])), r["replicas"],
                 "yes" if r["rts"] else "", r["phases"], r["optimizer_state"],
                 "yes" if r["fits"] else "no", f"{r['peak_bytes_per_ipu'] / MIB:,.0f}",
                 f"{r['samples_per_second']:,.1f}", r["reason"])
        rows.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    more = f"<p>... and {len(records) - limit} more</p>" if len(records) > limit else ""
    return Div(text="<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
               + "".join(rows) + "</table>" + more)


def planner_report(doc: dict) -> column:
    """The page of `ipulab plan --report`: what the numbers rest on (the planner's named
    assumptions), the best mapping's memory and time figures, then the table of every
    mapping (doc: the planner's JSON document)."""
    best = doc["mappings"][0]
    notes = "".join(f"<li>{escape(a)}</li>" for a in doc.get("assumptions", ()))
    verdict = best["reason"] if best["fits"] else f"does not fit: {best['reason']}"
    head = Div(text=f"<h2>ipulab plan: {escape(doc['model'])} on {escape(doc['system'])}</h2>"
               f"<p>{doc['parameters']:,} parameters; first mapping: {escape(verdict)}</p>"
               + (f"<p>The numbers rest on:</p><ul>{notes}</ul>" if notes else ""))
    parts = [head]
    if best.get("memory_per_ipu"):
        parts.append(memory_bars(best["memory_per_ipu"], doc["sram_bytes_per_ipu"]))
    if best.get("times"):
        parts.append(time_breakdown(best["times"]))
    parts.append(mapping_table(doc["mappings"]))
    return column(*parts)
