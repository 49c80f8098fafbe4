"""What every figure shares: a bokeh figure with readable defaults, hover tooltips, a note
for an empty plot, and number formatting for titles."""
from __future__ import annotations

from bokeh.models import HoverTool, Label, Title
from bokeh.plotting import figure as _figure

TOOLS = "pan,wheel_zoom,box_zoom,reset,save"
SELECT_TOOLS = "tap,box_select"


def figure(title: str, x_label: str, y_label: str, *, subtitle: str = "",
           selectable: bool = False, tools: str | None = None, **kw):
    """A bokeh figure with a short title, a line of detail below it, labelled axes, no bokeh
    logo and the standard tools (plus tap and box_select when it takes part in linked
    selection), or the given `tools`."""
    if tools is None:
        tools = f"{TOOLS},{SELECT_TOOLS}" if selectable else TOOLS
    fig = _figure(title=title, tools=tools, x_axis_label=x_label, y_axis_label=y_label, **kw)
    fig.title.text_font_size = "14px"
    if subtitle:
        fig.add_layout(Title(text=subtitle, text_font_style="normal", text_font_size="12px",
                             name="subtitle"), "above")
    fig.toolbar.logo = None
    return fig


def subtitle(fig) -> str:
    """The detail line under a figure's title ('' if none)."""
    found = fig.select_one({"name": "subtitle", "type": Title})
    return found.text if found is not None else ""


def hover(fig, renderers, tooltips: list[tuple[str, str]], **kw) -> HoverTool:
    """Add a hover tool showing `tooltips` for the given renderers."""
    tool = HoverTool(renderers=list(renderers), tooltips=tooltips, **kw)
    fig.add_tools(tool)
    return tool


def note(fig, text: str) -> None:
    """Write a message in the middle of an empty plot (e.g. 'no exchange traffic')."""
    fig.add_layout(Label(x=10, y=10, x_units="screen", y_units="screen", text=text,
                         text_color="#666666", text_font_size="13px"))


def fmt_bytes(n: float, digits: int = 2) -> str:
    """1234567 -> '1.18 MiB' (binary units, as tile memory is usually quoted); `digits`
    after the point for KiB and above."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.{digits}f} {unit}"
        n /= 1024
    return f"{n:,.{digits}f} GiB"


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 tile', '1,472 tiles'; irregular plurals are given: plural(n, "vertex", "vertices")."""
    n = int(n)
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def fmt_cycles(cycles: int, clock_hz: float) -> str:
    """'12,345 cycles (9.3 us)' at the target's clock."""
    return f"{plural(cycles, 'cycle')} ({cycles / clock_hz * 1e6:,.2f} µs)"
