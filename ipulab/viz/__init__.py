"""Bokeh figures of a run (docs/inside.md): pure functions, Profile in, bokeh model out.

    from ipulab import viz
    viz.setup()                              # once per notebook: bokeh from INLINE resources
    show(viz.tile_memory_heatmap(profile))   # memory of every tile on the IPU floor plan
    show(viz.bsp_trace(profile))             # supersteps: sync, exchange, compute over time
    show(viz.exchange_matrix(profile))       # bytes between tile blocks and between IPUs
    show(viz.liveness(profile))              # bytes in use after each executed step
    show(viz.codelet_summary(profile))       # cycles by codelet
    show(viz.linked(profile))                # heatmap + trace with linked selection
    show(viz.pod_partitions(16, partitions)) # a Pod's IPUs coloured by owner (ipulab.vipu)
    show(viz.ipu_gantt(schedule.gantt(), 16)) # a day of jobs: IPUs over time
    viz.save_html(viz.training_report(trainer.history, profile, title, rows), "out.html")

viz reads Profile objects only (never ipulab.machine). Every figure draws a bounded number of
glyphs: tiles are grouped (layout.tile_groups) where one glyph per tile would be too many.
"""
from .base import fmt_bytes
from .codelets import codelet_summary
from .exchange import exchange_matrix
from .heatmap import tile_memory_heatmap
from .linked import linked
from .liveness import liveness
from .notebook import setup
from .pod import ipu_gantt, pod_partitions
from .report import save_html, training_report
from .trace import bsp_trace

__all__ = ["setup", "tile_memory_heatmap", "bsp_trace", "exchange_matrix", "liveness",
           "codelet_summary", "linked", "training_report", "save_html", "fmt_bytes",
           "pod_partitions", "ipu_gantt"]
