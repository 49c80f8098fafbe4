"""nn.TrainConfig: every training option in one place, checked, with what follows from it."""
import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import nn
from ipulab.errors import ConfigError, GraphError


def test_defaults_are_the_trainers():
    c = nn.TrainConfig()
    assert (c.replicas, c.batch_size, c.lr, c.momentum, c.precision, c.pipeline, c.recompute,
            c.seed) == (1, 16, 0.05, 0.0, "fp32", None, False, 0)
    assert (c.num_stages, c.micro_batches, c.global_batch_size, c.scale) == (1, 1, 16, 1.0)
    assert c.dtype == ipulab.poplar.FLOAT


def test_derived_values():
    c = nn.TrainConfig(replicas=2, batch_size=32, precision="fp16", pipeline=[3, 6])
    assert c.pipeline == (3, 6) and c.num_stages == 3 and c.micro_batches == 3
    assert not hasattr(c, "micro")          # one word, one meaning: micro_batches, micro_batch_size
    assert c.global_batch_size == 64 and c.scale == 128.0
    assert c.dtype == ipulab.poplar.HALF
    assert nn.TrainConfig(pipeline=4, batch_size=8).num_stages == 4
    c = nn.TrainConfig(pipeline=[2], micro_batches=8)
    assert (c.micro_batches, c.micro_batch_size) == (8, 2)      # the planner's words
    assert nn.TrainConfig(precision="fp16", loss_scaling=64).scale == 64.0


def test_a_replica_needs_an_ipu_per_stage():
    bow = ipulab.devices.bow2000(tiles_per_ipu=4).target
    assert nn.TrainConfig().replica_choices(bow) == [1, 2, 4]
    assert nn.TrainConfig(pipeline=[3]).replica_choices(bow) == [1, 2]
    assert nn.TrainConfig(pipeline=[2, 4, 6]).replica_choices(bow) == [1]
    assert nn.TrainConfig(replicas=None).resolve(bow).replicas == 4
    assert nn.TrainConfig(replicas=None, pipeline=[3]).resolve(bow).replicas == 2
    assert nn.TrainConfig(replicas=2).ipus_per_replica(bow) == 2
    nn.TrainConfig(replicas=2, pipeline=[3]).check(8, bow)
    with pytest.raises(GraphError, match="a pipeline of 3 stages needs 3 IPUs per replica, but "
                                         "each replica has 2"):
        nn.TrainConfig(replicas=2, pipeline=[3, 5]).check(8, bow)
    with pytest.raises(GraphError, match="pipeline=5 stages needs 5 IPUs per replica"):
        nn.TrainConfig(pipeline=5, batch_size=10).check(8, bow)


def test_the_default_run():
    c = nn.TrainConfig.default_run()
    assert (c.system, c.replicas, c.batch_size, c.lr, c.momentum, c.epochs) == \
        ("bow2000", None, 16, 0.1, 0.9, 5)
    assert c.device().target.num_ipus == 4
    assert nn.TrainConfig.default_run(epochs=2).epochs == 2
    with pytest.raises(GraphError, match="no system named"):
        nn.TrainConfig().device()


def test_frozen_replace_checks_again():
    c = nn.TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 1.0
    assert c.replace(lr=0.2).lr == 0.2 and c.lr == 0.05
    with pytest.raises(ConfigError, match="lr must be a positive number, not -1"):
        c.replace(lr=-1)
    assert hash(c) == hash(nn.TrainConfig()) and c == nn.TrainConfig()   # a dict key


@pytest.mark.parametrize("options,option,rule", [
    ({"replicas": 0}, "replicas", "must be an int >= 1"),
    ({"batch_size": 2.5}, "batch_size", "must be an int >= 1"),
    ({"epochs": 0}, "epochs", "must be an int >= 1"),
    ({"lr": 0}, "lr", "must be a positive number"),
    ({"lr": math.nan}, "lr", "must be a positive number"),
    ({"lr": math.inf}, "lr", "must be a positive number"),
    ({"momentum": 1.0}, "momentum", "must be in [0, 1)"),
    ({"precision": "bf16"}, "precision", "must be one of fp32, fp16"),
    ({"optimizer": "rmsprop"}, "optimizer", "must be one of sgd, adam, adamw, lamb"),
    ({"loss_scaling": 0}, "loss_scaling", "must be in (0, 65504)"),
    ({"system": "pod12"}, "system", "must be one of"),
    ({"pipeline": 0}, "pipeline", "must be an int >= 1"),
    ({"seed": -1}, "seed", "must be an int >= 0"),
    ({"tiles_per_ipu": 0}, "tiles_per_ipu", "must be an int >= 1"),
])
def test_each_option_is_checked(options, option, rule):
    with pytest.raises(ConfigError) as info:
        nn.TrainConfig(**options)
    e = info.value
    assert e.option == option and e.rule.startswith(rule)
    assert str(e).startswith(f"TrainConfig: {option} {rule}")


def test_pipeline_rules():
    with pytest.raises(GraphError, match="pipeline must be a list of layer indices"):
        nn.TrainConfig(pipeline="3")
    with pytest.raises(GraphError, match="micro_batches= goes with pipeline"):
        nn.TrainConfig(micro_batches=2)
    with pytest.raises(GraphError, match="batch_size 16 does not split into 3 micro-batches"):
        nn.TrainConfig(pipeline=[2], micro_batches=3)
    one = ipulab.devices.ipu("bow", tiles_per_ipu=4).target
    with pytest.raises(GraphError, match="increasing layer indices between 1 and 7"):
        nn.TrainConfig(pipeline=[3, 3]).check(8, ipulab.devices.bow2000(tiles_per_ipu=4).target)
    with pytest.raises(GraphError, match="needs 2 IPUs per replica, but each replica has 1"):
        nn.TrainConfig(pipeline=[3]).check(8, one)


def test_keywords_or_config_not_both():
    model = nn.default_cnn()
    dev = ipulab.devices.ipu("bow", tiles_per_ipu=4)
    t = nn.Trainer(model, dev, config=nn.TrainConfig(batch_size=8, lr=0.1))
    assert (t.batch_size, t.lr, t.config.lr) == (8, 0.1, 0.1)
    with pytest.raises(GraphError, match="not both .lr given with config="):
        nn.Trainer(model, dev, lr=0.2, config=nn.TrainConfig())
    with pytest.raises(GraphError, match="config must be an nn.TrainConfig"):
        nn.Trainer(model, dev, config={"lr": 0.1})
    t = nn.Trainer(model, config=nn.TrainConfig(system="ipu", tiles_per_ipu=4))
    assert t.device.target.num_tiles == 4                  # the config's system


POD = ipulab.devices.pod16(tiles_per_ipu=1).target      # room for 4 replicas x 4 stages


@settings(max_examples=60, deadline=None)
@given(replicas=st.sampled_from([1, 2, 4]), stages=st.integers(1, 4),
       batch=st.integers(1, 64), samples=st.integers(1, 300))
def test_batch_fits_is_the_rule_the_trainer_applies(replicas, stages, batch, samples):
    """batch_fits: a global batch within the samples that splits into the micro-batches,
    exactly when such a config can be made and fit() has a step to run."""
    cuts = list(range(1, stages))
    try:
        nn.TrainConfig(replicas=replicas, batch_size=batch, pipeline=cuts or None).check(8, POD)
        makes = True
    except GraphError:
        makes = False
    fits = nn.TrainConfig(pipeline=cuts or None).batch_fits(batch, samples, replicas)
    assert fits == (makes and replicas * batch <= samples)


def test_every_system_name_makes_a_device():
    for name in ipulab.devices.SYSTEM_NAMES:
        assert ipulab.devices.system(name, tiles_per_ipu=1).target.num_tiles >= 1
    assert ipulab.devices.system("ipu").target == ipulab.devices.ipu("bow").target
    with pytest.raises(GraphError, match="unknown system 'pod12'"):
        ipulab.devices.system("pod12")
