"""The training dashboard's configuration controls: replicas, batch size and precision.

Choosing a configuration never changes a running fit: the dashboard's next Start builds a new
nn.Trainer with it (rebuilt()), starting from the current weights. Only configurations that can
run are offered, by nn.TrainConfig's rules: replicas that leave each replica an IPU per
pipeline stage (TrainConfig.replica_choices), and batch sizes whose global batch fits in the
training set and splits into the micro-batches (TrainConfig.batch_fits). Each configuration
that has run a step gets a row in config_table(): its simulated images/s and peak tile memory,
to compare replicating or not, fp32 or fp16.
"""
from __future__ import annotations

import ipywidgets as W

from ..nn import PRECISIONS, Trainer
from ..viz import fmt_bytes
from ..viz.base import plural
from ._common import fmt_int, table

BATCH_SIZES = (4, 8, 16, 32, 64)        # images per replica per step offered by the slider


def describe(config) -> str:
    """'4 replicas x batch 16, fp32': what the table and the status line call a config."""
    return f"{plural(config.replicas, 'replica')} x batch {config.batch_size}, {config.precision}"


def label(config) -> str:
    """Short, for the marker on the history plots: '4×16 fp16'."""
    return f"{config.replicas}×{config.batch_size} {config.precision}"


class ConfigControls(W.HBox):
    """replicas (ToggleButtons), batch_size (SelectionSlider, images per replica per step) and
    precision (ToggleButtons), set to `trainer`'s configuration; `samples` is the size of the
    training set. `value` is the selected nn.TrainConfig; `disabled` greys all three out."""

    def __init__(self, trainer, samples: int):
        self.samples, self.config = samples, trainer.config
        now = trainer.config
        self._sizes = sorted({now.batch_size, *BATCH_SIZES})
        replicas = [r for r in now.replica_choices(trainer.device.target)
                    if r * self._sizes[0] <= samples]
        buttons = {"button_width": "56px"}
        self.replicas = W.ToggleButtons(options=sorted({now.replicas, *replicas}),
                                        value=now.replicas, style=buttons)
        self.batch_size = W.SelectionSlider(
            options=sorted({now.batch_size, *self._batches(now.replicas)}),
            value=now.batch_size)
        self.precision = W.ToggleButtons(options=PRECISIONS, value=now.precision,
                                         style=buttons)
        self.replicas.observe(self._replicas_changed, "value")
        super().__init__([W.VBox([W.HTML(f"<b>{title}</b>"), w]) for title, w in (
            ("replicas", self.replicas), ("batch size (per replica)", self.batch_size),
            ("precision", self.precision))])

    def _batches(self, replicas: int) -> list[int]:
        """The batch sizes whose global batch fits in the training set (and that split into
        a pipeline's micro-batches)."""
        return [b for b in self._sizes if self.config.batch_fits(b, self.samples, replicas)] \
            or self._sizes[:1]

    def _replicas_changed(self, change) -> None:
        """Keep the batch size if it still fits, else the largest that does."""
        keep = self.batch_size.value
        options = self._batches(change["new"])
        self.batch_size.options = options         # (resets the value to the first option)
        self.batch_size.value = max([b for b in options if b <= keep], default=options[0])

    @property
    def value(self):
        """The selected configuration: the trainer's, with these controls' values."""
        return self.selected(self.config)

    def selected(self, config):
        """config with the selected replicas, batch size and precision (a new precision takes
        its own default loss scaling)."""
        precision = self.precision.value
        return config.replace(
            replicas=self.replicas.value, batch_size=self.batch_size.value, precision=precision,
            loss_scaling=config.loss_scaling if precision == config.precision else None)

    @property
    def disabled(self) -> bool:
        return self.replicas.disabled

    @disabled.setter
    def disabled(self, flag: bool) -> None:
        for w in (self.replicas, self.batch_size, self.precision):
            w.disabled = flag


def rebuilt(trainer, config, input_shape):
    """A new trainer in `config`, otherwise like `trainer` (the same model, device and engine
    options), compiled now for samples of `input_shape` and starting from `trainer`'s current
    weights (momentum starts again from zero)."""
    new = Trainer(trainer.model, trainer.device, config=config, options=trainer.options,
                  input_shape=input_shape)
    new.set_weights(trainer.get_weights())
    return new


def step_figures(trainer) -> dict:
    """Profile.step_summary of the trainer's step profile, plus the simulated images/s."""
    s = trainer.profile().step_summary()
    return dict(s, images_per_second=trainer.global_batch_size / s["step_seconds"])


def config_table(rows: dict, current) -> str:
    """HTML: one row per configuration run ({TrainConfig: step_figures}), the current one
    marked."""
    body = table(
        ["", "configuration", "images/s", "cycles/step", "peak tile memory", "tiles used"],
        [("▶" if c == current else "", describe(c), fmt_int(s["images_per_second"]),
          fmt_int(s["step_cycles"]), f"{fmt_bytes(s['peak_tile_bytes'], 1)} of "
                                     f"{fmt_bytes(s['bytes_per_tile'], 1)}",
          fmt_int(s["tiles_used"]))
         for c, s in rows.items()])
    return (f"<div style='white-space:nowrap'><b>Configurations (one simulated step each)</b>"
            f"{body}</div>")
