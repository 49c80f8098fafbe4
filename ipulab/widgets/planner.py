"""PlannerWidget: map a model onto a Pod with controls, and see what ipulab.plan says.

    widgets.PlannerWidget(plan.bert_large(), "pod16", optimizer="lamb", global_batch=65536)

Controls: t (1-D or 2-D), p, rts, phases and where the optimizer state lives; r follows, as
the system's IPUs / (t · p). It shows whether the mapping fits and why, the memory of an IPU of
every stage by kind against the In-Processor Memory line, the step time by part, what the
numbers rest on (the cycle model checked against the simulator, or the full scale's named
assumptions), and (when given) the planner-vs-simulator cross-check table
(plan.crosscheck_row of trainers that ran).
"""
from __future__ import annotations

import html

import ipywidgets as W

from .. import plan
from ..errors import PlanError
from ..plan.search import shard_shapes
from ..viz.planner import memory_bars, time_breakdown
from ._common import bokeh_pane, toggle_buttons


def _shards(num_ipus: int) -> list[str]:
    """t as the control offers it: every power of two, and 2-D t1xt2 with t1 ≥ t2 ≥ 2."""
    powers = [1 << k for k in range(num_ipus.bit_length()) if num_ipus % (1 << k) == 0]
    return [f"{t1}x{t2}" if t2 > 1 else str(t1) for t in powers
            for t1, t2 in shard_shapes(t)]


def crosscheck_table(rows: list[dict]) -> str:
    """HTML of cross-check rows: mapping, planner and simulator bytes and cycles, errors."""
    head = ("model", "mapping", "plan B/IPU", "sim B/IPU", "err", "plan cycles", "sim cycles",
            "err")
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            r["model"], r["mapping"], f"{r['plan_bytes']:,}", f"{r['sim_bytes']:,}",
            f"{r['bytes_error']:+.1%}", f"{r['plan_cycles']:,}", f"{r['sim_cycles']:,}",
            f"{r['cycles_error']:+.1%}")) + "</tr>" for r in rows)
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + body
            + "</table>")


class PlannerWidget(W.VBox):
    """Controls for a mapping of `spec` on `system` (a name, or the device a simulated run
    was given), and the planner's answer for it. options: Mapping fields for every mapping
    (optimizer, precision, micro_batch_size, ...);
    crosscheck: rows of plan.crosscheck_row (benchmarks/plan_crosscheck), shown as a table."""

    def __init__(self, spec, system, global_batch: int | None = None,
                 crosscheck: list | None = None, **options):
        self.spec, self.target = spec, plan.target_of(system)
        self.global_batch, self.options = global_batch, options
        n = self.target.num_ipus
        powers = [str(1 << k) for k in range(n.bit_length()) if n % (1 << k) == 0]
        shards = [x for x in _shards(n) if "x" not in x] if spec.simulated else _shards(n)
        self.t = W.Dropdown(options=shards, value="1", description="t")
        self.p = W.Dropdown(options=[x for x in powers if int(x) <= spec.num_layers],
                            value="1", description="p")
        self.rts = W.Checkbox(value=False, description="RTS")
        self.phases = W.Dropdown(options=[1] + [k for k in (2, 4, 8, 12, 24, 48, 96)
                                                if k <= spec.num_layers],
                                 value=1, description="phases")
        self.state = toggle_buttons(["on-chip", "off-chip"], "state")
        self.status = W.HTML()
        self.figures = W.VBox()
        for c in (self.t, self.p, self.rts, self.phases, self.state):
            c.observe(lambda _: self.update(), names="value")
        parts = [W.HBox([self.t, self.p, self.rts]), W.HBox([self.phases, self.state]),
                 self.status, self.figures]
        if crosscheck:
            parts.append(W.HTML(crosscheck_table(crosscheck)))
        super().__init__(parts)
        self.estimate = None
        self.update()

    def mapping(self) -> plan.Mapping:
        """The mapping the controls describe (r = IPUs / (t · p))."""
        t1, _, t2 = self.t.value.partition("x")
        shards = (int(t1), int(t2 or 1))
        rest = self.target.num_ipus // (shards[0] * shards[1] * int(self.p.value))
        return plan.make_mapping(tensor_parallel=shards, pipeline=int(self.p.value),
                                 replicas=max(rest, 1), rts=self.rts.value,
                                 phases=self.phases.value, optimizer_state=self.state.value,
                                 **self.options)

    def update(self) -> None:
        """Estimate the mapping of the controls and redraw."""
        try:
            e = plan.estimate(self.spec, self.target, self.mapping(), self.global_batch)
        except PlanError as err:
            self.estimate = None
            self.status.value = f"<b style='color:#d62728'>cannot be:</b> {html.escape(str(err))}"
            self.figures.children = ()
            return
        self.estimate = e
        colour = "#2ca02c" if e.fits else "#d62728"
        notes = "".join(f"<li>{html.escape(a)}</li>" for a in e.assumptions)
        verdict, _, why = (e.reason if e.fits else f"does not fit: {e.reason}").partition(": ")
        self.status.value = (f"<b style='color:{colour}'>{verdict}</b> — "
                             f"{html.escape(plan.describe_run(e.mapping))}: {html.escape(why)}; "
                             f"{e.samples_per_second:,.1f} samples/s"
                             f"<ul style='font-size:12px;margin:2px 0'>{notes}</ul>")
        self.figures.children = (
            bokeh_pane(memory_bars([s["kinds"] for s in e.memory], e.sram_bytes)),
            bokeh_pane(time_breakdown(e.times)))
