"""Colours shared by the figures: one colour per BSP phase and per memory category, and a
vectorised value -> colour ramp (so a figure's `color` column is plain data, testable)."""
from __future__ import annotations

import numpy as np
from bokeh.palettes import Category10_10, Viridis256

# BSP phases: compute is the work (green), the rest is waiting or moving data.
PHASE_COLORS = {
    "compute": "#2ca02c",
    "sync": "#9e9e9e",
    "exchange": "#1f77b4",
    "inter_ipu_exchange": "#9467bd",
    "host_exchange": "#ff7f0e",
}
# Memory categories, in the order a tile lays them out; "empty" marks a tile that holds nothing.
CATEGORY_COLORS = {
    "code": "#8c564b",
    "constants": "#e377c2",
    "variables": "#1f77b4",
    "vertex_state": "#ff7f0e",
    "exchange_buffers": "#17becf",
    "empty": "#eeeeee",
}
EMPTY_COLOR = CATEGORY_COLORS["empty"]
OVER_BUDGET_LINE = "#d62728"   # red outline for a tile that needs more bytes than it has
TILE_LINE = "#ffffff"
BYTES_PALETTE = tuple(Viridis256)
SERIES = tuple(Category10_10)  # for bars and lines that need distinct colours
OTHER = "#bbbbbb"


def ramp(values, low: float, high: float, palette=BYTES_PALETTE, log: bool = False) -> np.ndarray:
    """Colour of each value on a palette from `low` to `high` (clipped; log scale if asked)."""
    v = np.asarray(values, np.float64)
    if log:
        v = np.log10(np.maximum(v, 1.0))
        low, high = np.log10(max(low, 1.0)), np.log10(max(high, 1.0))
    span = high - low
    pos = np.clip((v - low) / span, 0.0, 1.0) if span > 0 else np.ones_like(v)
    idx = np.minimum((pos * len(palette)).astype(np.int64), len(palette) - 1)
    return np.asarray(palette, dtype=object)[idx]
