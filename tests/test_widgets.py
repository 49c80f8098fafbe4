"""The widget apps: set a control's .value, assert on what the widget then shows (no browser).

Profiles come from real programs run on the simulator: a 4-tile toy with compute, a gather
that needs an exchange and a copy across tiles; and a full Bow-2000 (5,888 tiles), on which
every widget must come up (how fast: benchmarks/views.py, not a timed test).
"""
from html import escape

import ipywidgets
import numpy as np
from bokeh.models import Legend, NumeralTickFormatter
import pytest
from codelets import SumVertex
from helpers import run_engine

import ipulab
from ipulab import poplar
from ipulab.errors import EngineError
from ipulab.poplar import program as prog
from ipulab.widgets import BSPPlayer, GraphInspector, ProfileDashboard, TileExplorer
from ipulab.widgets._common import first_plot, source_with
from ipulab.viz.base import subtitle
from ipulab.widgets.graph_inspector import parse_tiles

WIDGETS = [TileExplorer, BSPPlayer, GraphInspector, ProfileDashboard]


def _sums_then_copy(device, per_tile=4, gather=True):
    """Each tile sums its row of x into y[i]; tile 0 sums y (brought in by an exchange) into
    total; then y is copied to w, which is mapped in reverse (y[i] -> w[i] on tile n-1-i)."""
    n = device.target.num_tiles
    g = poplar.Graph(device.target)
    g.add_codelets(SumVertex)
    x = g.add_variable(poplar.FLOAT, [n, per_tile], "x")
    y = g.add_variable(poplar.FLOAT, [n], "y")
    w = g.add_variable(poplar.FLOAT, [n], "w")
    total = g.add_variable(poplar.FLOAT, [1], "total")
    g.set_tile_mapping(x, [[(i * per_tile, (i + 1) * per_tile)] for i in range(n)])
    g.set_tile_mapping(y, [[(i, i + 1)] for i in range(n)])
    g.set_tile_mapping(w, [[(n - 1 - i, n - i)] for i in range(n)])
    g.set_tile_mapping(total, 0)
    sums = g.add_compute_set("sums")
    for i in range(n):
        g.add_vertex(sums, "SumVertex", {"in": x[i], "out": y[i]}, tile=i)
    steps = [prog.Execute(sums)]
    if gather:
        cs = g.add_compute_set("gather")
        g.add_vertex(cs, "SumVertex", {"in": y, "out": total[0]}, tile=0)
        steps.append(prog.Execute(cs))
    g.create_host_write("x", x)
    g.create_host_read("total", total)
    e = poplar.Engine(g, prog.Sequence(steps + [prog.Copy(y, w)]))
    e.load(device)
    e.write_tensor("x", np.ones(n * per_tile, np.float32))
    e.run()
    return e


@pytest.fixture(autouse=True)
def _close_widgets():
    """ipywidgets keeps every widget alive until closed: close them after each test."""
    yield
    ipywidgets.Widget.close_all()


@pytest.fixture(scope="module")
def toy(dev4):
    e = _sums_then_copy(dev4)
    assert e.read_tensor("total")[0] == 16.0       # the simulator really ran it
    return e


@pytest.fixture(scope="module")
def bow():
    return _sums_then_copy(ipulab.devices.bow2000(), per_tile=16, gather=False)


@pytest.mark.parametrize("cls", WIDGETS)
def test_a_widget_needs_an_engine_that_has_run(cls, dev4):
    g = poplar.Graph(dev4.target)
    v = g.add_variable(poplar.FLOAT, [4], "v")
    g.set_tile_mapping(v, 0)
    e = poplar.Engine(g, prog.Sequence())
    with pytest.raises(EngineError, match=rf"{cls.__name__}.*engine.run\(\)"):
        cls(e)
    with pytest.raises(EngineError, match="needs a poplar.Engine"):
        cls(object())


@pytest.mark.parametrize("cls", WIDGETS)
def test_widgets_take_an_engine_or_its_profile(cls, toy):
    assert cls(toy).profile is toy.profile()
    assert cls(toy.profile()).profile is toy.profile()


# --- TileExplorer ------------------------------------------------------------------------------
def test_tile_explorer_shows_the_tiles_memory_map(toy):
    te = TileExplorer(toy)
    te.tile.value = 3
    assert te.slider.value == 3
    allocs = toy.profile().memory_layout.allocations_on(3)
    owners = {o for _, _, _, o in allocs}
    assert {"x", "y", "w"} <= owners and "total" not in owners
    assert list(te.memory_source.data["owner"]) == [o for _, _, _, o in allocs]
    assert list(te.memory_source.data["address"]) == [a for a, _, _, _ in allocs]
    assert list(te.memory_source.data["bytes"]) == [n for _, n, _, _ in allocs]
    for address, _, category, owner in allocs:
        assert f"0x{address:05x}" in te.memory_html.value
        assert category in te.memory_html.value and owner in te.memory_html.value
    assert "<b>tile 3</b>" in te.header.value
    te.slider.value = 0
    assert te.tile.value == 0 and "total" in te.memory_html.value


def test_tile_explorer_memory_bar_ends_at_the_memory_total(toy):
    """Allocations drawn with their aligned size, end to end; legend, plain byte ticks, no logo."""
    p = toy.profile()
    te = TileExplorer(toy)
    for t in range(p.num_tiles):
        te.tile.value = t
        d = te.memory_source.data
        left, right = np.asarray(d["left"]), np.asarray(d["right"])
        assert left[0] == 0 and (left[1:] == right[:-1]).all()          # no gaps
        assert right[-1] == p.memory_total[t]                            # ends at the total
        aligned = np.asarray(d["aligned"])
        np.testing.assert_array_equal(right - left, aligned)
        assert (aligned >= np.asarray(d["bytes"])).all() and (aligned % 8 == 0).all()
    te.tile.value = 3
    assert any(a > b for a, b in zip(te.memory_source.data["aligned"],
                                     te.memory_source.data["bytes"]))   # y[3]: 4 B, 8 aligned
    bar = te.memory_bar
    (legend,) = bar.select({"type": Legend})
    categories = [k for k, v in p.memory.items() if v.any()]
    assert [item.label.value for item in legend.items] == categories
    assert isinstance(bar.xaxis[0].formatter, NumeralTickFormatter)
    assert bar.xaxis[0].formatter.format == "0,0"
    assert bar.toolbar.logo is None


def test_widgets_take_a_width(toy):
    te = TileExplorer(toy, width=500)
    assert te.memory_bar.frame_width == 500 and te.heatmap.frame_width <= 500
    player = BSPPlayer(toy, width=480)
    assert player.activity.frame_width == 480 and first_plot(player.trace).frame_width == 480
    assert BSPPlayer(toy).activity.frame_width <= 700
    assert TileExplorer(toy).memory_bar.frame_width <= 700


def test_tile_explorer_lists_the_tiles_vertices_and_exchange_partners(toy):
    te = TileExplorer(toy, tile=3)
    assert "1 vertex</b>" in te.vertices_html.value
    assert all(s in te.vertices_html.value for s in ("SumVertex", "sums", "in: x[3] (4)"))
    # tile 3 sends y[3] to tile 0 (for the gather vertex and for w[3]) and receives y[0] -> w[0]
    partners = te.partners_html.value
    assert "sends to 1 tile, 8 B" in partners and "receives from 1 tile, 4 B" in partners
    te.tile.value = 0
    assert "2 vertices</b>" in te.vertices_html.value and "gather" in te.vertices_html.value
    assert "receives from 3 tiles" in te.partners_html.value


def test_tile_explorer_follows_clicks_on_the_heatmap(toy):
    te = TileExplorer(toy)
    src = te._heat_source
    row = list(src.data["tile"]).index(2)
    src.selected.indices = [row]            # what a tap in the browser sends back
    assert te.tile.value == 2 and "x[2]" in te.vertices_html.value
    te.tile.value = 1                       # and the heatmap's selection follows the picker
    assert src.selected.indices == [list(src.data["tile"]).index(1)]
    assert TileExplorer(toy, heatmap=False).heatmap is None


# --- BSPPlayer ---------------------------------------------------------------------------------
def test_bsp_player_steps_through_the_run(toy):
    steps = toy.profile().steps
    assert [s.kind for s in steps] == ["execute", "execute", "copy"]
    player = BSPPlayer(toy)
    assert player.slider.max == player.play.max == len(steps) - 1
    for k, rec in enumerate(steps):
        player.slider.value = k                 # slider value = position in profile.steps
        assert player.current_step is rec and player.play.value == k
        assert f"step {k} of {len(steps)} (0-based; compiled step {rec.index})" in \
            player.info.value
        assert escape(rec.name) in player.info.value
        assert f"{rec.cycles:,} cycles" in player.info.value
        for kind, _ in rec.phases:
            assert f"<td style='padding:0 8px'>{kind}</td>" in player.info.value
        assert (player.marker.left, player.marker.right) == (rec.start, rec.start + rec.cycles)
        assert player.marker_line.location == rec.start


def test_bsp_player_shows_which_tiles_work_and_how_data_moved(toy):
    player = BSPPlayer(toy)
    player.play.value = 0                   # "sums": every tile computes, nothing moves
    assert player.slider.value == 0
    assert "4 of 4 tiles compute" in player.info.value
    assert "no tile-to-tile traffic" in player.traffic_html.value
    data = player.activity_source.data
    compute = np.asarray(data["cycles"])[np.asarray(data["phase"]) == "compute"]
    assert compute.size == 4 and (compute > 0).all()
    player.slider.value = 1                 # "gather": tiles 1-3 send y to tile 0
    assert "1 of 4 tiles compute" in player.info.value
    assert "12 B between 3 tile pairs (3 senders, 1 receiver)" in player.traffic_html.value
    player.slider.value = 2                 # the copy y -> w (reversed)
    assert "between 4 tile pairs" in player.traffic_html.value
    compute = np.asarray(player.activity_source.data["cycles"])[
        np.asarray(player.activity_source.data["phase"]) == "compute"]
    assert not compute.any()


@pytest.fixture(scope="module")
def round_trips(dev4):
    """One compute set whose vertices read remote data and write their output back: a vertex on
    tile 1 sums 400 floats of tile 0 into y[0] (on tile 0), one on tile 2 sums 20 floats of tile
    3 into y[1] (on tile 3). The step exchanges twice: data in, then the outputs back."""
    g = poplar.Graph(dev4.target)
    g.add_codelets(SumVertex)
    a, b = g.add_variable(poplar.FLOAT, [400], "a"), g.add_variable(poplar.FLOAT, [20], "b")
    y = g.add_variable(poplar.FLOAT, [2], "y")
    for t, tile in [(a, 0), (b, 3), (y[0], 0), (y[1], 3)]:
        g.set_tile_mapping(t, tile)
    cs = g.add_compute_set("remote")
    g.add_vertex(cs, "SumVertex", {"in": a, "out": y[0]}, tile=1)
    g.add_vertex(cs, "SumVertex", {"in": b, "out": y[1]}, tile=2)
    return run_engine(g, prog.Execute(cs), dev4)


def _strip(player, phase):
    data = player.activity_source.data
    pick = np.asarray(data["phase"]) == phase
    return np.asarray(data["cycles"])[pick], np.asarray(data["alpha"])[pick]


def test_bsp_player_strip_sums_a_phase_that_occurs_twice(round_trips):
    (rec,) = round_trips.profile().steps
    assert [k for k, _ in rec.phases] == ["sync", "exchange", "compute", "sync", "exchange"]
    data_in, back = (c for k, c in rec.phases if k == "exchange")
    assert data_in.tolist() == [416, 416, 36, 36] and back.tolist() == [17, 17, 17, 17]
    player = BSPPlayer(round_trips)
    exchange, _ = _strip(player, "exchange")
    np.testing.assert_array_equal(exchange, [433, 433, 53, 53])      # not just the last one
    sync, _ = _strip(player, "sync")
    np.testing.assert_array_equal(sync, [300, 300, 300, 300])
    assert "sum of 2 exchange phases" in player.activity_source.data["note"][
        list(player.activity_source.data["phase"]).index("exchange")]


def test_bsp_player_strip_shades_each_phase_on_its_own_scale(round_trips):
    """Exchange (433 cycles at most) next to compute (2,466): the busiest exchange column is as
    dark as the busiest compute column, and 53 is visibly lighter than 433."""
    player = BSPPlayer(round_trips)
    for kind in ("sync", "exchange", "compute"):
        cycles, alpha = _strip(player, kind)
        assert alpha[np.argmax(cycles)] == 1.0, kind
        np.testing.assert_allclose(alpha, np.where(cycles > 0, 0.25 + 0.75 * cycles /
                                                   cycles.max(), 0))
    _, alpha = _strip(player, "exchange")
    assert alpha[2] < 0.4
    assert "own scale" in subtitle(player.activity)


def test_bsp_player_strip_has_rows_only_for_phases_of_the_run(toy, round_trips):
    for engine in (toy, round_trips):
        player = BSPPlayer(engine)
        kinds = {k for rec in engine.profile().steps for k, _ in rec.phases}
        assert set(player.activity.y_range.factors) == kinds
        assert set(player.kinds) == kinds
        assert set(player.activity_source.data["phase"]) == kinds
        assert "host_exchange" not in kinds and "inter_ipu_exchange" not in kinds
    assert list(BSPPlayer(round_trips).activity.y_range.factors) == ["compute", "exchange",
                                                                     "sync"]   # bottom up


def test_bsp_player_of_a_run_without_steps(dev4):
    g = poplar.Graph(dev4.target)
    g.set_tile_mapping(g.add_variable(poplar.FLOAT, [4], "v"), 0)
    player = BSPPlayer(run_engine(g, prog.Sequence(), dev4))
    assert player.current_step is None and "no steps" in player.info.value


# --- GraphInspector ----------------------------------------------------------------------------
def test_graph_inspector_cascades_from_compute_set_to_tiles(toy):
    gi = GraphInspector(toy)
    assert [label for label, _ in gi.compute_set.options] == ["sums (4 vertices)",
                                                              "gather (1 vertex)"]
    assert len(gi.vertex.options) == 4 and gi.vertex.value == 0
    assert "SumVertex" in gi.vertex_html.value and "x[0]" in gi.vertex_html.value
    assert [v for _, v in gi.tensor.options] == ["x", "y"]
    gi.compute_set.value = 1
    assert [v for _, v in gi.vertex.options] == [4] and gi.vertex.value == 4
    assert "gather" in gi.vertex_html.value and "on tile 0" in gi.vertex_html.value
    assert [v for _, v in gi.tensor.options] == ["y", "total"]
    assert "variable y</b>: FLOAT [4], 4 elements on 4 tiles (0–3)" in gi.tensor_html.value
    gi.tensor.value = "total"
    assert "1 element on 1 tile (0)" in gi.tensor_html.value


def test_graph_inspector_filters_vertices_by_tile(toy):
    gi = GraphInspector(toy)
    gi.tile_filter.value = "2"
    assert [v for _, v in gi.vertex.options] == [2] and "x[2]" in gi.vertex_html.value
    gi.tile_filter.value = "1-3"
    assert [v for _, v in gi.vertex.options] == [1, 2, 3]
    gi.tile_filter.value = "7"
    assert "outside 0-3" in gi.status.value
    gi.tile_filter.value = ""
    assert len(gi.vertex.options) == 4
    gi.compute_set.value = 1
    gi.tile_filter.value = "3"
    assert gi.vertex.options == () and gi.vertex.value is None
    assert "no vertex" in gi.vertex_html.value and gi.tensor_html.value == ""


def test_graph_inspector_without_compute_sets(dev4):
    g = poplar.Graph(dev4.target)
    a, b = g.add_variable(poplar.FLOAT, [4], "a"), g.add_variable(poplar.FLOAT, [4], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)
    gi = GraphInspector(run_engine(g, prog.Copy(a, b), dev4))
    assert gi.compute_set.options == () and "no compute sets" in gi.status.value


def test_connections_name_the_variables_a_view_is_made_of(dev4):
    """Found by element address, so a variable whose name looks like a view is no trouble."""
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.FLOAT, [4], "concat(a")
    b = g.add_variable(poplar.FLOAT, [2, 2], "b")
    out = g.add_variable(poplar.FLOAT, [1], "out")
    for t in (a, b, out):
        g.set_tile_mapping(t, 0)
    cs = g.add_compute_set("cs")
    g.add_vertex(cs, SumVertex, {"in": poplar.concat([a[1:], b.transpose().flatten()]),
                                 "out": out[0]}, tile=0)
    e = run_engine(g, prog.Execute(cs), dev4)
    ((name, n, variables),) = e.profile().graph.connections(0)["in"]
    assert n == 7 and variables == ["concat(a", "b"]
    assert e.profile().graph.connections(0)["out"] == [("out[0]", 1, ["out"])]


def test_tile_filter_syntax():
    assert parse_tiles(" ", 8) is None
    assert parse_tiles("3", 8).tolist() == [3]
    assert parse_tiles("1-3, 6", 8).tolist() == [1, 2, 3, 6]
    assert parse_tiles("0:1", 8).tolist() == [0, 1]
    for bad in ("x", "3-1", "8"):
        with pytest.raises(ValueError):
            parse_tiles(bad, 8)


# --- ProfileDashboard --------------------------------------------------------------------------
def test_dashboard_has_the_tabs_and_builds_each_when_opened(toy):
    d = ProfileDashboard(toy)
    assert d.titles == ("Summary", "Memory", "Trace", "Exchange", "Graph")
    assert list(d._built) == ["Summary"]
    assert "Target: ipu2" in d.page("Summary").children[0].value
    for i, cls in [(1, TileExplorer), (2, BSPPlayer), (4, GraphInspector)]:
        d.selected_index = i
        assert isinstance(d.children[i].children[0], cls)
    d.selected_index = 3
    assert "28 B</b> moved between 6 pairs" in d.children[3].children[0].children[0].value
    assert d.page("Memory").profile is d.profile


# --- a full Bow-2000 ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", WIDGETS)
def test_widgets_build_on_a_bow2000(cls, bow):
    assert bow.profile().num_tiles == 5888
    assert isinstance(cls(bow), ipywidgets.Widget)


def test_widgets_stay_small_on_a_bow2000(bow):
    te = TileExplorer(bow)
    te.tile.value = 5887
    assert "IPU 3, tile 1471 of it" in te.header.value and "x[5887]" in te.vertices_html.value
    assert "sends to 1 tile," in te.partners_html.value
    player = BSPPlayer(bow)
    player.slider.value = 1                 # the copy: every tile sends one float
    assert "23,552 B between 5,888 tile pairs" in player.traffic_html.value
    assert len(player.activity_source.data["cycles"]) <= 5 * 128
    gi = GraphInspector(bow)
    assert len(gi.vertex.options) == 500 and "5,888 vertices, showing the first 500" in \
        gi.status.value
    gi.tile_filter.value = "5000-5009"
    assert [v for _, v in gi.vertex.options] == list(range(5000, 5010))
    gi.tensor.value = "x"
    assert "on 5,888 tiles (0–5887)" in gi.tensor_html.value
    d = ProfileDashboard(bow)
    for i, title in enumerate(d.titles):
        d.selected_index = i
        assert d.pages[i].children[0] is d.page(title)      # built, not "building…"


def test_bsp_player_draws_a_long_run_a_window_at_a_time(dev4):
    g = poplar.Graph(dev4.target)
    g.add_codelets(SumVertex)
    x, y = g.add_variable(poplar.FLOAT, [4], "x"), g.add_variable(poplar.FLOAT, [1], "y")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(y, 0)
    cs = g.add_compute_set("sum")
    g.add_vertex(cs, "SumVertex", {"in": x, "out": y[0]}, tile=0)
    player = BSPPlayer(run_engine(g, prog.Repeat(1200, prog.Execute(cs)), dev4))
    steps = player.profile.steps
    assert len(steps) == 1200 and player.slider.max == 1199
    first = player.trace
    player.slider.value = 700
    assert player.trace is not first
    drawn = source_with(player.trace, "step").data["step"]
    assert drawn.min() == 500 and drawn.max() == 999
    assert player.marker.left == steps[700].start
    assert "step 700 of 1,200 (0-based; compiled step 0)" in player.info.value
    assert "steps 500–999 of 1,200 (0-based)" in first_plot(player.trace).title.text
    player.slider.value = 650                   # same window: nothing is redrawn
    assert source_with(player.trace, "step").data["step"] is drawn
