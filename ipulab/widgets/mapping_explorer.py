"""MappingExplorer: one model on a Pod under the t, p, RTS and phases picked with buttons. Run
trains it on the simulator from the same first weights and shows its memory on every tile and
what crossed between tiles and IPUs, with its cycles a step, the bytes of its fullest IPU, its
IPU-Link bytes and whether its losses are those of a reference run (one IPU, say). The replicas
are what the Pod's IPUs leave: r = IPUs / (t · p), each with global_batch / r samples a step.
"""
from __future__ import annotations

import ipywidgets as W
import numpy as np

from .. import viz
from ..errors import IpuLabError
from ..nn import Trainer
from ._common import bokeh_pane, esc, toggle_buttons

TENSOR_PARALLEL = ("1", "2", "4", "2x2")     # "2x2": PopXL's 2-D split, t1 heads x t2 hidden


class MappingExplorer(W.VBox):
    """make_model() gives a fresh nn.Sequential (its seed: the same first weights each run);
    Run trains it with `options` (optimizer, lr, ...) on `device` over x, y in order,
    global_batch samples a step. `reference`: the losses every mapping should reproduce
    (within float32 rounding). After a run, `trainer` is its nn.Trainer (None if refused)."""

    def __init__(self, make_model, device, x, y, global_batch: int, reference=None,
                 tensor_parallel=TENSOR_PARALLEL, pipeline=(1, 2, 4), phases=(1, 2),
                 **options):
        self.make_model, self.device, self.options = make_model, device, options
        self.x, self.y, self.global_batch = x, y, int(global_batch)
        self.reference = None if reference is None else np.asarray(reference)
        self.trainer = None
        self.t = toggle_buttons([str(t) for t in tensor_parallel], "t")
        self.p = toggle_buttons([str(p) for p in pipeline], "p")
        self.phases = toggle_buttons([str(k) for k in phases], "phases")
        self.rts = W.Checkbox(value=False, description="RTS", indent=False)
        self.run = W.Button(description="Run", button_style="primary")
        self.status = W.HTML()
        self.plots = W.Box(layout=W.Layout(flex_flow="row wrap"))
        self.run.on_click(lambda _: self.train())
        super().__init__([self.t, self.p, self.phases, W.HBox([self.rts, self.run]),
                          self.status, self.plots])

    def config(self) -> dict:
        """The Trainer options of the mapping picked: t, p (one micro-batch per stage), RTS,
        phases, and the replicas the Pod's IPUs leave with their share of the global batch."""
        t1, _, t2 = self.t.value.partition("x")
        shards, stages = int(t1) * int(t2 or 1), int(self.p.value)
        replicas = max(1, self.device.target.num_ipus // (shards * stages))
        config = dict(replicas=replicas, batch_size=max(1, self.global_batch // replicas),
                      tensor_parallel=self.t.value if t2 else shards, rts=self.rts.value,
                      phases=int(self.phases.value))
        if stages > 1:
            config.update(pipeline=stages, micro_batches=stages)
        return config

    def train(self) -> None:
        """Train the picked mapping on the simulator and show what its profile says; a mapping
        that cannot run (does not fit, breaks a rule) says why in the status line."""
        config = self.config()
        label = esc(", ".join(f"{k}={v}" for k, v in config.items()))
        if config["replicas"] * config["batch_size"] != self.global_batch:
            self.trainer, self.plots.children = None, []
            self.status.value = (f"<b>{label}</b>: {config['replicas']} replicas cannot share "
                                 f"a global batch of {self.global_batch}: give each replica more "
                                 "IPUs (t or p)")
            return
        try:
            trainer = Trainer(self.make_model(), self.device, **self.options, **config)
            trainer.fit(self.x, self.y, shuffle=False)
        except IpuLabError as e:
            self.trainer, self.plots.children = None, []
            self.status.value = f"<b>{label}</b>: {esc(e)}"
            return
        self.trainer, profile = trainer, trainer.profile()
        fullest = int(profile.memory_total.reshape(profile.num_ipus, -1).sum(1).max())
        links = profile.step_summary()["ipu_link_bytes"]
        same = "" if self.reference is None else (
            "; losses as the reference's" if np.allclose(trainer.history["loss"],
                                                         self.reference, rtol=2e-5)
            else "; losses NOT as the reference's")
        self.status.value = (f"<b>{label}</b>: {profile.total_cycles:,} cycles a step, fullest "
                             f"IPU {fullest:,} B, {links:,} B over the IPU-Links{same}")
        self.plots.children = [bokeh_pane(viz.tile_memory_heatmap(profile, width=420)),
                               bokeh_pane(viz.exchange_matrix(profile, width=420))]
