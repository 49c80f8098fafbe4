"""widgets.TrainingDashboard(trainer): the live training dashboard, driven from code and by
its buttons."""
import html

import ipywidgets
import numpy as np
import pytest
from traitlets import TraitError

import ipulab
from ipulab import nn
from ipulab.data import digits
from ipulab.errors import DataError, TileMemoryError
from ipulab.viz import fmt_bytes
from ipulab.viz.explain import PARTS, breakdown_rows, explain, step_breakdown
from ipulab.widgets import TrainingDashboard


def Config(replicas, batch_size, precision, lr=0.1, momentum=0.9):
    """The nn.TrainConfig of the dashboard's trainers with these selectable values."""
    return nn.TrainConfig(replicas=replicas, batch_size=batch_size, precision=precision, lr=lr,
                          momentum=momentum)


@pytest.fixture(scope="module")
def data():
    x, y, xt, yt = digits()
    return x[:160], y[:160], xt[:40], yt[:40]


def trainer(replicas=1, tiles_per_ipu=8, **kw):
    dev = ipulab.devices.bow2000(tiles_per_ipu=tiles_per_ipu) if replicas > 1 else \
        ipulab.devices.ipu("bow", tiles_per_ipu=tiles_per_ipu)
    return nn.Trainer(nn.default_cnn(), dev, replicas=replicas, **{"lr": 0.1, "momentum": 0.9,
                                                                    **kw})


def stop_after(dash, steps, seen=None):
    """Click Stop once `steps` points have streamed (one per step); `seen` collects, per step,
    whether the controls and Start were disabled then."""
    count = []

    def on_step(attr, old, new):
        count.append(1)
        if seen is not None:
            seen.append((dash.controls.disabled, dash.start.disabled))
        if len(count) == steps:
            dash.stop.click()

    dash.loss_source.on_change("data", on_step)
    return on_step


def test_dashboard_fit_updates_sources_and_profile(data):
    tr = trainer(4)
    dash = TrainingDashboard(tr, *data, epochs=2)
    assert isinstance(dash, ipywidgets.VBox) and isinstance(dash, TrainingDashboard)
    assert dash.loss_source.data["step"] == [] and "after the first step" in dash.profile.value
    assert dash.epochs.value == 2 and dash.stop.disabled and not dash.start.disabled
    h = dash.fit()
    steps = 2 * (160 // 64)
    assert len(h["loss"]) == steps
    d = dash.loss_source.data
    assert list(d["step"]) == list(range(1, steps + 1))
    np.testing.assert_allclose(d["loss"], h["loss"], rtol=1e-6)
    np.testing.assert_allclose(d["accuracy"], h["accuracy"])
    # a test point per epoch, at the last step of the epoch
    assert list(dash.test_source.data["step"]) == [2, 4]
    assert dash.test_source.data["accuracy"][-1] == tr.evaluate(data[2], data[3]).accuracy
    assert "test accuracy" in dash.status.value
    assert dash.progress.value == dash.progress.max == 2
    p = dash.profile.value
    assert "cycles" in p and f"{tr.history['cycles'][0]:,}" in p
    assert "32 of 32" in p and "IPU-Links" in p              # 4 IPUs x 8 tiles
    assert "images/s" in p and "images/s" in dash.table.value and "sequences/s" not in p
    assert not dash.start.disabled and dash.stop.disabled


def test_a_transformers_throughput_is_in_sequences():
    """A model on tokens counts sequences a second, not images."""
    x, y, xt, yt = ipulab.data.sort_tokens(n_train=32, n_test=16, seed=0)
    tr = nn.Trainer(nn.small_gpt(seq_len=x.shape[1]), ipulab.devices.ipu("bow", tiles_per_ipu=32),
                    batch_size=16, optimizer="adam", lr=3e-3)
    dash = TrainingDashboard(tr, x, y, xt, yt, epochs=1)
    dash.fit()
    assert "sequences/s" in dash.profile.value and "sequences/s" in dash.table.value
    assert "images/s" not in dash.profile.value + dash.table.value


def test_start_and_stop_buttons(data):
    tr = trainer()
    dash = TrainingDashboard(tr, *data[:2], epochs=3)
    stops = []

    def stop_after_3_steps(attr, old, new):       # the source streams one point per step
        stops.append(1)
        if len(stops) == 3:
            dash.stop.click()

    dash.loss_source.on_change("data", stop_after_3_steps)
    dash.start.click()
    assert dash.start.disabled
    dash.wait(120)
    assert not dash.running and dash.error is None
    assert len(tr.history["loss"]) == 3 == len(dash.loss_source.data["step"])   # stopped
    assert "stopped" in dash.status.value
    assert dash.epochs_run == 1 and not dash.start.disabled and dash.stop.disabled
    # Start again: trains on (3 epochs of 10 steps)
    dash.start.click()
    dash.wait(120)
    assert len(tr.history["loss"]) == 3 + 3 * 10 == len(dash.loss_source.data["step"])
    assert dash.test_source.data["step"] == []                 # no test data given


def test_dashboard_defaults_to_digits_and_checks_data():
    tr = trainer()
    dash = TrainingDashboard(tr)
    assert len(dash.x) == 1437 and len(dash.x_test) == 360
    with pytest.raises(DataError, match="both x and y"):
        TrainingDashboard(tr, y=np.zeros(3, int))


def test_controls_offer_only_configurations_that_can_run(data):
    dash = TrainingDashboard(trainer(4), *data, epochs=1)
    c = dash.controls
    assert c.value == Config(4, 16, "fp32") and not c.disabled
    assert c.replicas.options == (1, 2, 4)                    # the divisors of a Bow-2000's IPUs
    assert c.precision.options == ("fp32", "fp16")
    assert c.batch_size.options == (4, 8, 16, 32)            # 4 x 64 > the 160 samples
    with pytest.raises(TraitError):
        c.replicas.value = 3
    with pytest.raises(TraitError):
        c.batch_size.value = 64
    c.batch_size.value = 32
    c.replicas.value = 1                                       # now 64 fits; 32 is kept
    assert c.batch_size.options == (4, 8, 16, 32, 64) and c.value == Config(1, 32, "fp32")
    c.batch_size.value = 64
    c.replicas.value = 2                                       # 2 x 64 fits the 160 samples
    assert c.value == Config(2, 64, "fp32")
    c.replicas.value = 4                      # 4 x 64 does not: the largest that does
    assert c.value == Config(4, 32, "fp32")
    assert dash.trainer.replicas == 4 and dash.trainer.batch_size == 16   # nothing built yet
    # one IPU: one replica; a batch size off the slider's list is offered too
    one = TrainingDashboard(trainer(batch_size=12), *data[:2]).controls
    assert one.replicas.options == (1,) and one.batch_size.options == (4, 8, 12, 16, 32, 64)
    # 40 samples: 4 replicas take at most 8 images each, 2 replicas 16 (the trainer's own
    # 4 x 16 is offered at first: fit says why it cannot run)
    few = TrainingDashboard(trainer(4), data[0][:40], data[1][:40]).controls
    assert few.batch_size.options == (4, 8, 16)
    few.replicas.value = 2
    assert few.batch_size.options == (4, 8, 16) and few.batch_size.value == 16
    few.replicas.value = 4
    assert few.batch_size.options == (4, 8) and few.batch_size.value == 8


def test_start_builds_the_selected_configuration_from_the_current_weights(data):
    old = trainer(4)
    dash = TrainingDashboard(old, *data, epochs=1)
    dash.fit()                                              # 2 steps of 4 x 16
    assert dash.trainer is old and len(old.history["loss"]) == 2
    weights = old.get_weights()
    assert "4 replicas x batch 16, fp32" in dash.table.value
    # the model object can lag the device (a fit interrupted by an exception does not copy
    # the weights back): the trainer's weights are the ones carried over
    old.model.reset_parameters(seed=1)

    dash.controls.replicas.value = 2
    dash.controls.batch_size.value = 8
    dash.controls.precision.value = "fp16"
    assert dash.trainer is old                             # changing them builds nothing yet
    statuses, built = [], []

    def on_status(change):
        statuses.append(change["new"])
        if change["new"].startswith("built the graph"):     # built, no step run yet
            built.append(dash.trainer.get_weights())

    dash.status.observe(on_status, "value")
    seen = []
    stop_after(dash, 2, seen)
    dash.start.click()
    assert dash.start.disabled and dash.controls.disabled     # at once
    dash.wait(120)
    assert not dash.running and dash.error is None
    new = dash.trainer
    assert new is not old and (new.replicas, new.batch_size, new.precision) == (2, 8, "fp16")
    assert new.model is old.model and new.device is old.device
    assert (new.lr, new.momentum, new.seed) == (0.1, 0.9, 0) and new.loss_scaling == 128.0
    assert new.pipeline is old.pipeline and new.recompute == old.recompute
    assert len(built) == 1 and built[0].keys() == weights.keys()
    for key in weights:
        np.testing.assert_array_equal(built[0][key], weights[key])
    assert statuses[0] == "building the graph for 2 replicas x batch 8, fp16..."
    assert "stopped" in statuses[-1]
    assert len(old.history["loss"]) == 2 and len(new.history["loss"]) == 2
    # the history plots go on across configurations; a marker where each one started
    assert list(dash.loss_source.data["step"]) == [1, 2, 3, 4]
    np.testing.assert_allclose(dash.loss_source.data["loss"][2:], new.history["loss"],
                               rtol=1e-6)
    assert dash.config_source.data == {"step": [0.5, 2.5], "label": ["4×16 fp32", "2×8 fp16"]}
    assert list(dash.test_source.data["step"]) == [2, 4]
    # controls disabled at every step, enabled again after
    assert seen == [(True, True), (True, True)]
    assert not dash.controls.disabled and not dash.start.disabled and dash.stop.disabled
    # the table compares the two configurations, from each one's step profile
    assert list(dash.configs) == [Config(4, 16, "fp32"), Config(2, 8, "fp16")]
    for t in (old, new):
        row = dash.configs[t.config]
        assert row["images_per_second"] == pytest.approx(t.history["images_per_second"][0])
        assert row["peak_tile_bytes"] == t.profile().memory_total.max()
        assert fmt_bytes(row["peak_tile_bytes"], 1) in dash.table.value
    assert dash.table.value.index("▶") > dash.table.value.index("4 replicas x batch 16")
    # where the cycles go, per configuration, and why the second differs from the first
    for t in (old, new):
        row = dash.configs[t.config]
        phases = t.profile().phase_totals()
        assert [row[p] for p in PARTS] == [phases[p] for p in PARTS]
        assert sum(row[p] for p in PARTS) == row["step_cycles"]
        assert fmt_bytes(row["ipu_link_bytes"], 1) in dash.table.value
    (sentence,) = dash.why()
    assert sentence.startswith("2×8 fp16 is ") and "per image than 4×16 fp32" in sentence
    assert html.escape(sentence) in dash.table.value
    assert "2 replicas x batch 8, fp16" in dash.profile.value
    # Start again without changing anything: the same trainer trains on
    stop_after(dash, 3)
    dash.start.click()
    dash.wait(120)
    assert dash.trainer is new and len(new.history["loss"]) == 2 + 3
    assert len(dash.config_source.data["step"]) == 2


def test_changing_controls_during_a_run_waits_for_the_next_start(data):
    tr = trainer()
    dash = TrainingDashboard(tr, *data[:2], epochs=1)

    def switch_precision(attr, old, new):        # set from code while the buttons are grey
        dash.controls.precision.value = "fp16"

    dash.loss_source.on_change("data", switch_precision)
    dash.fit()
    assert dash.trainer is tr and len(tr.history["loss"]) == 10     # the whole epoch, fp32
    dash.fit(0)                                  # builds the selected configuration only
    assert dash.trainer is not tr and dash.trainer.precision == "fp16"
    assert dash.trainer.history["loss"] == []


def test_a_configuration_that_does_not_fit_keeps_the_trainer(data):
    tr = trainer(tiles_per_ipu=1, batch_size=8, momentum=0.0)     # one tile
    dash = TrainingDashboard(tr, *data[:2])
    dash.controls.batch_size.value = 32                      # fp32: out of tile memory
    dash.start.click()
    dash.wait(120)
    assert isinstance(dash.error, TileMemoryError)
    assert dash.status.value.startswith("building the graph for 1 replica x batch 32, fp32...")
    assert "TileMemoryError" in dash.status.value
    assert dash.trainer is tr and tr.history["loss"] == []
    assert not dash.controls.disabled and not dash.start.disabled
    dash.controls.precision.value = "fp16"                   # half the bytes: it fits
    stop_after(dash, 1)
    dash.start.click()
    dash.wait(120)
    assert dash.error is None and dash.trainer.precision == "fp16"
    assert len(dash.trainer.history["loss"]) == 1 and list(dash.configs) == [
        Config(1, 32, "fp16", momentum=0.0)]


def test_a_pipelined_trainers_controls_leave_an_ipu_per_stage():
    """A 2-stage pipeline on a Bow-2000: 1 or 2 replicas (4 would leave no IPU for stage 2);
    batch sizes that split into its 4 micro-batches; Start rebuilds it pipelined."""
    import ipulab
    from ipulab import nn

    x, y, _, _ = ipulab.data.digits()
    tr = nn.Trainer(nn.default_cnn(), ipulab.devices.bow2000(tiles_per_ipu=8), batch_size=8,
                    lr=0.1, pipeline=[3], micro_batches=4)
    dash = TrainingDashboard(tr, x[:64], y[:64])
    c = dash.controls
    assert list(c.replicas.options) == [1, 2]
    assert all(b % 4 == 0 for b in c.batch_size.options)
    c.replicas.value = 2
    dash.fit(0)                                    # build the selected configuration only
    assert dash.trainer is not tr and dash.trainer.replicas == 2
    assert dash.trainer.pipeline == [3] and dash.trainer.micro_batches == 4


# --- why a configuration is faster or slower (viz.explain, from the profiles) ---------------
@pytest.fixture(scope="module")
def breakdowns():
    """One step's breakdown of five configurations of the course's CNN on a Bow-2000 cut to 16
    tiles per IPU, on the same 64 images."""
    x, y, _, _ = digits()
    configs = {"4×16": dict(replicas=4, batch_size=16),
               "2×32": dict(replicas=2, batch_size=32),
               "4×16 fp16": dict(replicas=4, batch_size=16, precision="fp16"),
               "pipeline": dict(replicas=1, batch_size=64, pipeline=[2, 3, 6], micro_batches=4),
               "pipeline+recompute": dict(replicas=1, batch_size=64, pipeline=[2, 3, 6],
                                          micro_batches=4, recompute=True)}
    out = {}
    for name, kw in configs.items():
        t = trainer(tiles_per_ipu=16, **kw) if kw["replicas"] > 1 else nn.Trainer(
            nn.default_cnn(), ipulab.devices.bow2000(tiles_per_ipu=16), lr=0.1, momentum=0.9,
            **kw)
        t.fit(x[:64], y[:64], shuffle=False)
        out[name] = step_breakdown(t.profile(), t.global_batch_size)
    return out


def test_breakdown_adds_up_to_the_step(breakdowns):
    for b in breakdowns.values():
        assert sum(b[p] for p in PARTS) == b["cycles"] and b["images"] == 64
    assert breakdowns["4×16"]["ipus_per_replica"] == 1
    assert breakdowns["2×32"]["ipus_per_replica"] == 2
    assert breakdowns["pipeline"]["ipus_per_replica"] == 4
    rows = dict(breakdown_rows(breakdowns["4×16"]))
    assert rows["cycles by part"] == f"{breakdowns['4×16']['cycles']:,} cycles"
    assert set(rows) >= {"  compute", "  on-chip exchange", "  IPU-Link exchange", "  sync",
                         "  host", "IPU-Link bytes per step"}


def test_a_replica_spanning_ipus_sends_its_own_tensors_over_the_links(breakdowns):
    b0, b1 = breakdowns["4×16"], breakdowns["2×32"]
    s = explain(b0, b1, "4×16", "2×32")
    assert b1["link_bytes"] > 4 * b0["link_bytes"]
    assert s.startswith("2×32 is ") and " slower per image than 4×16, mostly in IPU-Link " \
        "exchange" in s
    assert "each replica now spans 2 IPUs" in s and s.endswith(" per step).")
    back = explain(b1, b0, "2×32", "4×16")
    assert "faster" in back and "now fits on 1 IPU, so only the all-reduce crosses" in back


def test_the_pipeline_bubble(breakdowns):
    b0, b1 = breakdowns["4×16"], breakdowns["pipeline"]
    s = explain(b0, b1, "4×16", "pipeline")
    assert b1["idle"] > 0.3 > b0["idle"]
    assert "slower per image than 4×16, mostly in compute" in s
    assert f"IPUs now wait {b1['idle']:.0%} of the compute time" in s and "bubble" in s


def test_recompute_costs_the_forward_pass_again(breakdowns):
    b0, b1 = breakdowns["pipeline"], breakdowns["pipeline+recompute"]
    s = explain(b0, b1, "pipeline", "pipeline+recompute")
    assert b1["recompute_steps"] > 0 == b0["recompute_steps"]
    assert "slower per image than pipeline, mostly in compute" in s
    assert "more compute work: the forward pass runs again" in s


def test_fp16_names_half_precision(breakdowns):
    b0, b1 = breakdowns["4×16"], breakdowns["4×16 fp16"]
    s = explain(b0, b1, "4×16", "4×16 fp16")
    assert b1["half"] > 0.5 > b0["half"]
    assert "faster per image" in s and "now in half precision" in s and "2 bytes instead of 4" in s


def test_the_sentence_follows_the_numbers_not_the_option():
    """The same options with other measurements give another sentence: nothing is fixed text
    per option."""
    base = dict(cycles=1000, compute=500, exchange=200, inter_ipu_exchange=100, sync=100,
                host_exchange=100, images=64, link_bytes=1000, exchange_bytes=10000, replicas=4,
                ipus_per_replica=1, idle=0.0, work=5000, half=0.0, supersteps=40,
                recompute_steps=0)
    same = explain(base, dict(base), "a", "b")
    assert same == "b is about as fast per image as a (16 and 16 cycles per image)."
    more_sync = dict(base, sync=900, cycles=1800, supersteps=90)
    s = explain(base, more_sync, "a", "b")
    assert s.startswith("b is 1.8× slower per image than a, mostly in sync (2 → 14 cycles")
    assert "90 supersteps instead of 40" in s
    fewer_bytes = dict(base, exchange=50, exchange_bytes=5000, cycles=850)
    assert "moves 50% of the bytes between tiles" in explain(base, fewer_bytes, "a", "b")
