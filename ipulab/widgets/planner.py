"""PlannerWidget: map a model onto a Pod with controls, and see what ipulab.plan says.

    widgets.PlannerWidget(plan.bert_large(), "pod16", optimizer="lamb", global_batch=65536)

Controls: t (1-D or 2-D), p, rts, phases and where the optimizer state lives; r follows, as
the system's IPUs / (t · p). It shows whether the mapping fits and why, the memory of an IPU of
every stage by kind against the In-Processor Memory line, the step time by part, and (when
given) the planner-vs-simulator cross-check table.
"""
from __future__ import annotations

import html

import ipywidgets as W

from .. import nn, plan
from ..errors import PlanError
from ..plan.search import shard_shapes
from ..viz.planner import memory_bars, time_breakdown
from ._common import bokeh_pane, toggle_buttons


def _shards(num_ipus: int) -> list[str]:
    """t as the control offers it: every power of two, and 2-D t1xt2 with t1 ≥ t2 ≥ 2."""
    powers = [1 << k for k in range(num_ipus.bit_length()) if num_ipus % (1 << k) == 0]
    return [f"{t1}x{t2}" if t2 > 1 else str(t1) for t in powers
            for t1, t2 in shard_shapes(t)]


def mapping_of(config, model, sample_shape) -> plan.Mapping:
    """The planner's mapping of an nn.TrainConfig: its stages (the config's cuts), t, r,
    micro-batches of batch / M samples, precision and recompute."""
    cuts = config.cuts(model, sample_shape) or []
    bounds = [0, *cuts, len(model)]
    stages = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    micro = config.micro if config.pipeline is not None else 1
    phases = config.phase_spans(model) or [(0, len(model))]
    return plan.make_mapping(tensor_parallel=(config.tensor_parallel, 1),
                             pipeline=len(stages), replicas=config.replicas,
                             layers_per_stage=stages, micro=config.batch_size // micro,
                             ga=micro, precision=config.precision, recompute=config.recompute,
                             rts=config.rts, optimizer_state=config.optimizer_state,
                             phases=len(phases), layers_per_phase=tuple(
                                 hi - lo for lo, hi in phases))


def crosscheck_row(trainer: nn.Trainer, name: str = "model") -> dict:
    """The planner's small-scale prediction of a trainer's step against its profile (the
    trainer has run a step): cycles, and bytes of the fullest IPU, with the errors."""
    profile = trainer.profile()
    per_ipu = profile.memory_total.reshape(profile.num_ipus, -1).sum(axis=1)
    spec = plan.spec_from_model(trainer.model, trainer.input_shape, name)
    guess = plan.small_scale(spec, trainer.device.target,
                             mapping_of(trainer.config, trainer.model, trainer.input_shape),
                             trainer.batch_size, momentum=trainer.config.momentum > 0)
    sim_cycles, sim_bytes = int(profile.total_cycles), int(per_ipu.max())
    return {"model": name, "mapping": plan_label(trainer.config),
            "plan_cycles": guess["cycles"], "sim_cycles": sim_cycles,
            "cycles_error": guess["cycles"] / sim_cycles - 1,
            "plan_bytes": guess["bytes_per_ipu"], "sim_bytes": sim_bytes,
            "bytes_error": guess["bytes_per_ipu"] / sim_bytes - 1}


def plan_label(config) -> str:
    """t · p · r of a config, its micro-batches and what else differs from a plain step."""
    parts = [f"t {config.tensor_parallel} · p {config.num_stages} · r {config.replicas}",
             f"b {config.batch_size}"]
    parts += [f"M {config.micro}"] * (config.pipeline is not None)
    parts += ["recompute"] * config.recompute + [config.precision] * (config.precision != "fp32")
    parts += [f"momentum {config.momentum:g}"] * (config.momentum > 0) + ["rts"] * config.rts
    parts += ["state off-chip"] * (config.optimizer_state == "off-chip")
    parts += [f"phases {config.phases}"] * config.phased
    return ", ".join(parts)


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
    """Controls for a mapping of `spec` on `system`, and the planner's answer for it.
    options: Mapping fields for every mapping (optimizer, precision, micro, ...);
    crosscheck: rows of benchmarks/plan_crosscheck (or plan.crosscheck), shown as a table."""

    def __init__(self, spec, system, global_batch: int | None = None,
                 crosscheck: list | None = None, **options):
        self.spec, self.system = spec, plan.system_of(system)
        self.global_batch, self.options = global_batch, options
        n = self.system.num_ipus
        powers = [str(1 << k) for k in range(n.bit_length()) if n % (1 << k) == 0]
        self.t = W.Dropdown(options=_shards(n), value="1", description="t")
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
        rest = self.system.num_ipus // (shards[0] * shards[1] * int(self.p.value))
        return plan.make_mapping(tensor_parallel=shards, pipeline=int(self.p.value),
                                 replicas=max(rest, 1), rts=self.rts.value,
                                 phases=self.phases.value, optimizer_state=self.state.value,
                                 **self.options)

    def update(self) -> None:
        """Estimate the mapping of the controls and redraw."""
        try:
            e = plan.estimate(self.spec, self.system, self.mapping(), self.global_batch)
        except PlanError as err:
            self.estimate = None
            self.status.value = f"<b style='color:#d62728'>cannot be:</b> {html.escape(str(err))}"
            self.figures.children = ()
            return
        self.estimate = e
        colour = "#2ca02c" if e.fits else "#d62728"
        verdict, _, why = (e.reason if e.fits else f"does not fit: {e.reason}").partition(": ")
        self.status.value = (f"<b style='color:{colour}'>{verdict}</b> — "
                             f"{html.escape(e.mapping.label())}: {html.escape(why)}; "
                             f"{e.samples_per_second:,.1f} samples/s")
        self.figures.children = (
            bokeh_pane(memory_bars([s["kinds"] for s in e.memory], e.sram_bytes)),
            bokeh_pane(time_breakdown(e.times)))
