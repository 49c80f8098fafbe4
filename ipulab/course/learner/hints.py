"""hint() and hint_button(): a question's hints, one tier at a time (each one recorded)."""
from __future__ import annotations

import html

from ..questions.registry import get
from .record import record_hint


def hint(question_id: str, level: int = 1) -> None:
    """Print hint `level` (1 = a nudge … last = nearly the answer) for a question. It returns
    nothing: a returned text would show a second time as the cell's value in Jupyter."""
    try:
        q = get(question_id)
    except KeyError as e:
        print(str(e).strip("'\""))
        return
    n = len(q.hints)
    level = max(1, min(int(level), n))
    record_hint(question_id, level)
    more = (f"  (hint({question_id!r}, {level + 1}) for more)" if level < n
            else "  (that was the last hint)")
    print(f"Hint {level}/{n} for {question_id} — {q.title}:\n  {q.hints[level - 1]}\n{more}")


def hint_button(question_id: str):
    """A button that reveals the hints of a question one tier at a time."""
    import ipywidgets as widgets     # only where a button is asked for: checks stay light

    q = get(question_id)
    shown = widgets.HTML(value="")
    button = widgets.Button(description=f"Hint 1 of {len(q.hints)}", icon="lightbulb-o",
                            tooltip=f"reveal the next hint for {question_id}")
    state = {"level": 0}

    def reveal(_=None):
        if state["level"] >= len(q.hints):
            return
        state["level"] += 1
        level = state["level"]
        record_hint(question_id, level)
        items = "".join(f"<li>{html.escape(h)}</li>" for h in q.hints[:level])
        shown.value = f"<ol style='margin:0.3em 0'>{items}</ol>"
        if level < len(q.hints):
            button.description = f"Hint {level + 1} of {len(q.hints)}"
        else:
            button.description, button.disabled = "No more hints", True

    button.on_click(reveal)
    box = widgets.VBox([button, shown])
    box.reveal = reveal          # for tests and for driving it from code
    box.button, box.shown = button, shown
    return box
