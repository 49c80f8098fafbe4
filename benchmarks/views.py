"""How long a learner waits for the views of a full Bow-2000 (issues 3 and 23).

A program that touches all 5,888 tiles (a vertex per tile summing its row, then a copy of the
results mapped in reverse, so every tile sends to another) is run once; then each figure
(ipulab.viz) and widget (ipulab.widgets) is built, each ProfileDashboard tab opened, and the
widgets driven as a learner drives them (a tile picked, the player moved, the inspector
filtered). Each time is the best of a few builds. Tests check what the views show; how fast
they come up is measured here, where a busy machine cannot fail a test.
"""
from __future__ import annotations

import time

import ipywidgets
import numpy as np

import ipulab
from ipulab import poplar, viz, widgets
from ipulab.poplar import program as prog
from speed import ReduceVertex as RowSum     # out = the sum of a row, in order

FIGURES = ("tile_memory_heatmap", "bsp_trace", "exchange_matrix", "liveness",
           "codelet_summary", "linked")
WIDGETS = ("TileExplorer", "BSPPlayer", "GraphInspector", "ProfileDashboard")


def bow2000_engine(per_tile: int = 16, tiles_per_ipu: int | None = None) -> poplar.Engine:
    """The program run on a Bow-2000: row sums on every tile, then a copy to a reversed
    mapping (each tile sends one float to its mirror tile)."""
    dev = ipulab.devices.bow2000(tiles_per_ipu)
    n = dev.target.num_tiles
    g = poplar.Graph(dev.target)
    x = g.add_variable(poplar.FLOAT, [n, per_tile], "x")
    y = g.add_variable(poplar.FLOAT, [n], "y")
    w = g.add_variable(poplar.FLOAT, [n], "w")
    g.set_tile_mapping(x, [[(i * per_tile, (i + 1) * per_tile)] for i in range(n)])
    g.set_tile_mapping(y, [[(i, i + 1)] for i in range(n)])
    g.set_tile_mapping(w, [[(n - 1 - i, n - i)] for i in range(n)])
    sums = g.add_compute_set("sums")
    for i in range(n):
        g.add_vertex(sums, RowSum, {"in": x[i], "out": y[i]}, tile=i)
    g.create_host_write("x", x)
    g.create_host_read("w", w)
    e = poplar.Engine(g, prog.Sequence([prog.Execute(sums), prog.Copy(y, w)]))
    e.load(dev)
    e.write_tensor("x", np.ones(n * per_tile, np.float32))
    e.run()
    assert (e.read_tensor("w") == per_tile).all()        # the tiles really summed
    return e


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        ipywidgets.Widget.close_all()
    return best


def _drive(engine) -> None:
    """What tests/test_widgets.py does with the widgets of a Bow-2000, as a learner would."""
    last = engine.target.num_tiles - 1
    te = widgets.TileExplorer(engine)
    te.tile.value = last
    player = widgets.BSPPlayer(engine)
    player.slider.value = 1
    gi = widgets.GraphInspector(engine)
    gi.tile_filter.value = f"{last - 9}-{last}"
    gi.tensor.value = "x"
    d = widgets.ProfileDashboard(engine)
    for i in range(len(d.titles)):
        d.selected_index = i


def measure(engine, repeat: int = 3) -> dict:
    """Seconds (best of repeat) per view: figures, widgets, dashboard tabs, and the drive."""
    profile = engine.profile()
    out = {f"viz.{name}": _best(lambda: getattr(viz, name)(profile), repeat)
           for name in FIGURES}
    out.update({f"widgets.{name}": _best(lambda: getattr(widgets, name)(engine), repeat)
                for name in WIDGETS})
    titles = widgets.ProfileDashboard(engine).titles
    for i in range(1, len(titles)):
        def open_tab(i=i):
            d = widgets.ProfileDashboard(engine)
            t = time.perf_counter()
            d.selected_index = i
            return time.perf_counter() - t
        out[f"ProfileDashboard tab {titles[i]}"] = min(open_tab() for _ in range(repeat))
        ipywidgets.Widget.close_all()
    out["the widgets driven (tile, player, inspector, every tab)"] = _best(
        lambda: _drive(engine), repeat)
    return out


def main(quick: bool = False) -> list[tuple]:
    """The table: every view against its bound (1 s each, 3 s for the drive)."""
    engine = bow2000_engine(tiles_per_ipu=8 if quick else None)
    rows = []
    for what, seconds in measure(engine, 1 if quick else 3).items():
        limit = 3.0 if what.startswith("the widgets driven") else 1.0
        rows.append((what, f"{seconds * 1e3:.0f} ms", "", f"< {limit:.0f} s", seconds < limit))
    return rows


if __name__ == "__main__":
    from run import print_table
    print_table("Views of a Bow-2000 (issues 3, 23)", main())
