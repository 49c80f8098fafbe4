"""Disaggregated hosts (Radium): the IPU step comes from a simulated nn.Trainer profile, the host
and network times from the pool; the slowest of the three bounds the step, with the numbers."""
import math

import pytest

from ipulab import data, devices, nn
from ipulab.errors import VipuError
from ipulab.vipu.hosts import HOST_SECONDS_PER_SAMPLE, HostPool, batch_bytes, input_plan


@pytest.fixture(scope="module")
def trainer():
    x, y, _, _ = data.digits()
    t = nn.Trainer(nn.default_cnn(), devices.ipu("bow", tiles_per_ipu=16), batch_size=16)
    t.fit(x[:32], y[:32], epochs=1, shuffle=False)
    return t


def test_a_jpeg_pipeline_on_a_few_cores_is_host_bound(trainer):
    pool = HostPool(hosts=1, cores_per_host=8, ipus=1)
    plan = input_plan(trainer, pool)
    assert plan.ipu_seconds == trainer.profile().total_seconds > 0
    assert plan.host_seconds == pytest.approx(16 * HOST_SECONDS_PER_SAMPLE["jpeg-224"] / 8)
    assert plan.batch_bytes == 16 * (64 * 4 + 4) == batch_bytes(trainer)
    assert plan.network_seconds == pytest.approx(plan.batch_bytes / 12.5e9)
    assert plan.bound == "host CPU" and plan.step_seconds == plan.host_seconds
    assert plan.ipu_busy == pytest.approx(plan.ipu_seconds / plan.host_seconds)
    assert plan.cores_needed == math.ceil(16 * 10e-3 / plan.ipu_seconds)
    text = str(plan)
    assert "host CPU-bound" in text and "8 cores : 1 IPU" in text and "cores would" in text


def test_enough_cores_make_it_ipu_bound_and_a_slow_link_makes_it_network_bound(trainer):
    light = 20e-6                                    # a pipeline of 20 µs per sample per core
    need = input_plan(trainer, HostPool(1, 1, 1), light).cores_needed
    assert need > 1
    assert input_plan(trainer, HostPool(1, need, 1), light).bound == "IPU"
    assert input_plan(trainer, HostPool(1, need - 1, 1), light).bound == "host CPU"
    assert "IPU-bound: the hosts keep up" in str(input_plan(trainer, HostPool(1, need, 1), light))
    slow = HostPool(1, 64, 1, link_bytes_per_second=1e6)
    plan = input_plan(trainer, slow, 0.0)
    assert plan.bound == "RoCE" and plan.step_seconds == pytest.approx(plan.batch_bytes / 1e6)


def test_pools_by_ratio():
    pool = HostPool.with_ratio(16, cores_per_ipu=6, cores_per_host=32)
    assert (pool.hosts, pool.cores, pool.ratio) == (3, 96, "6 cores : 1 IPU")
    assert HostPool.with_ratio(4, 2).hosts == 1
    with pytest.raises(VipuError, match="12 cores is not a whole number of 8-core hosts"):
        HostPool.with_ratio(4, 3)


@pytest.mark.parametrize("kwargs, words", [
    (dict(hosts=0, cores_per_host=8, ipus=1), "hosts must be a whole number >= 1"),
    (dict(hosts=1, cores_per_host=2.5, ipus=1), "cores_per_host"),
    (dict(hosts=1, cores_per_host=8, ipus=1, link_bytes_per_second=0), "link_bytes"),
])
def test_bad_pools(kwargs, words):
    with pytest.raises(VipuError, match=words):
        HostPool(**kwargs)


def test_bad_plans(trainer):
    with pytest.raises(VipuError, match="unknown input pipeline 'png'"):
        input_plan(trainer, HostPool(1, 8, 1), "png")
    with pytest.raises(VipuError, match="runs on 1 IPU"):
        input_plan(trainer, HostPool(1, 8, 4))
    with pytest.raises(VipuError, match=">= 0"):
        input_plan(trainer, HostPool(1, 8, 1), -1.0)
