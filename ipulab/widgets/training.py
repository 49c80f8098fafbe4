"""TrainingDashboard: the live dashboard of an nn.Trainer (docs/training.md).

    dash = widgets.TrainingDashboard(trainer)          # trains on digits, tests on its test split
    dash = widgets.TrainingDashboard(trainer, x_train, y_train, x_test, y_test, epochs=5)
    dash                       # in a notebook: Start / Stop, loss and accuracy as they change
    dash.fit(2)                # or from code: two more epochs, the figures updating per step

Loss and accuracy are bokeh lines whose ColumnDataSources get one point per training step
(and a test-accuracy point per epoch); the step profile's cycles, images/s, tiles and memory
are shown once the first step has run. Start runs fit in a background thread, so Stop (and the
rest of the notebook) stays responsive; Stop ends training after the current step.

The replicas, batch size and precision controls (training_config.py) choose the configuration
of the next Start: if it differs from the trainer's, Start first builds a new trainer with it
from the current weights (dash.trainer is always the current one). The history plots go on
counting steps across configurations; a dashed line labelled "4×16 fp16" marks where each
configuration started. A table compares the configurations run: images/s, a step's cycles by
part (compute, on-chip exchange, IPU-Link exchange, sync, host), IPU-Link bytes and peak tile
memory, and under it one sentence per configuration, measured from the profiles (viz.explain),
says why it is faster or slower than the one run before it (dash.why()).
"""
from __future__ import annotations

import threading
import time

import ipywidgets as W
import numpy as np
from bokeh.layouts import row
from bokeh.models import ColumnDataSource, LabelSet
from bokeh.plotting import figure

from ..data import digits
from ..errors import DataError
from ..viz import fmt_bytes
from ._common import bokeh_pane, esc, fmt_int, table
from .training_config import ConfigControls, config_table, describe, label, rebuilt, \
    step_figures, why


class TrainingDashboard(W.VBox):
    """Live training of `trainer` on (x, y); (x_test, y_test), if given, is evaluated after
    every epoch. Without data it trains on ipulab.data.digits() and tests on its test split.
    Attributes: loss_source (step, loss, accuracy), test_source (step, accuracy),
    config_source (step, label: where each configuration started), start / stop buttons,
    epochs (IntText), controls (ConfigControls: replicas, batch_size, precision), progress
    (IntProgress), status, profile and table (HTML), configs ({TrainConfig: step_figures} of
    the configurations run), thread (the running background fit, or None)."""

    def __init__(self, trainer, x=None, y=None, x_test=None, y_test=None, epochs: int = 1,
                 seed: int = 0, width: int = 380):
        if x is None:
            if y is not None:
                raise DataError("TrainingDashboard: give both x and y, or neither (digits)")
            x, y, x_test, y_test = digits()
        self.trainer, self.x, self.y = trainer, x, y
        self.x_test, self.y_test = x_test, y_test
        self.seed = seed
        self.epochs_run = 0
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._profile_shown = False
        self._mark_pending = True                 # label the next step with the configuration
        self.configs: dict = {}
        h = trainer.history
        self.loss_source = ColumnDataSource({"step": list(range(1, len(h["loss"]) + 1)),
                                             "loss": list(h["loss"]),
                                             "accuracy": list(h["accuracy"])})
        self.test_source = ColumnDataSource({"step": [], "accuracy": []})
        loss = figure(title="Training loss", x_axis_label="step", y_axis_label="loss",
                      width=width, height=250)
        loss.line("step", "loss", source=self.loss_source)
        acc = figure(title="Accuracy", x_axis_label="step", y_axis_label="accuracy",
                     width=width, height=250, x_range=loss.x_range, y_range=(0, 1.02))
        acc.line("step", "accuracy", source=self.loss_source, color="darkorange",
                 legend_label="training batch")
        acc.scatter("step", "accuracy", source=self.test_source, color="green", size=7,
                    legend_label="test")
        acc.legend.location = "bottom_right"
        self.config_source = ColumnDataSource({"step": [], "label": []})
        for f in (loss, acc):
            f.vspan("step", source=self.config_source, line_color="gray", line_dash="dashed")
        acc.add_layout(LabelSet(x="step", y=0.02, text="label", source=self.config_source,
                                angle=np.pi / 2, text_baseline="top", x_offset=2,
                                text_font_size="10px", text_color="gray"))   # up the line
        self.figures = row(loss, acc)
        self.epochs = W.BoundedIntText(value=epochs, min=1, max=1000, description="epochs",
                                       layout=W.Layout(width="160px"))
        self.start = W.Button(description="Start", button_style="success", icon="play")
        self.stop = W.Button(description="Stop", button_style="danger", icon="stop",
                             disabled=True)
        self.start.on_click(lambda _: self.fit_in_background())
        self.stop.on_click(lambda _: self._stop.set())
        self.controls = ConfigControls(trainer, len(x))
        self.progress = W.IntProgress(value=0, min=0, max=1, description="epoch")
        self.status = W.HTML(f"<code>{trainer!r}</code>")
        self.profile = W.HTML("<i>the step profile appears after the first step</i>",
                              layout=W.Layout(flex="0 0 auto", margin="0 24px 0 0"))
        self.table = W.HTML(layout=W.Layout(flex="0 0 auto"))
        super().__init__([W.HBox([self.epochs, self.start, self.stop, self.progress]),
                          self.controls, self.status, bokeh_pane(self.figures),
                          W.HBox([self.profile, self.table],
                                 layout=W.Layout(flex_flow="row wrap"))])
        if trainer.step_profile is not None:
            self._show_profile()

    def why(self) -> list[str]:
        """For each configuration run after the first: why its step is faster or slower per
        image than the one before it, from the two profiles (the sentences under the table)."""
        return why(self.configs)

    # --- training --------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def build_selected(self):
        """Make `trainer` the configuration the controls select, building a new trainer from
        the current weights if it differs (what Start does first); returns the trainer."""
        want = self.controls.selected(self.trainer.config)
        if want == self.trainer.config:
            return self.trainer
        self.status.value = f"building the graph for {describe(want)}..."
        t0 = time.perf_counter()
        shape = self.trainer.input_shape or np.shape(self.x)[1:]
        self.trainer = rebuilt(self.trainer, want, shape)
        self._profile_shown, self._mark_pending = False, True
        self.status.value = (f"built the graph for {describe(want)} in "
                             f"{time.perf_counter() - t0:.1f} s; training goes on from the "
                             f"current weights")
        return self.trainer

    def _busy(self, flag: bool) -> None:
        self.start.disabled, self.stop.disabled = flag, not flag
        self.controls.disabled = flag

    def fit(self, epochs: int | None = None) -> dict:
        """Train for `epochs` (default: the epochs box) in this thread, updating the figures
        after every step; returns the trainer's history. A configuration chosen in the controls
        is built first (build_selected). Stop (or request_stop()) ends it after the current
        step."""
        epochs = self.epochs.value if epochs is None else int(epochs)
        self._stop.clear()
        self._busy(True)
        self.progress.max, self.progress.value = max(epochs, 1), 0
        try:
            self.build_selected()
            for e in range(epochs):
                self.progress.description = f"epoch {e + 1}/{epochs}"
                self.trainer.fit(self.x, self.y, epochs=1, seed=self.seed + self.epochs_run,
                                 callback=self._on_step)
                self.epochs_run += 1
                self.progress.value = e + 1
                if self.x_test is not None:
                    acc, loss = self.trainer.evaluate(self.x_test, self.y_test)
                    self.test_source.stream({"step": [len(self.loss_source.data["step"])],
                                             "accuracy": [acc]})
                    self.status.value = (f"epoch {self.epochs_run}: test accuracy "
                                         f"<b>{acc:.2%}</b>, test loss {loss:.4f}")
                if self._stop.is_set():
                    self.status.value += " — stopped"
                    break
        finally:
            self._busy(False)
        return self.trainer.history

    def fit_in_background(self, epochs: int | None = None) -> threading.Thread | None:
        """What Start does: fit(epochs) in a background thread (None if one is running)."""
        if self.running:
            return None
        self.error = None

        def work():
            try:
                self.fit(epochs)
            except BaseException as e:       # shown under what was going on, kept for inspection
                self.error = e
                self.status.value += (f"<br><b style='color:#b00'>{type(e).__name__}: "
                                      f"{esc(e)}</b>")

        self._busy(True)                    # at once, not when the thread gets going
        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()
        return self.thread

    def request_stop(self) -> None:
        """What Stop does: end training after the current step."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background fit to end."""
        if self.thread is not None:
            self.thread.join(timeout)

    def _on_step(self, trainer, epoch, step, steps, loss, accuracy):
        n = len(self.loss_source.data["step"]) + 1
        if self._mark_pending:
            self._mark_pending = False
            self.config_source.stream({"step": [n - 0.5], "label": [label(trainer.config)]})
        self.loss_source.stream({"step": [n], "loss": [loss], "accuracy": [accuracy]})
        if not self._profile_shown:
            self._show_profile()
        if step + 1 == steps or step % 5 == 0:
            self.status.value = (f"epoch {self.epochs_run + 1}, step {step + 1}/{steps}: loss "
                                 f"{loss:.4f}, batch accuracy {accuracy:.1%}")
        return not self._stop.is_set()

    def _show_profile(self) -> None:
        t, now = self.trainer, self.trainer.config
        s = self.configs[now] = step_figures(t)
        self._profile_shown = True
        self.table.value = config_table(self.configs, now)
        self.profile.value = f"<b>One training step (simulated): {describe(now)}</b>" + table(
            ["", ""],
            [("cycles", f"{fmt_int(s['step_cycles'])} ({s['step_seconds'] * 1e6:,.1f} µs)"),
             (f"{s['samples']}/s", fmt_int(s["images_per_second"])),
             ("tiles used", f"{fmt_int(s['tiles_used'])} of {fmt_int(s['num_tiles'])}"),
             ("peak tile memory", f"{fmt_bytes(s['peak_tile_bytes'], 1)} of "
                                  f"{fmt_bytes(s['bytes_per_tile'], 1)}"),
             ("exchange", fmt_bytes(s["exchange_bytes"], 1)),
             ("IPU-Links", fmt_bytes(s["ipu_link_bytes"], 1))])
