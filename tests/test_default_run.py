"""The default run (issue 5, "Must hold"): the default CNN on digits on a FULL Bow-2000
(4 IPUs, 5,888 tiles) with 4 replicas reaches >= 95 % test accuracy with the defaults of
`ipulab train`."""
import time

import pytest

import ipulab
from ipulab import cli, nn
from ipulab.cli import train as train_cli
from ipulab.data import digits

RUN = nn.TrainConfig.default_run().resolve(ipulab.devices.bow2000().target)


def test_cli_defaults_are_the_default_run():
    a = cli.build_parser().parse_args(["train"])
    assert train_cli.train_config(a) == nn.TrainConfig.default_run()
    # --replicas defaults to one per IPU: 4 on a Bow-2000
    assert a.replicas is None and RUN.replicas == 4


@pytest.mark.slow
def test_default_run_reaches_95_percent_on_a_full_bow2000():
    t0 = time.perf_counter()
    x_train, y_train, x_test, y_test = digits()
    device = ipulab.devices.bow2000()
    assert device.target.num_tiles == 5888
    tr = nn.Trainer(nn.default_cnn(), device, config=RUN)
    h = tr.fit(x_train, y_train, epochs=RUN.epochs)
    assert len(h["loss"]) == RUN.epochs * (len(x_train) // 64)
    accuracy, _ = tr.evaluate(x_test, y_test)
    print(f"default run: test accuracy {accuracy:.2%} in {time.perf_counter() - t0:.1f} s")
    assert accuracy >= 0.95
    prof = tr.profile()
    assert (prof.compute_cycles.reshape(4, -1).max(1) > 0).all()     # all 4 IPUs compute
    assert prof.inter_ipu_exchange_cycles.max() > 0                   # the all-reduce's links
    assert prof.memory_total.max() <= prof.bytes_per_tile
