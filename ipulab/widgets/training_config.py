"""The training dashboard's configuration: replicas, batch size and precision (issue 5).

Choosing a configuration never changes a running fit: the dashboard's next Start builds a new
nn.Trainer with it (rebuilt()), starting from the current weights. Only configurations that can
run are offered: replicas that give each replica whole IPUs (1 and the divisors of the device's
IPUs), and batch sizes for which one global batch (replicas x batch) fits in the training set.
Each configuration that has run a step gets a row in config_table(): its simulated images/s and
peak tile memory, to compare replicating or not, fp32 or fp16.
"""
from __future__ import annotations

from typing import NamedTuple

import ipywidgets as W

from ..cli import _bytes, step_summary
from ..nn.trainer import PRECISIONS
from ..viz.base import plural
from ._common import fmt_int, table

BATCH_SIZES = (4, 8, 16, 32, 64)        # images per replica per step offered by the slider


class Config(NamedTuple):
    """One training configuration of the dashboard."""

    replicas: int
    batch_size: int
    precision: str

    @classmethod
    def of(cls, trainer) -> Config:
        return cls(trainer.replicas, trainer.batch_size, trainer.precision)

    def __str__(self) -> str:
        return f"{plural(self.replicas, 'replica')} x batch {self.batch_size}, {self.precision}"

    @property
    def label(self) -> str:
        """Short, for the marker on the history plots: '4×16 fp16'."""
        return f"{self.replicas}×{self.batch_size} {self.precision}"


def replica_choices(target, stages: int = 1) -> list[int]:
    """1 and the divisors of the target's IPUs (1, 2, 4 on a Bow-2000) that leave each replica
    an IPU per pipeline stage."""
    n = target.num_ipus
    return [r for r in range(1, n + 1) if n % r == 0 and r * stages <= max(n, 1)]


class ConfigControls(W.HBox):
    """replicas (ToggleButtons), batch_size (SelectionSlider, images per replica per step) and
    precision (ToggleButtons), set to `trainer`'s configuration; `samples` is the size of the
    training set. `value` is the selected Config; `disabled` greys all three out."""

    def __init__(self, trainer, samples: int):
        self.samples = samples
        now = Config.of(trainer)
        self._sizes = sorted({now.batch_size, *BATCH_SIZES})
        self._micro = trainer.micro_batches
        replicas = [r for r in replica_choices(trainer.device.target, trainer.num_stages)
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
        return [b for b in self._sizes if replicas * b <= self.samples and b % self._micro == 0] \
            or self._sizes[:1]

    def _replicas_changed(self, change) -> None:
        """Keep the batch size if it still fits, else the largest that does."""
        keep = self.batch_size.value
        options = self._batches(change["new"])
        self.batch_size.options = options         # (resets the value to the first option)
        self.batch_size.value = max([b for b in options if b <= keep], default=options[0])

    @property
    def value(self) -> Config:
        return Config(self.replicas.value, self.batch_size.value, self.precision.value)

    @property
    def disabled(self) -> bool:
        return self.replicas.disabled

    @disabled.setter
    def disabled(self, flag: bool) -> None:
        for w in (self.replicas, self.batch_size, self.precision):
            w.disabled = flag


def rebuilt(trainer, config: Config, input_shape):
    """A new trainer in `config`, otherwise like `trainer`: the same model, device, lr,
    momentum, seed, pipeline (and micro-batches), recompute and engine options (and loss
    scaling if the precision stays), compiled now for samples of `input_shape` and starting
    from `trainer`'s current weights (momentum starts again from zero)."""
    new = type(trainer)(
        trainer.model, trainer.device, replicas=config.replicas, batch_size=config.batch_size,
        lr=trainer.lr, momentum=trainer.momentum, precision=config.precision,
        pipeline=trainer.pipeline, recompute=trainer.recompute, seed=trainer.seed,
        micro_batches=None if trainer.pipeline is None else trainer.micro_batches,
        loss_scaling=trainer.loss_scaling if config.precision == trainer.precision else None,
        options=trainer.options, input_shape=input_shape)
    new.set_weights(trainer.get_weights())
    return new


def step_figures(trainer) -> dict:
    """cli.step_summary of the trainer's step profile, plus the simulated images/s."""
    s = step_summary(trainer.profile())
    return dict(s, images_per_second=trainer.global_batch_size / s["step_seconds"])


def config_table(rows: dict, current: Config) -> str:
    """HTML: one row per configuration run ({Config: step_figures}), the current one marked."""
    body = table(
        ["", "configuration", "images/s", "cycles/step", "peak tile memory", "tiles used"],
        [("▶" if c == current else "", str(c), fmt_int(s["images_per_second"]),
          fmt_int(s["step_cycles"]), f"{_bytes(s['peak_tile_bytes'])} of "
                                     f"{_bytes(s['bytes_per_tile'])}", fmt_int(s["tiles_used"]))
         for c, s in rows.items()])
    return (f"<div style='white-space:nowrap'><b>Configurations (one simulated step each)</b>"
            f"{body}</div>")
