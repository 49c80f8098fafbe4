"""Scale-out mechanisms of nn.Trainer (issue 13): optimizer state in Streaming Memory,
replicated tensor sharding, tensor parallelism and phased execution. Each gives the losses of
a plain single-IPU step (the numpy reference, 20 steps, 1e-5 relative), on cut-down targets."""
import numpy as np
import pytest
from nn_reference import Reference

import ipulab
from ipulab import nn
from ipulab.errors import ConfigError

STEPS = 20


@pytest.fixture(scope="module")
def digits():
    x, y, _, _ = ipulab.data.digits()
    return x, y


@pytest.fixture(scope="module")
def bow2000():
    """A Bow-2000 of 8 tiles per IPU: 4 IPUs, one machine's Streaming Memory."""
    return ipulab.devices.bow2000(tiles_per_ipu=8)


def small_cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 10))


def check_against_reference(trainer, digits, lr, momentum, steps=STEPS):
    """Train `steps` steps in order; the losses and correct counts are the numpy
    reference's on the global batch, and so are the weights after."""
    x, y = digits
    gb = trainer.global_batch_size
    model = trainer.model
    w0 = trainer.get_weights()
    h = trainer.fit(x[:steps * gb], y[:steps * gb], shuffle=False)
    ref = Reference(model, w0, lr, momentum)
    out = [ref.step(x[s * gb:(s + 1) * gb], y[s * gb:(s + 1) * gb]) for s in range(steps)]
    np.testing.assert_allclose(h["loss"], [o[0] for o in out], rtol=1e-5, atol=0)
    np.testing.assert_array_equal(np.round(np.array(h["accuracy"]) * gb), [o[1] for o in out])
    w = trainer.get_weights()
    for k in w0:
        np.testing.assert_allclose(w[k], ref.w[k], rtol=1e-4, atol=1e-5, err_msg=k)
    return h


# --- optimizer state off-chip -----------------------------------------------------------------
def test_off_chip_momentum_matches_the_reference(digits, bow2000):
    """Two replicas, momentum in each replica's remote buffer: the reference's training, the
    velocity readable in Streaming Memory, its traffic in the profile."""
    tr = nn.Trainer(small_cnn(), bow2000, replicas=2, batch_size=8, lr=0.1, momentum=0.9,
                    seed=1, optimizer_state="off-chip")
    check_against_reference(tr, digits, 0.1, 0.9)
    prof = tr.profile()
    n = tr.model.num_parameters()
    assert prof.streaming_bytes == 2 * 2 * 4 * n      # load + store, float, 2 replicas
    loads = [r for r in prof.steps if r.kind == "remote_copy"]
    assert [r.name for r in loads] == ["sgd/velocity/load", "sgd/velocity/store"]
    assert prof.streaming_cycles == sum(r.cycles for r in loads) > 0
    s = prof.step_summary()
    assert s["streaming_bytes"] == prof.streaming_bytes
    assert s["streaming_seconds"] == pytest.approx(prof.streaming_cycles / prof.clock_hz)
    d = prof.to_dict()
    assert (d["streaming_bytes"], d["streaming_cycles"]) == (prof.streaming_bytes,
                                                             prof.streaming_cycles)
    assert f"streaming memory {prof.streaming_bytes:,} B moved in" in prof.summary()
    v = tr.engine.read_remote_buffer("sgd/velocity")
    assert v.shape == (2, 1, n) and np.abs(v).sum() > 0
    np.testing.assert_array_equal(v[0], v[1])          # the replicas agree
    # the on-chip copy lives only around the update
    assert "sgd/velocity" in {row[0] for row in prof.not_always_live()}
    tr.set_weights(tr.get_weights())                    # momentum starts again from zero
    assert not tr.engine.read_remote_buffer("sgd/velocity").any()


def test_off_chip_state_saves_tile_memory_and_costs_streaming_time(digits, bow2000):
    """The same run with the state on-chip: the same bits, no Streaming Memory traffic; the
    off-chip step is slower by exactly its remote copies (the cost model overlaps nothing)
    and its always-live tile memory is smaller."""
    runs = {}
    for state in ("on-chip", "off-chip"):
        tr = nn.Trainer(small_cnn(), bow2000, batch_size=16, lr=0.1, momentum=0.9, seed=1,
                        optimizer_state=state)
        h = tr.fit(*(a[:64] for a in digits), shuffle=False)
        runs[state] = (h["loss"], tr.get_weights(), tr.profile())
    (l_on, w_on, p_on), (l_off, w_off, p_off) = runs["on-chip"], runs["off-chip"]
    assert l_on == l_off
    for k in w_on:
        np.testing.assert_array_equal(w_on[k], w_off[k])
    assert p_on.streaming_bytes == p_on.streaming_cycles == 0
    assert p_off.total_cycles == p_on.total_cycles + p_off.streaming_cycles
    always = (lambda p: p.liveness()["always_live"][0])
    assert always(p_off) < always(p_on)      # the velocity no longer holds tile memory


def test_off_chip_without_momentum_is_allowed_and_changes_nothing():
    c = nn.TrainConfig(optimizer_state="off-chip")
    assert not c.state_off_chip
    assert nn.TrainConfig(optimizer_state="off-chip", momentum=0.9).state_off_chip
    with pytest.raises(ConfigError, match="optimizer_state must be one of on-chip, off-chip"):
        nn.TrainConfig(optimizer_state="host")


# --- replicated tensor sharding -------------------------------------------------------------
def mlp(width=64):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10))


@pytest.mark.parametrize("state", ["on-chip", "off-chip"])
def test_rts_matches_the_reference(digits, bow2000, state):
    """4 replicas, 690 weights in shards of 173 (the last padded by 2): the reference's
    training; the gradients reduce-scattered and the weights all-gathered over the links."""
    tr = nn.Trainer(small_cnn(), bow2000, replicas=4, batch_size=4, lr=0.1, momentum=0.9,
                    seed=1, rts=True, optimizer_state=state)
    check_against_reference(tr, digits, 0.1, 0.9)
    shards = tr.engine.read_tensor("read/weights/shard")
    assert tr.model.num_parameters() == 690 and shards.shape == (4, 173)
    assert not shards[3, -2:].any()                     # the padding stays zero
    prof = tr.profile()
    names = {r.name.split("/")[0] for r in prof.steps if r.kind == "cross_replica_copy"}
    assert names == {"weights", "grads"}               # all-gather, reduce-scatter; no all-reduce
    if state == "off-chip":
        assert tr.engine.read_remote_buffer("sgd/velocity").shape == (4, 1, 173)
        assert prof.streaming_bytes == 2 * 4 * 4 * 173
    else:
        assert tr.optimizer.velocity.shape == (173,)   # the state is sharded too


def test_rts_keeps_less_always_live_memory(digits, bow2000):
    """Without RTS every replica keeps every weight and velocity for the whole step; with it
    only a quarter of them (its shards), the full weights only while gathered."""
    live = {}
    for rts in (False, True):
        tr = nn.Trainer(mlp(), bow2000, replicas=4, batch_size=4, lr=0.1, momentum=0.9,
                        seed=1, rts=rts)
        tr.fit(*(a[:64] for a in digits), shuffle=False)
        live[rts] = tr.profile().liveness()["always_live"][0]
    assert live[True] < 0.6 * live[False]


def test_rts_with_a_pipeline(digits, bow2000):
    """2 stages x 2 replicas with sharded weights (r x p = 4 IPUs)."""
    tr = nn.Trainer(small_cnn(), bow2000, replicas=2, batch_size=4, lr=0.1, momentum=0.9,
                    seed=2, rts=True, pipeline=[3], micro_batches=2)
    check_against_reference(tr, digits, 0.1, 0.9)


def test_rts_needs_replicas(bow2000):
    with pytest.raises(ConfigError, match="rts shards the weights across replicas: it needs "
                                          "replicas > 1"):
        nn.TrainConfig(rts=True)
    with pytest.raises(ConfigError, match="rts"):
        nn.Trainer(small_cnn(), ipulab.devices.ipu("bow", tiles_per_ipu=8), replicas=None,
                   rts=True)
    assert nn.TrainConfig(rts=True, replicas=None).resolve(bow2000.target).replicas == 4


# --- tensor parallelism ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pod16():
    """A Bow Pod16 of 4 tiles per IPU."""
    return ipulab.devices.pod(16, tiles_per_ipu=4)


def test_tensor_parallel_matches_the_reference(digits, bow2000):
    """t = 4 on a Bow-2000: the conv's 4 channels one per IPU, the classifier's 10 outputs
    3 + 3 + 2 + 2; every IPU computes, the activations cross the IPU-Links; with recompute."""
    tr = nn.Trainer(small_cnn(), bow2000, batch_size=4, lr=0.1, momentum=0.9, seed=1,
                    tensor_parallel=4, recompute=True)
    check_against_reference(tr, digits, 0.1, 0.9)
    assert nn.tensor_parallel.split_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    prof = tr.profile()
    tpi = bow2000.target.tiles_per_ipu
    per_ipu = np.zeros(4, int)
    for tile, n in prof.graph.variable_tiles("4.weight").items():
        per_ipu[tile // tpi] += n
    assert per_ipu.tolist() == [3 * 64, 3 * 64, 2 * 64, 2 * 64]      # rows 3 + 3 + 2 + 2
    assert (prof.compute_cycles.reshape(4, -1).max(1) > 0).all()
    assert prof.step_summary()["ipu_link_bytes"] > 0


def test_tensor_parallel_with_a_pipeline_and_replicas(digits, pod16):
    """t = 2 x p = 2 x r = 4 fills a Pod16: each stage's layers shared by 2 IPUs."""
    tr = nn.Trainer(small_cnn(), pod16, replicas=4, batch_size=4, lr=0.1, momentum=0.9,
                    seed=1, tensor_parallel=2, pipeline=[3], micro_batches=2)
    assert tr.config.replica_ipus == 4
    check_against_reference(tr, digits, 0.1, 0.9)
    assert (tr.profile().compute_cycles.reshape(16, -1).max(1) > 0).all()


def test_a_replica_needs_t_times_p_ipus(bow2000):
    bow = bow2000.target
    assert nn.TrainConfig(tensor_parallel=2).replica_choices(bow) == [1, 2]
    assert nn.TrainConfig(tensor_parallel=2, pipeline=[3]).replica_choices(bow) == [1]
    assert nn.TrainConfig(tensor_parallel=2, replicas=None).resolve(bow).replicas == 2
    nn.TrainConfig(tensor_parallel=2, replicas=2).check(5, bow)
    with pytest.raises(ConfigError, match=r"tensor_parallel x 2 pipeline stage\(s\) must fit "
                                          r"the 2 IPU\(s\) of a replica \(4 IPU\(s\) over 2 "
                                          r"replica\(s\); a replica needs t x p = 4\), not 2"):
        nn.TrainConfig(tensor_parallel=2, replicas=2, pipeline=[3]).check(5, bow)
    with pytest.raises(ConfigError, match="tensor_parallel must be an int >= 1"):
        nn.TrainConfig(tensor_parallel=0)


# --- phased execution ----------------------------------------------------------------------------
def wide_mlp(width=192):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width),
                         nn.ReLU(), nn.Linear(width, 10))


def test_a_model_too_big_for_one_ipu_trains_phased(digits):
    """On one IPU of a single tile the wide MLP does not fit (weights, gradients and momentum
    at once); in 3 phases, weights and momentum in Streaming Memory, it trains as the
    reference does, its traffic in the profile."""
    one_tile = ipulab.devices.ipu("bow", tiles_per_ipu=1)
    with pytest.raises(ipulab.errors.TileMemoryError, match="does not fit"):
        nn.Trainer(wide_mlp(), one_tile, batch_size=4, lr=0.05, momentum=0.9,
                   input_shape=(1, 8, 8))
    tr = nn.Trainer(wide_mlp(), one_tile, batch_size=4, lr=0.05, momentum=0.9, seed=3,
                    phases=3)
    assert tr.config.state_off_chip
    check_against_reference(tr, digits, 0.05, 0.9)
    prof = tr.profile()
    n = tr.model.num_parameters()
    # weights loaded twice (forward, backward) and stored once; velocity loaded and stored
    assert prof.streaming_bytes == 4 * n * (3 + 2)
    names = [r.name for r in prof.steps if r.kind == "remote_copy"]
    assert names[:3] == ["phase0/forward/load", "phase1/forward/load", "phase2/forward/load"]
    assert names[-1] == "phase0/store" and prof.streaming_cycles > 0
    assert prof.liveness()["peak_tile"].max() <= prof.bytes_per_tile
    stored = tr.engine.read_remote_buffer("phase1/weights")
    np.testing.assert_array_equal(stored[0], tr.get_weights()["3.weight"].ravel().tolist()
                                  + tr.get_weights()["3.bias"].tolist())


def test_phases_with_replicas_and_tensor_parallel(digits, bow2000):
    """phases x off-chip state x 2 replicas x t = 2, with recompute."""
    tr = nn.Trainer(mlp(), bow2000, replicas=2, batch_size=4, lr=0.1, momentum=0.9, seed=1,
                    phases=2, tensor_parallel=2, recompute=True, optimizer_state="off-chip")
    check_against_reference(tr, digits, 0.1, 0.9)
    assert [tr.engine.read_remote_buffer(f"phase{i}/weights").shape for i in (0, 1)] == \
        [(2, 1, 64 * 65), (2, 1, 10 * 65)]


def test_phases_are_cut_at_layers_with_weights():
    cut = (lambda k: nn.TrainConfig(phases=k).phase_spans(wide_mlp()))
    assert cut(1) is None
    assert cut(2) == [(0, 3), (3, 6)] and cut(3) == [(0, 3), (3, 5), (5, 6)]
    with pytest.raises(ConfigError, match="phases must be at most the model's 3 layers with "
                                          "weights"):
        cut(4)
    with pytest.raises(ConfigError, match="phases cuts the model's 6 layers: at most 6"):
        nn.TrainConfig(phases=7).check(6, ipulab.devices.ipu("bow", 4).target)
    with pytest.raises(ConfigError, match="does not combine with pipeline="):
        nn.TrainConfig(phases=2, pipeline=[3])


def test_phases_with_rts(digits, bow2000):
    """Phased and sharded (GPT-3's mapping, small): each replica streams its shard of a
    phase's weights and momentum, all-gathers the weights after loading them and
    reduce-scatters the gradients."""
    tr = nn.Trainer(mlp(), bow2000, replicas=4, batch_size=4, lr=0.1, momentum=0.9, seed=4,
                    phases=2, rts=True)
    check_against_reference(tr, digits, 0.1, 0.9)
    e, n0 = tr.engine, 64 * 65
    assert e.read_remote_buffer("phase0/weights").shape == (4, 1, n0 // 4)
    assert e.read_remote_buffer("phase1/weights").shape == (4, 1, 163)       # 650 -> 4 x 163
    assert e.read_remote_buffer("phase1/sgd/velocity").shape == (4, 1, 163)
    prof = tr.profile()
    names = {r.name.split("/")[1] for r in prof.steps if r.kind == "cross_replica_copy"}
    assert names == {"weights", "forward", "grads"}     # gathers (both passes), reduce-scatters
    # every replica streams a quarter of the weights (loaded twice, stored once) and momentum
    assert prof.streaming_bytes == 4 * 4 * (n0 // 4 + 163) * (3 + 2)


def test_the_options_are_trainer_keywords_and_config_fields(bow2000):
    cfg = nn.TrainConfig(replicas=2, rts=True, tensor_parallel=2, optimizer_state="off-chip",
                         momentum=0.9)
    tr = nn.Trainer(small_cnn(), bow2000, config=cfg)
    assert repr(tr).endswith("tensor_parallel=2, rts=True, optimizer_state='off-chip')")
    assert tr.config == nn.Trainer(small_cnn(), bow2000, replicas=2, rts=True, tensor_parallel=2,
                                   optimizer_state="off-chip", momentum=0.9).config
    with pytest.raises(ipulab.errors.GraphError, match=r"not both \(phases given"):
        nn.Trainer(small_cnn(), bow2000, config=cfg, phases=2)


def test_dropout_draws_the_same_masks_phased_and_sharded(digits, bow2000):
    """Dropout's masks follow the layer and the step, not the mapping: a plain trainer and a
    phased, tensor-parallel one with state off-chip give the same losses (the reference has
    no masks, so the plain trainer is the reference here)."""
    def dropout_cnn():
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Dropout(0.25), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    losses = []
    for kw in (dict(), dict(phases=2, tensor_parallel=2, optimizer_state="off-chip")):
        tr = nn.Trainer(dropout_cnn(), bow2000, batch_size=8, lr=0.1, momentum=0.9, seed=1,
                        **kw)
        losses.append(tr.fit(*(a[:160] for a in digits), shuffle=False)["loss"])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, atol=0)


def test_execution_phased_cuts_one_phase_per_layer_with_weights():
    """execution="phased" alone: the finest cut; phases=k still chooses k; bad names refused."""
    cfg = nn.TrainConfig(execution="phased")
    assert cfg.phased and cfg.phase_spans(wide_mlp()) == [(0, 3), (3, 5), (5, 6)]
    assert nn.TrainConfig(execution="phased", phases=2).phase_spans(wide_mlp()) == \
        [(0, 3), (3, 6)]
    assert not nn.TrainConfig().phased
    with pytest.raises(ConfigError, match="execution must be one of default, phased"):
        nn.TrainConfig(execution="streamed")
    with pytest.raises(ConfigError, match="does not combine with pipeline="):
        nn.TrainConfig(execution="phased", pipeline=2)
