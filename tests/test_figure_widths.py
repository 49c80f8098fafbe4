"""Figures that fit (issue 15, item 5): every bokeh figure of the course, and every layout of
figures a widget or a notebook builds, fits a notebook cell of a 1280-pixel-wide JupyterLab,
titles and subtitles included, without clipping.

Bokeh lays a figure out in the browser; here its outer width is estimated from the model (the
plot area, plus each axis, colour bar, outside legend and toolbar, plus borders), on the
generous side, so that a figure passing here also passes the real measurement: the browser
test (tests/browser) checks in Chromium that no canvas reaches past its output area."""
import ipywidgets
import pytest
from bokeh.models import (Axis, CategoricalAxis, ColorBar, Div, GridBox, GridPlot, Legend,
                          LayoutDOM, Plot, Row, Spacer, Tabs, Title)
from jupyter_bokeh import BokehModel

import ipulab
from ipulab import nn, viz, widgets
from ipulab.data import digits

# A cell's output area in a 1280-px-wide JupyterLab (side bars folded): 1280 less the side
# tab bars, the notebook's padding and the prompt column; the browser test (1400-px window,
# file browser open) measures about 1,000 px.
FIT = 1000
CHAR = {10: 5.5, 11: 6.1, 12: 6.6, 13: 7.2, 14: 7.9}   # px per character, by font size
AXIS = 72                               # ticks, their labels (e.g. "5,000,000"), axis label
TOOLBAR = 34


def _text_width(text: str, size: str = "13px") -> float:
    return len(text) * CHAR.get(int(str(size).removesuffix("px") or 13), 7.9)


def _side(p: Plot, renderers) -> float:
    """Width of what sits left or right of the plot area."""
    w = 0.0
    for r in renderers:
        if isinstance(r, CategoricalAxis):
            factors = getattr(p.y_range, "factors", None) or []
            w += 30 + max((_text_width(str(f), "11px") for f in factors), default=40)
        elif isinstance(r, Axis) and r.major_label_overrides:
            w += 30 + max(_text_width(str(t), r.major_label_text_font_size)
                          for t in r.major_label_overrides.values())
        elif isinstance(r, Axis):
            w += AXIS
        elif isinstance(r, ColorBar):
            w += (r.width if isinstance(r.width, (int, float)) else 25) + 70
        elif isinstance(r, Legend):
            labels = [str(getattr(i.label, "value", i.label) or "") for i in r.items]
            title = _text_width(r.title or "", "13px")
            w += 80 + max([title, *(_text_width(t, r.label_text_font_size) for t in labels)])
        elif isinstance(r, Title):
            w += 28
    return w


def plot_width(p: Plot) -> float:
    """The outer width of one figure as bokeh draws it."""
    if p.frame_width is None:
        return float(p.width or 600)
    toolbar = TOOLBAR if p.toolbar_location in ("left", "right") and p.toolbar.tools else 0
    return p.frame_width + _side(p, p.left) + _side(p, p.right) + toolbar + 2 * (p.min_border or 5)


def titles(p: Plot):
    """(text, font size) of the title and of every title above the plot."""
    out = [(p.title.text, p.title.text_font_size)] if p.title is not None else []
    return out + [(t.text, t.text_font_size) for t in p.above if isinstance(t, Title)]


def width(model) -> float:
    """Outer width of a bokeh model, a layout of them, or ipywidgets holding them."""
    if isinstance(model, BokehModel):
        return width(model._model)
    if isinstance(model, ipywidgets.Box):
        shown = [c for c in model.children if c.layout.display != "none"]
        flow = model.layout.flex_flow or ""
        if isinstance(model, (ipywidgets.VBox, ipywidgets.Tab, ipywidgets.Accordion)) \
                or "wrap" in flow or flow.startswith("column"):
            return max((width(c) for c in shown), default=0)     # one child per line
        return sum(width(c) for c in shown)                       # side by side
    if isinstance(model, ipywidgets.Widget):
        return 0.0                       # controls and HTML wrap in their cell
    if isinstance(model, Plot):
        return plot_width(model)
    if isinstance(model, Tabs):
        return max((width(t.child) for t in model.tabs), default=0)
    if isinstance(model, (GridPlot, GridBox)):
        cols: dict = {}
        for child, _row, col, *_ in model.children:
            cols[col] = max(cols.get(col, 0), width(child))
        return sum(cols.values())
    if isinstance(model, Row):
        return sum(width(c) for c in model.children)
    if hasattr(model, "children"):
        return max((width(c) for c in model.children), default=0)
    if isinstance(model, (Div, Spacer)):
        return float(model.width or 0)
    assert isinstance(model, LayoutDOM), type(model)
    return float(model.width or 0)


def plots_in(model):
    """Every bokeh Plot inside a model, a layout or ipywidgets."""
    if isinstance(model, BokehModel):
        yield from plots_in(model._model)
    elif isinstance(model, ipywidgets.Box):
        for c in model.children:
            yield from plots_in(c)
    elif isinstance(model, LayoutDOM):
        yield from model.select({"type": Plot})


def check_fits(model, what: str) -> None:
    """The model is at most FIT px wide, and no title is wider than its figure."""
    assert width(model) <= FIT, f"{what}: about {width(model):.0f} px wide, over {FIT}"
    for p in plots_in(model):
        w = plot_width(p)
        for text, size in titles(p):
            assert _text_width(text or "", size) <= w, \
                f"{what}: the title {text!r} ({_text_width(text, size):.0f} px) is wider than " \
                f"its figure ({w:.0f} px), so it is cut"


@pytest.fixture(scope="module")
def bow_trainer():
    """The course's run of notebook 09, on a Bow-2000 cut to 16 tiles per IPU, one step run."""
    x, y, xt, yt = digits()
    t = nn.Trainer(nn.default_cnn(), ipulab.devices.bow2000(tiles_per_ipu=16), replicas=4,
                   lr=0.1, momentum=0.9)
    t.fit(x[:64], y[:64], shuffle=False)
    return t


@pytest.fixture(scope="module")
def pipelined():
    x, y, _, _ = digits()
    t = nn.Trainer(nn.default_cnn(), ipulab.devices.bow2000(tiles_per_ipu=16), batch_size=64,
                   pipeline=[2, 3, 6], micro_batches=4, lr=0.1, momentum=0.9, recompute=True)
    t.fit(x[:64], y[:64], shuffle=False)
    return t


def test_every_viz_figure_fits_with_its_defaults(bow_trainer, pipelined):
    for t in (bow_trainer, pipelined):
        p = t.profile()
        for f in (viz.tile_memory_heatmap, viz.bsp_trace, viz.exchange_matrix, viz.liveness,
                  viz.codelet_summary, viz.linked):
            check_fits(f(p), f.__name__)


def test_the_figures_as_the_notebooks_size_them(bow_trainer, pipelined):
    """The arguments the notebooks pass (09: the heatmap and the liveness plot at 420 px
    side by side in a wrapping box, the exchange matrix at 520 px, the trace of 16 rows; 08:
    two liveness plots in a wrapping box; 05: a liveness plot at 680 px)."""
    for t in (bow_trainer, pipelined):
        p = t.profile()
        check_fits(viz.liveness(p, width=420), "09: Memory in use over the run")
        check_fits(viz.tile_memory_heatmap(p, width=420), "09: the heatmap beside it")
        check_fits(viz.exchange_matrix(p, width=520), "09: exchange matrix")
        check_fits(viz.bsp_trace(p, max_rows=16), "09: trace")
        both = ipywidgets.Box([BokehModel(viz.tile_memory_heatmap(p, width=420)),
                               BokehModel(viz.liveness(p, width=420))],
                              layout=ipywidgets.Layout(flex_flow="row wrap"))
        check_fits(both, "09: heatmap and liveness, wrapping")
    pair = ipywidgets.Box([BokehModel(viz.liveness(t.profile(), width=420))
                           for t in (bow_trainer, pipelined)],
                          layout=ipywidgets.Layout(flex_flow="row wrap"))
    check_fits(pair, "08: liveness kept and recomputed, wrapping")
    check_fits(viz.liveness(pipelined.profile(), width=680), "05: liveness")


def test_the_dashboards_fit(bow_trainer):
    x, y, xt, yt = digits()
    dash = widgets.TrainingDashboard(bow_trainer, x[:64], y[:64], xt[:16], yt[:16])
    check_fits(dash, "TrainingDashboard")
    engine = bow_trainer.engine
    for w in (widgets.ProfileDashboard(engine), widgets.TileExplorer(engine),
              widgets.BSPPlayer(engine)):
        check_fits(w, type(w).__name__)


def test_the_estimate_is_not_blind():
    """A figure too wide, a row of two that do not fit, a title longer than its figure: each
    is caught."""
    from bokeh.layouts import row
    from bokeh.plotting import figure

    with pytest.raises(AssertionError, match="over 1000"):
        check_fits(figure(frame_width=950), "wide")
    with pytest.raises(AssertionError, match="over 1000"):
        check_fits(row(figure(frame_width=450), figure(frame_width=450)), "a row")
    with pytest.raises(AssertionError, match="is cut"):
        check_fits(figure(frame_width=200, title="x" * 60), "title")
    box = ipywidgets.Box([BokehModel(figure(frame_width=450)), BokehModel(figure(frame_width=450))])
    with pytest.raises(AssertionError, match="over 1000"):
        check_fits(box, "a box that does not wrap")
    box.layout.flex_flow = "row wrap"
    check_fits(box, "a box that wraps")
