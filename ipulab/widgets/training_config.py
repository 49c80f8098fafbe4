"""The training dashboard's configuration controls: replicas, batch size and precision.

Choosing a configuration never changes a running fit: the dashboard's next Start builds a new
nn.Trainer with it (rebuilt()), starting from the current weights. Only configurations that can
run are offered, by nn.TrainConfig's rules: replicas that leave each replica an IPU per
pipeline stage (TrainConfig.replica_choices), and batch sizes whose global batch fits in the
training set and splits into the micro-batches (TrainConfig.batch_fits). Each configuration
that has run a step gets a row in config_table(): its simulated images/s, where the cycles of
a step go (compute, on-chip exchange, IPU-Link exchange, sync, host), the bytes over IPU-Links
and peak tile memory, and a sentence measured from the two profiles (viz.explain) says why it
is faster or slower than the configuration run before it.
"""
from __future__ import annotations

import ipywidgets as W

from ..nn import PRECISIONS, Trainer
from ..plan import describe_run
from ..viz import fmt_bytes
from ..viz.explain import PARTS, explain, step_breakdown
from ._common import esc, fmt_int, table

BATCH_SIZES = (4, 8, 16, 32, 64)        # images per replica per step offered by the slider
# the step table's short headers for viz.explain.PARTS (the full names go under the table)
COLUMNS = {"compute": "compute", "exchange": "exchange", "inter_ipu_exchange": "IPU-Link",
           "sync": "sync", "host_exchange": "host"}


def describe(config) -> str:
    """'4 replicas x batch 16, fp32': what the table and the status line call a config (the
    planner's words for a run, plan.describe_run)."""
    return describe_run(config, "words")


def label(config) -> str:
    """Short, for the marker on the history plots: '4×16 fp16'."""
    return describe_run(config, "marker")


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
    """Profile.step_summary of the trainer's step profile, the simulated samples per second
    (images_per_second, with samples naming them: images, or sequences of tokens), and
    viz.explain.step_breakdown's cycles by part and what explains them."""
    p = trainer.profile()
    s = p.step_summary()
    return dict(s, **step_breakdown(p, trainer.global_batch_size),
                images_per_second=trainer.global_batch_size / s["step_seconds"],
                samples="sequences" if trainer.positions > 1 else "images")


def why(rows: dict) -> list[str]:
    """For each configuration after the first ({TrainConfig: step_figures}, in the order
    run): one sentence saying why it is faster or slower than the one before it."""
    runs = list(rows.items())
    return [explain(b0, b1, label(c0), label(c1)) for (c0, b0), (c1, b1) in zip(runs, runs[1:])]


def config_table(rows: dict, current) -> str:
    """HTML: one row per configuration run ({TrainConfig: step_figures}), the current one
    marked: images/s (or sequences/s), a step's cycles and where they go (PARTS, headed short to fit a
    notebook's width), IPU-Link bytes, peak tile memory; then why each is faster or slower
    than the one before (why())."""
    unit = next(iter(rows.values()))["samples"] if rows else "images"
    body = table(
        ["", "configuration", f"{unit}/s", "cycles/step", *COLUMNS.values(), "IPU-Link bytes",
         "peak tile"],
        [("▶" if c == current else "", describe(c), fmt_int(s["images_per_second"]),
          fmt_int(s["step_cycles"]), *(fmt_int(s[p]) for p in COLUMNS),
          fmt_bytes(s["ipu_link_bytes"], 1), fmt_bytes(s["peak_tile_bytes"], 1))
         for c, s in rows.items()])
    tile = fmt_bytes(next(iter(rows.values()))["bytes_per_tile"], 1) if rows else ""
    reasons = "".join(f"<li>{esc(r)}</li>" for r in why(rows))
    return (f"<div style='white-space:nowrap'><b>Configurations (one simulated step each)</b>"
            f"{body}<div style='font-size:12px'>cycles/step = "
            f"{' + '.join(PARTS.values())}; peak tile: the fullest tile's bytes of {tile}"
            f"</div></div>"
            + (f"<ul class='ipulab-why' style='white-space:normal;max-width:900px;"
               f"margin:4px 0 0 0;padding-left:18px'>{reasons}</ul>" if reasons else ""))
