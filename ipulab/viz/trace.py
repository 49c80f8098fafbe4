"""bsp_trace: the run as a Gantt chart of BSP phases. x is BSP time in cycles; each row is a group
of tiles; a bar is one phase of one executed step on that group, as long as the group's slowest
tile spent in it. Barriers line the phases up: a phase ends when its slowest tile is done."""
from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource, FixedTicker, Range1d

from .base import figure, fmt_cycles, hover, note, plural
from .layout import TileGroups, tile_groups
from .palette import OTHER, PHASE_COLORS

MAX_STEPS = 500      # executed steps drawn at most (a Repeat can execute thousands) ...
MAX_BARS = 20_000    # ... and no more steps than fit in this many bars
WIDTH = 560          # plot area (px): with tile labels, legend and toolbar, < 1,000 px


def _step_bars(phases, groups: TileGroups) -> dict[str, np.ndarray]:
    """Bars of one step relative to its start: one per (phase, group) with nonzero cycles."""
    kinds = np.asarray([k for k, _ in phases], object)
    colors = np.asarray([PHASE_COLORS.get(k, OTHER) for k in kinds], object)
    per_tile = np.stack([np.asarray(c, np.int64) for _, c in phases])   # (phase, tile)
    group_max = groups.max(per_tile)                                    # (phase, group)
    active = groups.sum((per_tile > 0).astype(np.int64))
    length = per_tile.max(axis=1)             # BSP time of each phase: its slowest tile
    p, r = np.nonzero(group_max)
    return {"phase": kinds[p], "color": colors[p], "phase_index": p,
            "offset": (np.cumsum(length) - length)[p], "row": r, "cycles": group_max[p, r],
            "phase_cycles": length[p], "active": active[p, r]}


_BAR_COLUMNS = ("phase", "color", "phase_index", "offset", "row", "cycles", "phase_cycles",
                "active")


def shown_steps(profile, groups: TileGroups, first_step: int = 0, max_steps: int = MAX_STEPS,
                max_bars: int | None = MAX_BARS) -> tuple[list, list]:
    """The executed steps drawn from first_step on (at most max_steps, and at least one but no
    more than fit in max_bars bars; None: no limit), with their bars. A step executed many times (in a Repeat)
    is aggregated once and reused."""
    records = profile.steps[first_step:first_step + max_steps]
    cache: dict[int, dict | None] = {}
    for rec in records:
        if rec.index not in cache:
            cache[rec.index] = _step_bars(rec.phases, groups) if rec.phases else None
    bars = [cache[rec.index] for rec in records]
    if max_bars is None:
        return records, bars
    n = np.cumsum([0 if b is None else b["row"].size for b in bars])
    keep = max(int(np.searchsorted(n, max_bars, side="right")), 1)
    return records[:keep], bars[:keep]


def bsp_trace_data(profile, groups: TileGroups, first_step: int = 0, max_steps: int = MAX_STEPS,
                   max_bars: int | None = MAX_BARS) -> tuple[dict[str, np.ndarray], list]:
    """The trace's columns, one entry per bar (see bsp_trace), and the step records drawn."""
    records, bars = shown_steps(profile, groups, first_step, max_steps, max_bars)
    n = np.asarray([0 if b is None else b["row"].size for b in bars], np.int64)
    bars = [b for b in bars if b is not None]
    cols = {k: np.concatenate([b[k] for b in bars]) if bars else np.zeros(0, np.int64)
            for k in _BAR_COLUMNS}
    left = np.repeat(np.asarray([r.start for r in records], np.int64), n) + cols.pop("offset")
    row = cols["row"]
    cols.update({
        "step": np.repeat(np.arange(first_step, first_step + len(records)), n),
        "index": np.repeat(np.asarray([r.index for r in records], np.int64), n),
        "name": np.repeat(np.asarray([r.name for r in records], object), n),
        "kind": np.repeat(np.asarray([r.kind for r in records], object), n),
        "left": left, "right": left + cols["cycles"], "tile_lo": groups.lo[row],
        "tile_hi": groups.hi[row], "tiles": np.asarray(groups.labels(), object)[row],
        "group_size": groups.sizes[row], "us": cols["cycles"] / profile.clock_hz * 1e6})
    cols["phase"] = cols["phase"].astype(object)
    cols["color"] = cols["color"].astype(object)
    return cols, records


def _span(first_step: int, shown: int, total: int) -> str:
    """Which executed steps a trace draws: '5 steps', or 'steps 500–999 of 1,200 (0-based)'."""
    if shown == total:
        return plural(total, "step")
    if not shown:
        return f"no steps from step {first_step:,} on ({plural(total, 'step')} in all)"
    last = first_step + shown - 1
    which = f"step {first_step:,}" if shown == 1 else f"steps {first_step:,}–{last:,}"
    return f"{which} of {total:,} (0-based)"


def bsp_trace(profile, max_rows: int = 64, *, first_step: int = 0, max_steps: int = MAX_STEPS,
              max_bars: int | None = MAX_BARS, width: int = WIDTH):
    """Executed steps as bars per (step, phase, tile group), tiles in at most max_rows groups.

    A bar's length is the group's slowest tile in that phase (so the longest bar of a phase is
    the phase's BSP time). Steps from `first_step` are drawn, at most `max_steps` of them and
    no more than fit in `max_bars` bars (always at least one; None: no limit); the title says
    which. Steps are numbered from 0 by their position in profile.steps (the `step` column;
    `index` is the compiled step). `width` is the plot area's width in pixels (the tile labels,
    legend and toolbar come on top).
    """
    groups = tile_groups(profile.num_tiles, profile.tiles_per_ipu, max_rows)
    data, shown = bsp_trace_data(profile, groups, first_step, max_steps, max_bars)
    rows = len(groups)
    title = (f"BSP trace — {_span(first_step, len(shown), len(profile.steps))}, "
             f"{fmt_cycles(profile.total_cycles, profile.clock_hz)} in all")
    detail = (f"{groups.describe('row')}; a bar is one phase of one step, as long as the "
              "row's slowest tile spent in it")
    lo = shown[0].start if shown else 0
    hi = shown[-1].start + shown[-1].cycles if shown else 1
    fig = figure(title, "BSP time (cycles)", "tiles", subtitle=detail, selectable=True,
                 frame_width=width,
                 frame_height=int(np.clip(rows * 12, 120, 640)),
                 x_range=Range1d(lo, max(hi, lo + 1)), y_range=Range1d(rows - 0.5, -0.5))
    if shown:
        starts = np.asarray([r.start for r in shown], np.int64)
        fig.segment(x0=starts, x1=starts, y0=-0.5, y1=rows - 0.5, line_color="#dddddd",
                    line_width=1, name="step_starts")
    source = ColumnDataSource(data, name="phases")
    bars = fig.hbar(y="row", left="left", right="right", height=0.8, source=source,
                    name="phases_glyphs", fill_color="color", line_color=None,
                    legend_group="phase", nonselection_fill_alpha=0.25,
                    selection_line_color="black")
    fig.add_layout(fig.legend[0], "right")
    fig.legend.title = "phase"
    every = max(1, -(-rows // 16))
    ticks = list(range(0, rows, every))
    fig.yaxis.ticker = FixedTicker(ticks=ticks)
    labels = groups.labels()
    fig.yaxis.major_label_overrides = {t: labels[t] for t in ticks}
    fig.ygrid.visible = False
    if not data["row"].size:
        note(fig, "no steps were executed" if not shown else "no phase took any cycles")
    hover(fig, [bars], [("step", "@step: @name (@kind; compiled step @index)"),
                        ("phase", "@phase"),
                        ("cycles", "@cycles{0,0} (@us{0.000} µs) "
                                   "of the phase's @phase_cycles{0,0}"),
                        ("tiles", "@tiles (@active busy of @group_size)"),
                        ("from", "cycle @left{0,0} to @right{0,0}")])
    return fig
