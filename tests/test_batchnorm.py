"""popnn's batch normalisation on simulated tiles against torch's BatchNorm2d: training-mode
output and gradients, the running statistics' update, evaluation with running statistics,
and the misuse errors."""
import numpy as np
import pytest
import torch
from nn_helpers import LAYOUTS, Lab

import ipulab
from ipulab import popnn
from ipulab.errors import GraphError


@pytest.fixture(scope="module")
def dev():
    return ipulab.devices.ipu("bow", tiles_per_ipu=16)


def _torch_bn(x, gamma, beta, dy, momentum=0.1):
    kind = torch.nn.BatchNorm2d if x.ndim == 4 else torch.nn.BatchNorm1d
    bn = kind(x.shape[1], momentum=momentum)
    bn.weight.data, bn.bias.data = torch.tensor(gamma), torch.tensor(beta)
    bn.running_mean.data = torch.linspace(-1, 1, x.shape[1])
    bn.running_var.data = torch.linspace(0.5, 2, x.shape[1])
    xt = torch.tensor(x, requires_grad=True)
    yt = bn(xt)
    yt.backward(torch.tensor(dy))
    return bn, xt, yt


@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (2, 8, 3, 4), (3, 2, 1, 1), (5, 4, 7)])
@pytest.mark.parametrize("how", ["poplar", "chunks"])
def test_training_forward_backward_and_running_update_match_torch(dev, shape, how):
    rng = np.random.default_rng(sum(shape))
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(
        np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    lab = Lab(dev)
    tx, tg = lab.feed(x, how), lab.feed(gamma)
    rm = lab.feed(np.linspace(-1, 1, c).astype(np.float32))
    rv = lab.feed(np.linspace(0.5, 2, c).astype(np.float32))
    mean, var = popnn.bn.batch_norm_statistics(lab.g, tx, lab.seq)
    y, inv = popnn.batch_norm(lab.g, tx, tg, lab.feed(beta), mean, var, lab.seq, eps=1e-5)
    dx, dg, db = popnn.batch_norm_gradients(lab.g, tx, lab.feed(dy, how, 1), mean, inv, tg,
                                            lab.seq)
    popnn.batch_norm_running_update(lab.g, rm, rv, mean, var, popnn.bn.count(tx), 0.1,
                                    lab.seq)
    lab.fetch(y=y, dx=dx, dg=dg, db=db, rm=rm, rv=rv)
    out = lab.run()
    bn, xt, yt = _torch_bn(x, gamma, beta, dy)
    for got, want in ((out["y"], yt), (out["dx"], xt.grad), (out["dg"], bn.weight.grad),
                      (out["db"], bn.bias.grad), (out["rm"], bn.running_mean),
                      (out["rv"], bn.running_var)):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=2e-5, atol=2e-5)


def test_evaluation_uses_the_running_statistics_like_torch(dev):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 2, 2)).astype(np.float32)
    gamma, beta = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(
        np.float32)
    rm, rv = rng.standard_normal(4).astype(np.float32), rng.uniform(0.5, 2, 4).astype(np.float32)
    lab = Lab(dev)
    y, _ = popnn.batch_norm(lab.g, lab.feed(x), lab.feed(gamma), lab.feed(beta), lab.feed(rm),
                            lab.feed(rv), lab.seq)
    lab.fetch(y=y)
    bn = torch.nn.BatchNorm2d(4).eval()
    bn.weight.data, bn.bias.data = torch.tensor(gamma), torch.tensor(beta)
    bn.running_mean.data, bn.running_var.data = torch.tensor(rm), torch.tensor(rv)
    np.testing.assert_allclose(lab.run()["y"], bn(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_misuse_is_a_clear_error_naming_the_tensor(dev):
    lab = Lab(dev)
    x = lab.feed(np.ones((2, 3, 2, 2), np.float32))
    mean, var = popnn.bn.batch_norm_statistics(lab.g, x, lab.seq)
    with pytest.raises(GraphError, match=r"'feed1' must be \[3\]"):
        popnn.batch_norm(lab.g, x, lab.feed(np.ones(4, np.float32)), mean, mean, var, lab.seq)
    with pytest.raises(GraphError, match="eps must be a positive number"):
        popnn.batch_norm(lab.g, x, mean, mean, mean, var, lab.seq, eps=0)
    with pytest.raises(GraphError, match="must be \\[N, C, ...\\]"):
        popnn.bn.batch_norm_statistics(lab.g, lab.feed(np.ones(3, np.float32)), lab.seq)
    with pytest.raises(GraphError, match="takes FLOAT or HALF"):
        popnn.bn.batch_norm_statistics(lab.g, lab.feed(np.ones((2, 2), np.int32)), lab.seq)
    with pytest.raises(GraphError, match="at least 2 values per channel"):
        popnn.batch_norm_running_update(lab.g, mean, var, mean, var, 1, 0.1, lab.seq)


# --- the layer, trained by the Trainer --------------------------------------------------------
def _bn_net():
    from ipulab import nn
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))


def _torch_twin(weights):
    t = torch.nn
    net = t.Sequential(t.Conv2d(3, 4, 3, padding=1, bias=False), t.BatchNorm2d(4), t.ReLU(),
                       t.AdaptiveAvgPool2d(1), t.Flatten(), t.Linear(4, 5))
    net.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    return net


def _sgd_steps(net, x, y, steps, batch, lr=0.1, momentum=0.9):
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    losses = []
    for s in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            net(torch.tensor(x[s * batch:(s + 1) * batch])),
            torch.tensor(y[s * batch:(s + 1) * batch], dtype=torch.long))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("recompute", [False, True])      # recomputing updates them once
def test_batchnorm2d_trains_equal_to_torch_running_statistics_included(dev, recompute):
    from ipulab import nn
    rng = np.random.default_rng(5)
    x = rng.standard_normal((20, 3, 6, 6)).astype(np.float32)
    y = rng.integers(0, 5, 20).astype(np.int32)
    ours = _bn_net()
    ours.reset_parameters(3)
    weights = ours.state_dict()
    weights["1.weight"] = rng.uniform(0.5, 1.5, 4).astype(np.float32)   # not just ones
    assert list(weights) == list(_torch_twin(weights).state_dict())
    theirs = _torch_twin(weights)
    tr = nn.Trainer(ours, dev, batch_size=4, lr=0.1, momentum=0.9, recompute=recompute)
    tr.set_weights(weights)
    history = tr.fit(x, y, shuffle=False)
    np.testing.assert_allclose(history["loss"], _sgd_steps(theirs, x, y, 5, 4), rtol=2e-5)
    got = tr.get_weights()
    assert list(got) == list(theirs.state_dict())
    for key, want in theirs.state_dict().items():
        np.testing.assert_allclose(got[key], want.numpy(), rtol=1e-4, atol=2e-5, err_msg=key)
    assert got["1.num_batches_tracked"] == 5
    theirs.eval()          # evaluation normalises with the running statistics
    logits = theirs(torch.tensor(x[:8]))
    assert np.array_equal(tr.predict(x[:8]), logits.argmax(1).numpy())
    want_loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y[:8], dtype=torch.long))
    assert tr.evaluate(x[:8], y[:8]).loss == pytest.approx(want_loss.item(), rel=1e-5)


def test_batchnorm2d_misuse_names_the_layer(dev):
    from ipulab import nn
    with pytest.raises(GraphError, match=r"layer 1: BatchNorm2d\(5.*takes samples of shape "
                                         r"\(channels=5"):
        nn.Trainer(nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(5), nn.Flatten(),
                                 nn.Linear(4, 2)), dev, batch_size=2).fit(
            np.zeros((2, 3, 2, 2), np.float32), np.zeros(2, np.int32))
    one = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(GraphError, match=r"layer 1 \(BatchNorm2d\(4.*more than 1 value per "
                                         r"channel.*not 1"):
        nn.Trainer(one, dev, batch_size=1).fit(np.zeros((2, 3, 1, 1), np.float32),
                                               np.zeros(2, np.int32))
    with pytest.raises(GraphError, match=r"layer 1 \(BatchNorm2d\(4.*keeps running statistics"):
        nn.Trainer(_bn_net(), ipulab.devices.bow2000(tiles_per_ipu=16), batch_size=4,
                   pipeline=[2]).fit(np.zeros((4, 3, 4, 4), np.float32), np.zeros(4, np.int32))
    with pytest.raises(GraphError, match="momentum must be a number in"):
        nn.BatchNorm2d(4, momentum=2)
    with pytest.raises(GraphError, match="AdaptiveAvgPool2d.*at least 1x1"):
        nn.Sequential(nn.AdaptiveAvgPool2d(1)).shapes((3, 0, 2))


def test_half_inputs_keep_float_statistics_and_track_torch(dev):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 3, 4, 4)).astype(np.float16)
    dy = rng.standard_normal(x.shape).astype(np.float16)
    gamma, beta = np.full(3, 1.5, np.float16), np.full(3, 0.25, np.float16)
    lab = Lab(dev)
    tx, tg = lab.feed(x), lab.feed(gamma)
    mean, var = popnn.bn.batch_norm_statistics(lab.g, tx, lab.seq)
    y, inv = popnn.batch_norm(lab.g, tx, tg, lab.feed(beta), mean, var, lab.seq)
    dx, dg, db = popnn.batch_norm_gradients(lab.g, tx, lab.feed(dy), mean, inv, tg, lab.seq)
    assert (mean.dtype.name, y.dtype.name, dx.dtype.name, dg.dtype.name) == \
        ("FLOAT", "HALF", "HALF", "FLOAT")
    lab.fetch(y=y, dx=dx, dg=dg, db=db)
    out = lab.run()
    bn, xt, yt = _torch_bn(x.astype(np.float32), gamma.astype(np.float32),
                           beta.astype(np.float32), dy.astype(np.float32))
    for got, want in ((out["y"], yt), (out["dx"], xt.grad), (out["dg"], bn.weight.grad),
                      (out["db"], bn.bias.grad)):
        np.testing.assert_allclose(np.asarray(got, np.float32), want.detach().numpy(),
                                   rtol=4e-3, atol=4e-3)


def test_two_replicas_normalise_each_its_own_batch_and_keep_replica_0s_statistics():
    """Data parallel as torch's DistributedDataParallel without SyncBatchNorm: each replica
    normalises with its own batch's statistics, the gradients are averaged, and the running
    statistics read back are replica 0's (DDP broadcasts rank 0's buffers)."""
    from ipulab import nn
    rng = np.random.default_rng(11)
    B, steps = 4, 3
    x = rng.standard_normal((2 * B * steps, 3, 4, 4)).astype(np.float32)
    y = rng.integers(0, 5, 2 * B * steps).astype(np.int32)
    ours = _bn_net()
    tr = nn.Trainer(ours, ipulab.devices.bow2000(tiles_per_ipu=16), replicas=2, batch_size=B,
                    lr=0.1, momentum=0.9)
    net = _torch_twin(tr.get_weights())
    history = tr.fit(x, y, shuffle=False)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses, ce = [], torch.nn.functional.cross_entropy
    for s in range(steps):
        xs, ys = torch.tensor(x[s * 2 * B:(s + 1) * 2 * B]), torch.tensor(
            y[s * 2 * B:(s + 1) * 2 * B]).long()
        opt.zero_grad()
        other = {**dict(net.named_parameters()),
                 **{k: v.clone() for k, v in net.named_buffers()}}     # replica 1's buffers
        loss = (ce(net(xs[:B]), ys[:B]) +
                ce(torch.func.functional_call(net, other, (xs[B:],)), ys[B:])) / 2
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(history["loss"], losses, rtol=1e-5)
    got = tr.get_weights()
    for key, want in net.state_dict().items():
        np.testing.assert_allclose(got[key], want.numpy(), rtol=1e-4, atol=2e-5, err_msg=key)
