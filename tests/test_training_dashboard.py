"""Trainer.dashboard(): the live training dashboard, driven from code and by its buttons."""
import ipywidgets
import numpy as np
import pytest

import ipulab
from ipulab import nn
from ipulab.data import digits
from ipulab.errors import DataError
from ipulab.widgets import TrainingDashboard


@pytest.fixture(scope="module")
def data():
    x, y, xt, yt = digits()
    return x[:160], y[:160], xt[:40], yt[:40]


def trainer(replicas=1):
    dev = ipulab.devices.bow2000(tiles_per_ipu=8) if replicas > 1 else \
        ipulab.devices.ipu("bow", tiles_per_ipu=8)
    return nn.Trainer(nn.default_cnn(), dev, replicas=replicas, lr=0.1, momentum=0.9)


def test_dashboard_fit_updates_sources_and_profile(data):
    tr = trainer(4)
    dash = tr.dashboard(*data, epochs=2)
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
    assert not dash.start.disabled and dash.stop.disabled


def test_start_and_stop_buttons(data):
    tr = trainer()
    dash = tr.dashboard(*data[:2], epochs=3)
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
    dash = tr.dashboard()
    assert len(dash.x) == 1437 and len(dash.x_test) == 360
    with pytest.raises(DataError, match="both x and y"):
        tr.dashboard(y=np.zeros(3, int))
