"""viz: bokeh figures tested as data (no browser): glyphs, source columns and values, colours,
tooltips, aggregation at Bow-2000 scale, linked-selection callbacks."""
import ast
import copy
import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
from bokeh.core.validation import check_integrity
from bokeh.document import Document
from bokeh.embed import json_item
from bokeh.models import (BoxSelectTool, ColorBar, ColumnDataSource, CustomJS, GlyphRenderer,
                          HoverTool, Model, Plot, TapTool)
from codelets import SumVertex

import ipulab
from ipulab import poplar, poputil, viz
from ipulab.poplar import program as prog
from ipulab.viz.base import plural, subtitle
from ipulab.viz.layout import ipu_shape, tile_grid, tile_groups
from ipulab.viz.palette import (BYTES_PALETTE, CATEGORY_COLORS, EMPTY_COLOR, OVER_BUDGET_LINE,
                                PHASE_COLORS, ramp)

FIGURES = [viz.tile_memory_heatmap, viz.bsp_trace, viz.exchange_matrix, viz.liveness,
           viz.codelet_summary, viz.linked]


class Scale(poplar.Vertex):
    """data *= 2, in place."""
    data = poplar.InOut(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(data):
        for i in range(len(data)):
            data[i] = data[i] * 2.0


# ---- profiles ---------------------------------------------------------------------------------

def four_tiles(per_tile):
    """A 4-tile ipu2, its graph, and a float variable `x` spread over it, per_tile elements each."""
    dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)
    g = poplar.Graph(dev.target)
    x = g.add_variable(poplar.FLOAT, [4 * per_tile], "x")
    poputil.map_tensor_linearly(g, x, min_elements_per_tile=per_tile, grain_size=per_tile)
    return dev, g, x


def profile_of(dev, g, program):
    """Compile, load, run; the run's profile."""
    e = poplar.Engine(g, program)
    e.load(dev)
    e.run()
    return e.profile()


@pytest.fixture(scope="module")
def small():
    """4 tiles, two codelets, a Repeat, an output sent to the next tile and a copy across tiles."""
    dev, g, x = four_tiles(4)
    y = g.add_variable(poplar.FLOAT, [4], "y")
    for i in range(4):
        g.set_tile_mapping(y[i], i)
    g.add_codelets([SumVertex, Scale])
    sums, scale = g.add_compute_set("sum"), g.add_compute_set("scale")
    for i in range(4):
        g.add_vertex(sums, "SumVertex", {"in": x[4 * i:4 * i + 4], "out": y[(i + 1) % 4]}, tile=i)
        v = g.add_vertex(scale, "Scale", {"data": x[4 * i:4 * i + 4]}, tile=i)
        if i == 3:
            g.set_perf_estimate(v, 200)      # one slow tile: the trace must show it
    body = prog.Sequence([prog.Execute(sums), prog.Execute(scale)])
    return profile_of(dev, g, prog.Sequence([prog.Repeat(2, body), prog.Copy(y, x[4:8])]))


@pytest.fixture(scope="module")
def quiet():
    """Compute only, every vertex on its data's tile: no exchange traffic at all."""
    dev, g, x = four_tiles(2)
    cs = g.add_compute_set("scale")
    for i in range(4):
        g.add_vertex(cs, Scale, {"data": x[2 * i:2 * i + 2]}, tile=i)
    return profile_of(dev, g, prog.Execute(cs))


@pytest.fixture(scope="module")
def bow():
    """A full Bow-2000 (5,888 tiles): one variable over every tile, a compute set with a vertex on
    each tile, and a copy from IPUs 0-1 to IPUs 2-3."""
    dev = ipulab.devices.bow2000()
    n = dev.target.num_tiles
    g = poplar.Graph(dev.target)
    x = g.add_variable(poplar.FLOAT, [4 * n], "x")
    poputil.map_tensor_linearly(g, x, min_elements_per_tile=4, grain_size=4)
    cs = g.add_compute_set("scale")
    for tile, regions in enumerate(g.get_tile_mapping(x)):
        for b, e in regions:
            g.add_vertex(cs, Scale, {"data": x[b:e]}, tile=tile)
    half = 2 * n
    return profile_of(dev, g, prog.Sequence([prog.Execute(cs), prog.Copy(x[:half], x[half:])]))


def source(model, name) -> ColumnDataSource:
    return model.select_one({"name": name, "type": ColumnDataSource})


def glyphs(model) -> list:
    return list(model.select({"type": GlyphRenderer}))


def tooltip_fields(fig) -> str:
    return " ".join(v for tool in fig.select({"type": HoverTool}) for _, v in tool.tooltips)


# ---- layout -----------------------------------------------------------------------------------

@pytest.mark.parametrize("n, shape", [(1472, (32, 46)), (1216, (32, 38)), (4, (2, 2)),
                                      (16, (4, 4)), (7, (3, 3)), (1, (1, 1))])
def test_ipu_shape(n, shape):
    rows, cols = ipu_shape(n)
    assert (rows, cols) == shape and rows * cols >= n


def test_tile_grid_puts_ipus_side_by_side():
    grid = tile_grid(5888, 1472)
    assert (grid.rows, grid.cols) == (32, 46)
    assert len(set(zip(grid.x.tolist(), grid.y.tolist()))) == 5888      # no two tiles overlap
    assert grid.x.max() + 1 == grid.width and grid.y.max() + 1 == grid.height == 32
    for i in range(3):          # a gap of empty columns between neighbouring IPUs
        assert grid.x[grid.ipu == i + 1].min() - grid.x[grid.ipu == i].max() == grid.gap + 1
    np.testing.assert_array_equal(grid.ipu, np.arange(5888) // 1472)
    pod = tile_grid(16 * 4, 4)                                           # 4 IPUs to a row
    assert pod.height == 4 * 2 + 3 * pod.gap and pod.width == 4 * 2 + 3 * pod.gap


def test_tile_groups_cover_tiles_and_respect_ipus():
    groups = tile_groups(5888, 1472, 64)
    assert len(groups) == 64 and groups.starts[0] == 0 and groups.ends[-1] == 5888
    np.testing.assert_array_equal(groups.starts[1:], groups.ends[:-1])
    assert (groups.lo // 1472 == groups.hi // 1472).all()                # never straddle an IPU
    assert len(tile_groups(5888, 1472, 2)) == 2                          # whole IPUs grouped
    assert len(tile_groups(4, 4, 64)) == 4 and tile_groups(4, 4, 64).labels()[1] == "tile 1"
    g = tile_groups(10, 10, 3)
    values = np.arange(20).reshape(2, 10) % 7
    expected = [[values[p, lo:hi].max() for lo, hi in zip(g.starts, g.ends)] for p in range(2)]
    np.testing.assert_array_equal(g.max(values), expected)
    np.testing.assert_array_equal(g.of([0, 3, 4, 9]), [0, 0, 1, 2])


def test_ramp_maps_low_and_high_to_palette_ends():
    c = ramp([0, 50, 100, 1000], 0, 100)
    assert c[0] == BYTES_PALETTE[0] and c[2] == c[3] == BYTES_PALETTE[-1]


# ---- tile memory heatmap ----------------------------------------------------------------------

def test_heatmap_columns_equal_profile(small):
    fig = viz.tile_memory_heatmap(small)
    assert [r.name for r in glyphs(fig)] == ["tiles_glyphs"]
    d = source(fig, "tiles").data
    for col in ("tile", "ipu", "x", "y", "bytes", "fraction", "largest", "largest_bytes",
                "category", "color", "over_budget"):
        assert len(d[col]) == small.num_tiles, col
    np.testing.assert_array_equal(d["bytes"], small.memory_total)
    np.testing.assert_allclose(d["fraction"], small.memory_total / small.bytes_per_tile)
    names, nbytes = small.memory_layout.largest_owner()
    assert list(d["largest"]) == names
    np.testing.assert_array_equal(d["largest_bytes"], nbytes)
    assert not d["over_budget"].any()
    expected = ramp(small.memory_total, 0, small.memory_total.max())
    assert list(d["color"]) == list(expected)
    for k, v in small.memory.items():
        np.testing.assert_array_equal(d[k], v)


def test_heatmap_colour_by_category(small):
    fig = viz.tile_memory_heatmap(small, color_by="category")
    d = source(fig, "tiles").data
    keys = list(small.memory)
    dominant = np.argmax(np.stack([small.memory[k] for k in keys]), axis=0)
    assert list(d["category"]) == [keys[i] for i in dominant]
    assert list(d["color"]) == [CATEGORY_COLORS[c] for c in d["category"]]
    labels = {item.label.value for item in fig.legend[0].items}
    assert labels == set(d["category"])


def test_heatmap_over_budget_tiles_stand_out(small):
    over = copy.copy(small)
    over.memory_total = small.memory_total.copy()
    over.memory_total[2] = small.bytes_per_tile + 1
    fig = viz.tile_memory_heatmap(over)
    d = source(fig, "tiles").data
    np.testing.assert_array_equal(d["over_budget"], [False, False, True, False])
    assert d["line_color"][2] == OVER_BUDGET_LINE and d["line_width"][2] > d["line_width"][0]
    assert d["line_alpha"][2] == 1.0 and d["line_alpha"][0] == 0.0
    assert "OVER BUDGET" in fig.title.text


def test_heatmap_empty_tile_is_grey_and_hover_names_tile_bytes_largest(quiet, small):
    hollow = copy.copy(quiet)
    hollow.memory_total = np.where(np.arange(4) == 1, 0, quiet.memory_total)
    d = source(viz.tile_memory_heatmap(hollow), "tiles").data
    assert d["color"][1] == EMPTY_COLOR and d["category"][1] == "empty"
    fig = viz.tile_memory_heatmap(small)
    fields = tooltip_fields(fig)
    assert "@tile" in fields and "@bytes" in fields and "@largest" in fields
    assert fig.select_one({"type": TapTool}) and fig.select_one({"type": BoxSelectTool})
    assert fig.xaxis[0].axis_label and fig.yaxis[0].axis_label


def test_heatmap_rejects_unknown_colouring(small):
    with pytest.raises(ValueError, match="color_by"):
        viz.tile_memory_heatmap(small, color_by="rainbow")


# ---- BSP trace --------------------------------------------------------------------------------

def test_bsp_trace_widths_are_phase_cycles(small):
    fig = viz.bsp_trace(small, max_rows=2)            # 4 tiles -> 2 rows of 2 tiles
    d = source(fig, "phases").data
    assert set(d["row"]) <= {0, 1}
    np.testing.assert_array_equal(d["right"] - d["left"], d["cycles"])
    assert len(d["step"]) > 0
    for k in range(len(d["step"])):
        rec = small.steps[d["step"][k]]
        kind, per_tile = rec.phases[d["phase_index"][k]]
        assert kind == d["phase"][k] and rec.name == d["name"][k] and rec.kind == d["kind"][k]
        lo, hi = d["tile_lo"][k], d["tile_hi"][k]
        assert d["cycles"][k] == per_tile[lo:hi + 1].max()         # a row shows its slowest tile
        assert d["phase_cycles"][k] == per_tile.max()
        before = sum(int(c.max()) for _, c in rec.phases[:d["phase_index"][k]])
        assert d["left"][k] == rec.start + before                  # phases follow the barriers
        assert d["color"][k] == PHASE_COLORS[kind]
    # the longest bar of each (step, phase) is the phase's BSP time; steps add up to the run
    for s, rec in enumerate(small.steps):
        for p, (_, per_tile) in enumerate(rec.phases):
            sel = (d["step"] == s) & (d["phase_index"] == p)
            assert d["cycles"][sel].max(initial=0) == per_tile.max()
    assert d["right"].max() == small.total_cycles


def test_bsp_trace_shows_the_slow_tile(small):
    d = source(viz.bsp_trace(small), "phases").data
    scale = (d["name"] == "scale") & (d["phase"] == "compute")
    per_tile = {int(t): int(c) for t, c in zip(d["tile_lo"][scale], d["cycles"][scale])}
    assert per_tile[3] == max(per_tile.values()) > per_tile[0]


def test_bsp_trace_rows_bounded_and_hover(small, bow):
    fig = viz.bsp_trace(small, max_rows=3)
    assert source(fig, "phases").data["row"].max() < 3
    fields = tooltip_fields(fig)
    for f in ("@name", "@kind", "@phase", "@cycles", "@tiles"):
        assert f in fields
    d = source(viz.bsp_trace(bow, max_rows=10), "phases").data
    assert d["row"].max() < 10 and len(np.unique(d["row"])) <= 10
    assert fig.select_one({"type": TapTool}) and fig.select_one({"type": BoxSelectTool})
    assert {i.label.value for i in fig.legend[0].items} == set(source(fig, "phases").data["phase"])


def test_bsp_trace_window_of_steps(small):
    fig = viz.bsp_trace(small, first_step=1, max_steps=2)
    d = source(fig, "phases").data
    assert set(d["step"]) == {1, 2} and "steps 1–2 of 5" in fig.title.text
    assert d["left"].min() == small.steps[1].start
    per_step = np.bincount(source(viz.bsp_trace(small), "phases").data["step"])
    d = source(viz.bsp_trace(small, max_bars=per_step[0] + per_step[1]), "phases").data
    assert set(d["step"]) == {0, 1}                      # as many whole steps as fit
    assert set(source(viz.bsp_trace(small, max_bars=1), "phases").data["step"]) == {0}
    assert len(set(source(viz.bsp_trace(small, max_bars=None), "phases").data["step"])) == 5


# ---- exchange matrix --------------------------------------------------------------------------

def test_exchange_matrix_blocks_sum_to_traffic(small):
    src, dst, nbytes = small.exchange_traffic()
    assert nbytes.sum() > 0
    model = viz.exchange_matrix(small, max_blocks=2)
    plots = list(model.select({"type": Plot}))
    blocks = source(model, "blocks").data
    assert blocks["bytes"].sum() == nbytes.sum()
    expected = np.zeros((2, 2), np.int64)
    np.add.at(expected, (src // 2, dst // 2), nbytes)
    got = np.zeros((2, 2), np.int64)
    got[blocks["src"], blocks["dst"]] = blocks["bytes"]
    np.testing.assert_array_equal(got, expected)
    assert (blocks["bytes"] > 0).all()                              # only nonzero cells drawn
    np.testing.assert_array_equal(blocks["src_lo"], blocks["src"] * 2)
    for fig in plots:
        fields = tooltip_fields(fig)
        assert "@src_label" in fields and "@dst_label" in fields and "@bytes" in fields


def test_exchange_matrix_on_one_ipu_is_the_tile_figure_alone(small, bow):
    """No 'Between IPUs' panel of a single on-chip cell; several IPUs: both panels."""
    model = viz.exchange_matrix(small)
    assert isinstance(model, Plot) and model.name == "blocks_plot"
    assert source(model, "ipus") is None and model.select_one({"name": "ipus_plot"}) is None
    both = viz.exchange_matrix(bow)
    assert sorted(p.name for p in both.select({"type": Plot})) == ["blocks_plot", "ipus_plot"]


def test_exchange_matrix_colour_scale_and_title(small):
    nbytes = small.exchange_traffic()[2]
    model = viz.exchange_matrix(small, max_blocks=4, high=10 * int(nbytes.max()),
                                title="before the fix")
    d = source(model, "blocks").data
    assert list(d["color"]) == list(ramp(d["bytes"], 1, 10 * int(nbytes.max()), log=True))
    assert d["color"][np.argmax(d["bytes"])] != BYTES_PALETTE[-1]   # the top is above the data
    (bar,) = model.select({"type": ColorBar})
    assert bar.color_mapper.high == 10 * int(nbytes.max())
    assert model.title.text == "before the fix"
    default = viz.exchange_matrix(small, max_blocks=4)
    assert source(default, "blocks").data["color"][np.argmax(d["bytes"])] == BYTES_PALETTE[-1]
    assert default.title.text.startswith("Exchange between tiles")


def test_exchange_matrix_without_traffic(quiet):
    fig = viz.exchange_matrix(quiet)
    assert len(source(fig, "blocks").data["bytes"]) == 0
    assert "0 B" in fig.title.text
    assert any("no exchange traffic" in getattr(a, "text", "") for a in fig.center)


# ---- liveness, codelets -----------------------------------------------------------------------

def test_liveness_values_equal_profile(small):
    fig = viz.liveness(small)
    d = source(fig, "liveness").data
    live = small.liveness()
    for k in ("total", "always_live", "not_always_live", "peak_tile"):
        np.testing.assert_array_equal(d[k], live[k])
    assert list(d["name"]) == [r.name for r in small.steps]
    assert "@name" in tooltip_fields(fig)
    assert {r.name for r in glyphs(fig)} == {"total", "always_live", "not_always_live",
                                             "peak_tile"}


def test_liveness_bins_keep_peaks(small):
    d = source(viz.liveness(small, max_points=2), "liveness").data
    live = small.liveness()
    assert len(d["step"]) == 2 and d["total"].max() == live["total"].max()
    assert d["peak_tile"].max() == live["peak_tile"].max()


def test_codelet_summary_bars_equal_codelet_cycles(small):
    fig = viz.codelet_summary(small)
    d = source(fig, "codelets").data
    stats = small.codelet_cycles()
    assert set(d["codelet"]) == set(stats) == {"SumVertex", "Scale"}
    for name, cycles, n in zip(d["codelet"], d["cycles"], d["vertices"]):
        assert cycles == stats[name]["cycles"] and n == stats[name]["vertices"]
    assert list(d["cycles"]) == sorted(d["cycles"], reverse=True)
    assert list(fig.y_range.factors) == list(d["codelet"][::-1])   # largest bar on top
    assert "@codelet" in tooltip_fields(fig) and "@cycles" in tooltip_fields(fig)
    other = source(viz.codelet_summary(small, max_bars=1), "codelets").data
    assert list(other["codelet"]) == ["other (2 codelets)"]
    assert other["cycles"][0] == sum(v["cycles"] for v in stats.values())


# ---- linked -----------------------------------------------------------------------------------

def _links(src):
    return [cb for cb in src.selected.js_property_callbacks.get("change:indices", [])
            if isinstance(cb, CustomJS)]


def test_linked_wires_both_selections(small):
    model = viz.linked(small, max_rows=2)
    tiles, bars = source(model, "tiles"), source(model, "phases")
    (a,), (b,) = _links(tiles), _links(bars)
    assert a.args["src"] is tiles and a.args["dst"] is bars
    assert b.args["src"] is bars and b.args["dst"] is tiles
    np.testing.assert_array_equal(tiles.data["row"], [0, 0, 1, 1])
    for fig in model.select({"type": Plot}):
        assert fig.select_one({"type": TapTool}) and fig.select_one({"type": BoxSelectTool})


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_linked_callbacks_select_matching_rows(small):
    """Run the CustomJS code in node with stand-in sources: selecting tile 3 selects the bars of
    its row, and selecting a bar selects the tiles of its row, without echoing back."""
    model = viz.linked(small, max_rows=2)
    tiles, bars = source(model, "tiles"), source(model, "phases")
    code = _links(tiles)[0].code
    harness = """
    const code = %s, rows = %s;
    const run = new Function("src", "dst", code);
    function make(r) {
      const s = {data: {row: r}, selected: {}, listeners: [], sets: 0};
      let idx = [];
      Object.defineProperty(s.selected, "indices", {
        get() { return idx; }, set(v) { idx = v; s.sets++; s.listeners.forEach(f => f()); }});
      return s;
    }
    const tiles = make(rows.tiles), bars = make(rows.bars);
    tiles.listeners.push(() => run(tiles, bars));
    bars.listeners.push(() => run(bars, tiles));
    tiles.selected.indices = [3];
    const a = {bars: bars.selected.indices, tiles: tiles.selected.indices, sets: tiles.sets};
    bars.selected.indices = [bars.data.row.indexOf(0)];
    console.log(JSON.stringify({a, tiles: tiles.selected.indices}));
    """ % (json.dumps(code), json.dumps({"tiles": tiles.data["row"].tolist(),
                                         "bars": bars.data["row"].tolist()}))
    out = json.loads(subprocess.run(["node", "-e", harness], capture_output=True, text=True,
                                    check=True, timeout=30).stdout)
    rows = np.asarray(bars.data["row"])
    assert out["a"]["bars"] == np.flatnonzero(rows == 1).tolist()
    assert out["a"]["tiles"] == [3] and out["a"]["sets"] == 1      # not echoed back
    assert out["tiles"] == [0, 1]


# ---- whole package ----------------------------------------------------------------------------

def test_every_figure_serialises(small):
    for f in FIGURES:
        model = f(small)
        json_item(model)                          # serialisable: every property is valid
        doc = Document()
        doc.add_root(f(small))
        issues = check_integrity(doc.models)
        assert not issues.error and not issues.warning, (f.__name__, issues)
        for fig in model.select({"type": Plot}):
            assert fig.title.text and subtitle(fig)
            assert fig.xaxis[0].axis_label and fig.yaxis[0].axis_label


def test_figures_of_a_run_that_did_nothing():
    dev, g, _ = four_tiles(2)
    idle = profile_of(dev, g, prog.Sequence())
    assert not idle.steps
    for f in FIGURES:
        json_item(f(idle))
    d = source(viz.bsp_trace(idle), "phases").data
    assert len(d["row"]) == 0 and len(source(viz.liveness(idle), "liveness").data["step"]) == 0
    assert len(source(viz.codelet_summary(idle), "codelets").data["codelet"]) == 0


def test_bow2000_aggregates(bow):
    """A few glyphs a figure however many tiles (how fast they build is benchmarks/views.py's:
    1 s each)."""
    assert bow.num_tiles == 5888 and (bow.memory_total > 0).all()
    for f in FIGURES:
        assert len(glyphs(f(bow))) <= 6, f.__name__
    heat = viz.tile_memory_heatmap(bow)
    assert len(glyphs(heat)) == 1 and len(source(heat, "tiles").data["tile"]) == 5888
    assert len(np.unique(source(heat, "tiles").data["ipu"])) == 4
    trace = source(viz.bsp_trace(bow), "phases").data
    assert trace["row"].max() < 64
    assert len(trace["row"]) <= 64 * sum(len(r.phases) for r in bow.steps)
    model = viz.exchange_matrix(bow)
    blocks, ipus = source(model, "blocks").data, source(model, "ipus").data
    assert len(blocks["bytes"]) <= 64 * 64 and len(ipus["bytes"]) <= 16
    total = bow.exchange_traffic()[2].sum()
    assert blocks["bytes"].sum() == ipus["bytes"].sum() == total > 0
    cross = ipus["src"] != ipus["dst"]
    assert ipus["bytes"][cross].sum() > 0                          # IPUs 0-1 -> IPUs 2-3


def test_names_are_unique_so_select_one_finds_a_source(small, bow):
    """A data source and its glyph renderer used to share a name: select_one raised
    ValueError. Every named model of a figure now has its own name."""
    for f in FIGURES:
        for profile in (small, bow):
            model = f(profile)
            for scope, kinds in [(model, (ColumnDataSource, GlyphRenderer, Plot)),
                                 *((fig, (Model,)) for fig in model.select({"type": Plot}))]:
                names = [m.name for m in scope.references() if isinstance(m, kinds) and m.name]
                assert len(names) == len(set(names)), (f.__name__, sorted(names))
    trace = viz.bsp_trace(small)
    assert isinstance(trace.select_one({"name": "phases"}), ColumnDataSource)
    assert isinstance(trace.select_one({"name": "phases_glyphs"}), GlyphRenderer)
    for f, name in [(viz.tile_memory_heatmap, "tiles"), (viz.codelet_summary, "codelets"),
                    (viz.exchange_matrix, "blocks"), (viz.liveness, "liveness")]:
        assert isinstance(f(small).select_one({"name": name}), ColumnDataSource), name


def test_plural():
    assert plural(1, "tile") == "1 tile" and plural(1472, "tile") == "1,472 tiles"
    assert plural(0, "step") == "0 steps" and plural(np.int64(1), "step") == "1 step"
    assert plural(1, "vertex", "vertices") == "1 vertex"
    assert plural(2, "vertex", "vertices") == "2 vertices"


def test_titles_count_in_singular_and_plural(quiet, small):
    """'1 steps', 'rows of up to 1 tile', 'tile(s)': one helper counts everywhere."""
    assert len(quiet.steps) == 1
    trace = viz.bsp_trace(quiet)
    assert "BSP trace — 1 step," in trace.title.text
    assert subtitle(trace).startswith("4 rows, one per tile;")
    assert subtitle(viz.bsp_trace(small, max_rows=2)).startswith("2 rows of up to 2 tiles;")
    assert "BSP trace — 5 steps," in viz.bsp_trace(small).title.text
    assert "steps 1–2 of 5 (0-based)" in viz.bsp_trace(small, first_step=1, max_steps=2).title.text
    assert "step 4 of 5 (0-based)" in viz.bsp_trace(small, first_step=4).title.text
    assert subtitle(viz.exchange_matrix(small)).startswith("4 blocks, one per tile;")
    over = copy.copy(small)
    over.memory_total = small.memory_total.copy()
    over.memory_total[2] = small.bytes_per_tile + 1
    assert "— 1 tile OVER BUDGET" in viz.tile_memory_heatmap(over).title.text
    one = tile_groups(1, 1, 64)
    assert one.describe("row") == "1 row, one per tile"


def _frame_widths(model):
    return [p.frame_width for p in model.select({"type": Plot})]


@pytest.mark.parametrize("name", ["small", "bow"])
def test_default_widths_fit_a_notebook_column(name, request):
    """A JupyterLab column is ~1,000 px wide: the plot areas leave room for labels, legend or
    colour bar and toolbar. width= sets them."""
    profile = request.getfixturevalue(name)
    for f in (viz.bsp_trace, viz.tile_memory_heatmap, viz.exchange_matrix, viz.liveness,
              viz.codelet_summary):
        assert sum(_frame_widths(f(profile))) <= 640, f.__name__
    assert _frame_widths(viz.bsp_trace(profile, width=480)) == [480]
    assert _frame_widths(viz.exchange_matrix(profile, width=500))[0] <= 500
    assert sum(_frame_widths(viz.exchange_matrix(profile, width=500))) <= 500
    heat = viz.tile_memory_heatmap(profile, width=500)
    assert _frame_widths(heat)[0] <= 500
    linked = viz.linked(profile, width=480)
    assert all(w <= 480 for w in _frame_widths(linked))


def test_setup_is_a_quiet_noop_outside_a_notebook(capsys):
    viz.setup()
    viz.setup()
    assert capsys.readouterr().out == ""


def test_viz_never_imports_the_machine():
    """DESIGN section 1: viz reads Profile objects and never imports ipulab.machine."""
    for path in pathlib.Path(viz.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1 and "machine" not in (node.module or ""), path.name
            elif isinstance(node, ast.Import):
                assert not any("ipulab" in a.name for a in node.names), path.name


def test_palette_covers_every_phase_and_memory_category():
    from ipulab.poplar.profile import MEMORY_CATEGORIES, PHASES
    from ipulab.viz.palette import CATEGORY_COLORS, PHASE_COLORS
    assert set(PHASE_COLORS) == set(PHASES)
    assert set(CATEGORY_COLORS) == set(MEMORY_CATEGORIES) | {"empty"}
