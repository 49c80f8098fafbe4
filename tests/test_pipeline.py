"""Pipelined (GPipe) and recomputed training: the same losses as the numpy reference, the
stages on their own IPUs working in the same supersteps, activations recomputed exactly."""
import re

import numpy as np
import pytest
from nn_reference import Reference

import ipulab
from ipulab import nn
from ipulab.errors import TileMemoryError
from ipulab.poplar import FLOAT, Graph
from ipulab.poplar import program as prog
from ipulab.poplar import parallel


@pytest.fixture(scope="module")
def digits():
    return ipulab.data.digits()


@pytest.fixture(scope="module")
def bow2000():
    """A Bow-2000 with 16 tiles per IPU: quick, and still 4 IPUs joined by IPU-Links."""
    return ipulab.devices.bow2000(tiles_per_ipu=16)


def reference(model, weights, x, y, steps, batch, lr, momentum):
    ref = Reference(model, weights, lr, momentum)
    out = [ref.step(x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch])
           for s in range(steps)]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out]), ref


def dropout_cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


# --- the step matches numpy -------------------------------------------------------------------
@pytest.mark.parametrize("micro_batches, momentum, recompute", [
    (4, 0.0, False), (2, 0.9, False), (8, 0.9, True)])
def test_4_stage_pipeline_matches_the_numpy_reference(digits, bow2000, micro_batches,
                                                      momentum, recompute):
    """default_cnn cut into 4 stages (conv | pool | conv, pool | linear), one per IPU: 20
    steps give the reference's losses, correct counts and weights."""
    x, y = digits[0][:320], digits[1][:320]
    model = nn.default_cnn()
    tr = nn.Trainer(model, bow2000, batch_size=16, lr=0.1, momentum=momentum, seed=5,
                    pipeline=[2, 3, 6], micro_batches=micro_batches, recompute=recompute)
    w0 = tr.get_weights()
    h = tr.fit(x, y, epochs=1, shuffle=False)
    losses, correct, ref = reference(model, w0, x, y, 20, 16, 0.1, momentum)
    np.testing.assert_allclose(h["loss"], losses, rtol=1e-5, atol=0)
    np.testing.assert_array_equal(np.array(h["accuracy"]) * 16, correct)
    w = tr.get_weights()
    for k in w0:
        np.testing.assert_allclose(w[k], ref.w[k], rtol=1e-4, atol=1e-5, err_msg=k)
    # evaluation runs the stages one after another on the whole batch
    x_te, y_te = digits[2][:40], digits[3][:40]
    logits, _ = Reference(model, w, 0.1).forward(x_te, train=False)
    np.testing.assert_array_equal(tr.predict(x_te), logits.argmax(1))
    assert tr.evaluate(x_te, y_te).loss == pytest.approx(Reference.loss(logits, y_te)[0],
                                                         rel=1e-5)


def test_pipeline_with_replicas_matches_the_global_batch(digits, bow2000):
    """2 replicas x 2 stages fill the Bow-2000: the loss is the mean over both replicas'
    batches, as one model trained on 32."""
    x, y = digits[0][:10 * 32], digits[1][:10 * 32]
    model = nn.default_cnn()
    tr = nn.Trainer(model, bow2000, replicas=2, batch_size=16, lr=0.1, seed=2,
                    pipeline=[3], micro_batches=4)
    w0 = tr.get_weights()
    h = tr.fit(x, y, epochs=1, shuffle=False)
    losses, correct, _ = reference(model, w0, x, y, 10, 32, 0.1, 0.0)
    np.testing.assert_allclose(h["loss"], losses, rtol=1e-5, atol=0)
    np.testing.assert_array_equal(np.array(h["accuracy"]) * 32, correct)
    prof = tr.profile()
    assert (prof.compute_cycles.reshape(4, -1).max(1) > 0).all()      # all 4 IPUs work


@pytest.mark.parametrize("pipeline", [None, [3]])
def test_recompute_gives_bit_identical_training(digits, bow2000, pipeline):
    """Recomputing activations (Dropout masks included) changes memory and time, not one bit
    of the results."""
    x, y = digits[0][:96], digits[1][:96]
    runs = []
    for recompute in (False, True):
        model = dropout_cnn()
        model.reset_parameters(1)
        tr = nn.Trainer(model, bow2000, batch_size=16, lr=0.1, momentum=0.9, seed=7,
                        pipeline=pipeline, micro_batches=None if pipeline is None else 4,
                        recompute=recompute)
        h = tr.fit(x, y, epochs=1, shuffle=False)
        runs.append((h["loss"], tr.get_weights(), tr.profile()))
    (l0, w0, p0), (l1, w1, p1) = runs
    assert l0 == l1
    for k in w0:
        np.testing.assert_array_equal(w0[k], w1[k])
    executes = [len([s for s in p.steps if s.kind == "execute"]) for p in (p0, p1)]
    assert executes[1] > executes[0]                     # the blocks' forward steps again
    if pipeline is None:                                 # (pipelined steps bear slot names)
        assert any(s.name.startswith("recompute/") for s in p1.steps)
        assert not any(s.name.startswith("recompute/") for s in p0.steps)
    assert p1.total_cycles > p0.total_cycles             # the forward work is done twice


def test_dropout_masks_differ_per_micro_batch(digits, bow2000):
    """Each micro-batch draws its own Dropout mask: a pipelined step equals the plain step
    only in distribution, not bit for bit, and the loss still falls."""
    x, y = digits[0][:320], digits[1][:320]
    model = dropout_cnn()
    tr = nn.Trainer(model, bow2000, batch_size=16, lr=0.1, momentum=0.9, seed=7,
                    pipeline=[3], micro_batches=4)
    h = tr.fit(x, y, epochs=2, shuffle=True)
    assert np.mean(h["loss"][-10:]) < np.mean(h["loss"][:10])


# --- what the profile shows -------------------------------------------------------------------
def test_stages_share_supersteps_and_talk_over_ipu_links(digits, bow2000):
    tr = nn.Trainer(nn.default_cnn(), bow2000, batch_size=16, lr=0.1, pipeline=[2, 3, 6],
                    micro_batches=4)
    tr.fit(digits[0][:16], digits[1][:16], epochs=1)
    prof = tr.profile()
    tpi = prof.tiles_per_ipu
    busy = [(r.name, (cyc.reshape(4, tpi).max(1) > 0).sum())
            for r in prof.steps for kind, cyc in r.phases if kind == "compute"]
    # in the middle of the forward phase all 4 stages compute in one superstep
    assert max(n for name, n in busy if name.startswith("pipeline forward 3")) == 4
    assert max(n for name, n in busy if name.startswith("pipeline backward 3")) == 4
    # activations forward and gradients back cross the IPU-Links
    assert prof.inter_ipu_exchange_cycles.max() > 0
    names = [r.name for r in prof.steps]
    assert "mb0: stage 0 to stage 1" in names                  # slot 0: one move alone
    assert "pipeline forward 3 to next IPU/copy 0" in names    # later: all moves at once
    # each stage's weights live on its own IPU
    for key, ipu in (("0.weight", 0), ("3.weight", 2), ("7.weight", 3)):
        weight = tr.graph._state.handles[f"write/{key}"][1]
        tiles = [t for t, regions in enumerate(tr.graph.get_tile_mapping(weight)) if regions]
        assert tiles and all(t // tpi == ipu for t in tiles), key


# --- the parallel() primitive ---------------------------------------------------------------
def test_parallel_zips_compute_sets_and_copies():
    """Two independent (double, then copy) programs on different tiles become one compute
    set and one copy, computing what they computed apart."""
    from ipulab import popops
    from ipulab.popops.expr import _1

    dev = ipulab.devices.ipu("bow", tiles_per_ipu=4)
    g = Graph(dev.target)
    progs = []
    for name, tile in (("a", 0), ("b", 2)):
        src, dst = g.add_variable(FLOAT, [8], name), g.add_variable(FLOAT, [8], name + "2")
        g.set_tile_mapping(src, tile)
        g.set_tile_mapping(dst, tile + 1)
        g.create_host_write(name, src)
        g.create_host_read(name + "2", dst)
        p = prog.Sequence()
        popops.map_in_place(g, _1 * 2.0, [src], p)
        p.add(prog.Copy(src, dst))
        progs.append(p)
    both = parallel(g, progs, "both")
    assert [type(p).__name__ for p in both.programs] == ["Execute", "Copy"]
    e = ipulab.poplar.Engine(g, both)
    e.load(dev)
    e.write_tensor("a", np.arange(8, dtype=np.float32))
    e.write_tensor("b", np.full(8, 3, np.float32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("a2"), 2 * np.arange(8))
    np.testing.assert_array_equal(e.read_tensor("b2"), np.full(8, 6))
    steps = e.profile().steps
    assert [r.kind for r in steps].count("execute") == 1
    compute = next(c for r in steps for k, c in r.phases if k == "compute")
    assert (compute[[0, 2]] > 0).all()                 # both tiles in one compute phase


def test_parallel_rejects_what_is_not_a_program():
    g = Graph(ipulab.devices.ipu("bow", tiles_per_ipu=4).target)
    with pytest.raises(ipulab.errors.ProgramError, match="parallel 'x': expected programs"):
        parallel(g, [prog.Sequence(), "nope"], "x")


# --- memory: too big for one IPU, recompute -----------------------------------------------------
def wide_mlp(width=576):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width),
                         nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def test_a_model_too_big_for_one_ipu_names_the_layer_and_fits_pipelined(digits, bow2000):
    one_ipu = ipulab.devices.ipu("bow", tiles_per_ipu=16)
    with pytest.raises(TileMemoryError) as info:
        nn.Trainer(wide_mlp(), one_ipu, batch_size=16, momentum=0.9, input_shape=(1, 8, 8))
    e = info.value
    assert re.match(r"layer (3|5) \(Linear\(in_features=576, out_features=576, bias=True\)\) "
                    r"does not fit: Out of memory on tile \d+", str(e))
    assert str(e).endswith("Or pipeline the model (pipeline=[...]: stages on more IPUs) or "
                           "recompute=True.") and e.needed > e.available
    assert e.profile is not None and e.profile.memory_total.max() == e.needed
    tr = nn.Trainer(wide_mlp(), bow2000, batch_size=16, lr=0.05, momentum=0.9,
                    pipeline=[3, 5, 7], micro_batches=4)
    h = tr.fit(digits[0][:64], digits[1][:64], shuffle=False)
    prof = tr.profile()
    assert (prof.memory_total <= prof.bytes_per_tile).all()
    assert (prof.memory_total.reshape(4, -1).max(1) > 0).all()    # every IPU holds a stage
    assert np.isfinite(h["loss"]).all()


def test_recompute_lowers_a_pipelines_peak_memory(digits, bow2000):
    """Without recompute a stage keeps every micro-batch's activations until its backward
    pass; with it, only each micro-batch's stage input."""
    profiles = []
    for recompute in (False, True):
        tr = nn.Trainer(nn.default_cnn(), bow2000, batch_size=128, lr=0.1, pipeline=[2, 3, 6],
                        micro_batches=8, recompute=recompute)
        tr.fit(digits[0][:128], digits[1][:128], shuffle=False)
        profiles.append(tr.profile())
    keep, again = profiles
    assert again.liveness()["not_always_live"].max() < 0.7 * keep.liveness()[
        "not_always_live"].max()
    assert again.memory_total.max() < 0.9 * keep.memory_total.max()
    assert again.total_cycles > keep.total_cycles


def test_a_number_of_stages_is_cut_by_work(digits, bow2000):
    """pipeline=4 balances the stages' multiply-adds and never separates a layer from the ReLU
    folded into it: the two convolutions (most of the work) land on different IPUs."""
    from ipulab.nn.pipeline import balanced_cuts

    model = nn.default_cnn()
    cuts = balanced_cuts(model, (1, 8, 8), 4)
    assert len(cuts) == 3 and 1 not in cuts and 4 not in cuts     # ReLUs stay folded
    assert any(0 < c <= 3 for c in cuts)                          # conv 0 | conv 3
    tr = nn.Trainer(model, bow2000, batch_size=16, lr=0.1, pipeline=4)
    assert tr.num_stages == 4 and tr.micro_batches == 4
    w0 = tr.get_weights()
    h = tr.fit(digits[0][:32], digits[1][:32], shuffle=False)
    assert tr.pipeline == cuts                                    # chosen when built
    losses, _, _ = reference(model, w0, digits[0][:32], digits[1][:32], 2, 16, 0.1, 0.0)
    np.testing.assert_allclose(h["loss"], losses, rtol=1e-5, atol=0)
    with pytest.raises(ipulab.errors.GraphError, match="pipeline=5 stages needs 5 IPUs"):
        nn.Trainer(nn.default_cnn(), bow2000, pipeline=5)
