"""The Trainer's optimizers (issue 20, item 3), run by codelets on the tiles.

Adam and AdamW against torch.optim from the same initial state_dict (the course's CNN and an
MLP, 10 steps on digits); LAMB against a float64 numpy reference written here from You et
al.'s formulas; each optimizer with its state off-chip, sharded over replicas (RTS, and RTS
off-chip), phased, pipelined, tensor-parallel and in fp16 against the plain one-IPU run; the
host handles of the state, a fresh start, and the misuse errors.

"Within fp32 rounding" below: ipulab and torch (or another mapping) sum the same products in
different orders, so gradients differ in their last bits; 10 steps of Adam at lr 0.01 move
each weight by up to ~0.1 and keep the two within 1e-5 (losses within 1e-5 relative)."""
import numpy as np
import pytest
from nn_reference import Reference

import ipulab
from ipulab import nn
from ipulab.errors import ConfigError, EngineError, GraphError

STEPS, BATCH, LR = 10, 16, 0.01


@pytest.fixture(scope="module")
def digits():
    x, y, _, _ = ipulab.data.digits()
    return x[:STEPS * BATCH], y[:STEPS * BATCH]


@pytest.fixture(scope="module")
def bow2000():
    """A Bow-2000 of 8 tiles per IPU (4 IPUs, one Streaming Memory)."""
    return ipulab.devices.bow2000(tiles_per_ipu=8)


def mlp():
    """Three Linear layers: enough weight tensors for 3 phases and a 2-stage pipeline."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32),
                         nn.ReLU(), nn.Linear(32, 10))


MODELS = {"cnn": nn.default_cnn, "mlp": mlp}


def train(model, device, digits, **options):
    """(losses, initial weights, final weights, trainer) of STEPS steps in order."""
    options.setdefault("batch_size", BATCH // options.get("replicas", 1))
    tr = nn.Trainer(model, device, seed=3, **options)
    w0 = tr.get_weights()
    h = tr.fit(*digits, shuffle=False)
    return np.array(h["loss"]), w0, tr.get_weights(), tr


def assert_same_bits(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    for k in b[2]:
        np.testing.assert_array_equal(a[2][k], b[2][k], err_msg=k)


def assert_close(a, b, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(a[0], b[0], rtol=rtol, atol=0)
    for k in b[2]:
        np.testing.assert_allclose(a[2][k], b[2][k], rtol=rtol, atol=atol, err_msg=k)


# --- Adam and AdamW against torch.optim ---------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def torch_model(torch, model, weights):
    """The same model in PyTorch, loaded with the same state_dict."""
    mirror = {nn.Flatten: lambda m: torch.nn.Flatten(), nn.ReLU: lambda m: torch.nn.ReLU(),
              nn.Linear: lambda m: torch.nn.Linear(m.in_features, m.out_features),
              nn.MaxPool2d: lambda m: torch.nn.MaxPool2d(m.kernel_size),
              nn.Conv2d: lambda m: torch.nn.Conv2d(m.in_channels, m.out_channels,
                                                   m.kernel_size, padding=m.padding)}
    t = torch.nn.Sequential(*(mirror[type(layer)](layer) for layer in model.layers))
    t.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    return t


def torch_train(torch, model, weights, digits, optimizer, **options):
    """(losses, final state_dict as numpy) of STEPS steps of torch.optim.<optimizer>."""
    t = torch_model(torch, model, weights)
    opt = getattr(torch.optim, optimizer)(t.parameters(), **options)
    x, y = digits
    losses = []
    for s in range(STEPS):
        xb = torch.from_numpy(x[s * BATCH:(s + 1) * BATCH])
        yb = torch.from_numpy(y[s * BATCH:(s + 1) * BATCH]).long()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(t(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), {k: v.detach().numpy() for k, v in t.state_dict().items()}


@pytest.mark.parametrize("model", ["cnn", "mlp"])
@pytest.mark.parametrize("optimizer,options", [
    ("adam", {}),
    ("adamw", {"weight_decay": 0.01}),
])
def test_adam_and_adamw_match_torch(digits, torch, model, optimizer, options):
    """10 steps from the same initial state_dict: losses and weights within fp32 rounding."""
    device = ipulab.devices.ipu("bow", tiles_per_ipu=16)
    losses, w0, w, tr = train(MODELS[model](), device, digits, optimizer=optimizer, lr=LR,
                              **options)
    ref_losses, ref = torch_train(torch, tr.model, w0, digits,
                                  {"adam": "Adam", "adamw": "AdamW"}[optimizer], lr=LR,
                                  **options)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=0)
    for k in w:
        moved = np.abs(ref[k] - w0[k]).max()
        assert moved > 0.02, k                         # every tensor went somewhere
        np.testing.assert_allclose(w[k], ref[k], rtol=0, atol=1e-5, err_msg=k)


def test_adam_l2_and_other_betas_match_torch(digits, torch):
    """Adam's weight_decay is L2 in the gradient; beta1 = 0.3 takes lerp's other form;
    eps is added after the bias-corrected square root (a large eps shows where)."""
    options = dict(lr=LR, betas=(0.3, 0.99), eps=1e-3, weight_decay=0.05)
    device = ipulab.devices.ipu("bow", tiles_per_ipu=16)
    losses, w0, w, tr = train(mlp(), device, digits, optimizer="adam", **options)
    ref_losses, ref = torch_train(torch, tr.model, w0, digits, "Adam", **options)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=0)
    for k in w:
        np.testing.assert_allclose(w[k], ref[k], rtol=0, atol=1e-5, err_msg=k)


# --- LAMB against the paper's formulas, in float64 --------------------------------------------
def lamb_reference(model, w0, digits, lr, weight_decay, betas=(0.9, 0.999), eps=1e-6):
    """LAMB (You et al. 2019, Algorithm 2, bias-corrected as Graphcore's BERT) over the numpy
    reference's float64 gradients: (losses, weights)."""
    ref = Reference(model, w0, lr)
    (b1, b2), x, y = betas, *digits
    m = {k: np.zeros_like(v) for k, v in ref.w.items()}
    v = {k: np.zeros_like(a) for k, a in ref.w.items()}
    losses = []
    for t in range(1, STEPS + 1):
        logits, caches = ref.forward(x[(t - 1) * BATCH:t * BATCH])
        loss, dlogits, _ = ref.loss(logits, y[(t - 1) * BATCH:t * BATCH])
        g = ref.backward(caches, dlogits)
        losses.append(loss)
        for k, w in ref.w.items():
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            u = (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + eps) + weight_decay * w
            w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(u)
            ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            ref.w[k] = w - lr * ratio * u
    return np.array(losses), ref.w


@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_lamb_matches_the_papers_formulas(digits, model):
    """10 steps with weight decay 0.01; the MLP's biases start at zero, where the trust ratio
    is 1 (||w|| = 0)."""
    device = ipulab.devices.ipu("bow", tiles_per_ipu=16)
    m = MODELS[model]()
    m.reset_parameters(3)
    if model == "mlp":
        m.load_state_dict({k: v * (not k.endswith("bias")) for k, v in m.state_dict().items()})
    losses, w0, w, tr = train(m, device, digits, optimizer="lamb", lr=0.02, weight_decay=0.01)
    ref_losses, ref = lamb_reference(tr.model, w0, digits, 0.02, 0.01)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=0)
    for k in w:
        assert np.abs(ref[k] - w0[k]).max() > 1e-3, k
        np.testing.assert_allclose(w[k], ref[k], rtol=0, atol=1e-6, err_msg=k)


# --- the same arithmetic on every mapping ---------------------------------------------------------
KINDS = {"adam": dict(optimizer="adam", lr=LR), "adamw": dict(optimizer="adamw", lr=LR),
         "lamb": dict(optimizer="lamb", lr=0.02, weight_decay=0.01)}


@pytest.fixture(scope="module")
def runs(digits, bow2000):
    """Each optimizer's runs, by (kind, mapping), made once."""
    cache = {}

    def run(kind, **mapping):
        key = (kind, repr(sorted(mapping.items())))
        if key not in cache:
            cache[key] = train(mlp(), bow2000, digits, **{**KINDS[kind], **mapping})
        return cache[key]
    return run


@pytest.mark.parametrize("kind", list(KINDS))
def test_off_chip_state_is_bit_identical(runs, kind):
    """m and v in Streaming Memory, loaded for the update and stored after it: the same bits,
    the traffic in the profile, less always-live tile memory."""
    plain, off = runs(kind), runs(kind, optimizer_state="off-chip")
    assert_same_bits(off, plain)
    tr, n = off[3], off[3].model.num_parameters()
    prof = tr.profile()
    assert prof.streaming_bytes == 2 * 2 * 4 * n          # m and v, loaded and stored
    assert [r.name for r in prof.steps if r.kind == "remote_copy"] == \
        [f"{kind}/m/load", f"{kind}/v/load", f"{kind}/m/store", f"{kind}/v/store"]
    for what in ("m", "v"):
        state = tr.engine.read_remote_buffer(f"{kind}/{what}")
        assert state.shape == (1, n) and np.abs(state).sum() > 0
    always = (lambda t: t.profile().liveness()["always_live"][0])
    assert always(tr) < always(plain[3])


@pytest.mark.parametrize("kind", list(KINDS))
def test_rts_shards_the_state(runs, kind):
    """2 replicas, weights and moments sharded: the plain run within fp32 rounding (the
    replicas sum the gradients in another order). Against 2 replicas without RTS: the same
    bits for Adam and AdamW (element-wise; a + b = b + a); LAMB sums each tensor's squares
    over the shards and all-reduces the partial sums, within fp32 rounding. Off-chip the
    same bits as on-chip."""
    plain, rts = runs(kind), runs(kind, replicas=2, rts=True)
    assert_close(rts, plain)
    replicated = runs(kind, replicas=2)
    if kind == "lamb":
        assert_close(rts, replicated)
    else:
        assert_same_bits(rts, replicated)
    assert_same_bits(runs(kind, replicas=2, rts=True, optimizer_state="off-chip"), rts)
    tr = rts[3]
    n = tr.model.num_parameters()
    assert tr.engine.read_tensor("read/weights/shard").shape == (2, -(-n // 2))
    names = {r.name for r in tr.profile().steps if r.kind == "cross_replica_copy"}
    assert any(name.startswith("lamb/norms/all_reduce") for name in names) == (kind == "lamb")


def test_lamb_rts_cuts_every_tensor_into_the_shards(runs):
    """4 replicas: each weight tensor is sharded on its own (the 10 biases of the last layer
    as 3 + 3 + 3 + 1 and 2 zeros), so a tensor's slice sits at the same place in every shard;
    the training is the plain run's within fp32 rounding."""
    plain, rts = runs("lamb"), runs("lamb", replicas=4, rts=True)
    assert_close(rts, plain)
    tr = rts[3]
    shards = tr.engine.read_tensor("read/weights/shard")
    sizes = [int(np.prod(s)) for s in tr.model.param_shapes().values()]
    chunks = [-(-n // 4) for n in sizes]
    assert shards.shape == (4, sum(chunks))
    assert chunks[-1] == 3 and not shards[3, -2:].any()        # the last bias's padding
    w = tr.get_weights()
    bias = w["5.bias"]
    np.testing.assert_array_equal(shards[:, -3:].ravel()[:10], bias)
    assert tr.sharded.from_shards(tr.sharded.to_shards(w)).keys() == w.keys()


@pytest.mark.parametrize("kind", list(KINDS))
def test_phased_state_streams_with_its_weights(runs, kind):
    """3 phases, the moments of each in Streaming Memory with its weights: the same bits as
    the plain run (the same maps on the same numbers, one update per phase); with RTS over 2
    replicas, within fp32 rounding."""
    phased = runs(kind, phases=3)
    assert_same_bits(phased, runs(kind))
    tr = phased[3]
    assert tr.config.state_off_chip
    for i, n in enumerate((64 * 32 + 32, 32 * 32 + 32, 32 * 10 + 10)):
        for what in ("m", "v"):
            assert tr.engine.read_remote_buffer(f"phase{i}/{kind}/{what}").shape == (1, n)
    assert_close(runs(kind, phases=3, replicas=2, rts=True), runs(kind))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("mapping", [
    dict(pipeline=[3], micro_batches=2),
    dict(tensor_parallel=2),
    dict(pipeline=[3], micro_batches=2, tensor_parallel=2),
], ids=["pipeline", "tensor_parallel", "pipeline+tensor_parallel"])
def test_pipeline_and_tensor_parallel(runs, kind, mapping):
    """The weights on several IPUs (the update where each lives; LAMB's norms reduce across
    IPUs): the plain run within fp32 rounding (micro-batches and shards sum in another
    order)."""
    assert_close(runs(kind, **mapping), runs(kind))


@pytest.mark.parametrize("kind", list(KINDS))
def test_fp16(digits, bow2000, runs, kind):
    """HALF gradients that carry the loss scale (128), float32 master weights and moments.
    With a large eps and weight decay the update is not scale-free, so a loss scale left in
    the gradient would show: the first step is fp32's within what half precision does to the
    gradients, and 10 steps follow fp32's losses. Off-chip and sharded (2 replicas): the same
    bits as on-chip and as 2 plain replicas."""
    options = {"eps": 1e-2, "weight_decay": 0.05}
    one_step = tuple(a[:BATCH] for a in digits)
    first = {p: train(mlp(), bow2000, one_step, precision=p, **{**KINDS[kind], **options})
             for p in ("fp32", "fp16")}
    for k, w in first["fp32"][2].items():
        moved = np.abs(w - first["fp32"][1][k]).max()
        np.testing.assert_allclose(first["fp16"][2][k], w, rtol=0, atol=0.02 * moved, err_msg=k)
    fp32, fp16 = runs(kind, **options), runs(kind, **options, precision="fp16")
    np.testing.assert_allclose(fp16[0], fp32[0], rtol=0, atol=2e-3)
    assert_same_bits(runs(kind, **options, precision="fp16", optimizer_state="off-chip"), fp16)
    rts = runs(kind, **options, precision="fp16", replicas=2, rts=True)
    replicated = runs(kind, **options, precision="fp16", replicas=2)
    if kind == "lamb":
        assert_close(rts, replicated)
    else:
        assert_same_bits(rts, replicated)


# --- the state's host handles and a fresh start ---------------------------------------------------
@pytest.mark.parametrize("kind,mapping", [
    ("adam", {}), ("adamw", dict(optimizer_state="off-chip")),
    ("lamb", dict(replicas=2, rts=True)), ("adam", dict(phases=2)),
])
def test_set_weights_starts_the_optimizer_again(digits, bow2000, kind, mapping):
    """set_weights zeroes the moments and the step count (on chip through write/<kind>/...,
    off chip in the remote buffers): training again from the first weights repeats the
    first run bit for bit."""
    tr = nn.Trainer(mlp(), bow2000, batch_size=BATCH // mapping.get("replicas", 1), seed=3,
                    **KINDS[kind], **mapping)
    w0 = tr.get_weights()
    x, y = (a[:4 * BATCH] for a in digits)
    first = tr.fit(x, y, shuffle=False)["loss"][:]
    after = tr.get_weights()
    tr.set_weights(w0)
    again = tr.fit(x, y, shuffle=False)["loss"][4:]
    assert again == first
    for k, w in tr.get_weights().items():
        np.testing.assert_array_equal(w, after[k])


def test_host_handles_follow_sgds_naming(bow2000):
    """On chip: write/<kind>/m, /v and /step (SGD's write/sgd/velocity as before); off chip
    the remote buffers <kind>/m and <kind>/v, the step count still on chip; phased, one set
    per phase."""
    def trainer(**options):
        return nn.Trainer(mlp(), bow2000, batch_size=8, input_shape=(1, 8, 8), **options)

    n = mlp().num_parameters()
    zeros = np.zeros(n, np.float32)
    for kind in ("adam", "adamw", "lamb"):
        e = trainer(optimizer=kind).engine
        for what in ("m", "v"):
            e.write_tensor(f"write/{kind}/{what}", zeros)
        e.write_tensor(f"write/{kind}/step", np.zeros(1, np.float32))
    e = trainer(momentum=0.9).engine
    e.write_tensor("write/sgd/velocity", zeros)
    tr = trainer(optimizer="adam", optimizer_state="off-chip")
    assert sorted(b.name for b in tr.optimizer.state_buffers) == ["adam/m", "adam/v"]
    assert list(tr.optimizer.state_tensors) == ["adam/step"]
    with pytest.raises(EngineError):
        tr.engine.write_tensor("write/adam/m", zeros)
    tr = trainer(optimizer="lamb", phases=2)
    assert sorted(b.name for b in tr.optimizer.state_buffers) == \
        ["phase0/lamb/m", "phase0/lamb/v", "phase1/lamb/m", "phase1/lamb/v"]
    assert sorted(tr.optimizer.state_tensors) == ["phase0/lamb/step", "phase1/lamb/step"]


def test_the_update_in_the_profile(runs):
    """Adam: the moments and the step count in one superstep, the two bias corrections in
    another (one tile), then the update; LAMB: u, the norms side by side, the trust ratios,
    the per-tensor updates side by side."""
    names = (lambda kind: [r.name for r in runs(kind)[3].profile().steps
                           if r.kind == "execute" and r.name.startswith(kind)])
    assert names("adam") == ["adam/moments/0", "adam/bias_correction/0", "adam/update"]
    lamb = names("lamb")
    assert lamb[:3] == ["lamb/moments/0", "lamb/bias_correction/0", "lamb/u"]
    assert lamb[-2:] == ["lamb/trust_ratio", "lamb/update/0"]
    assert set(lamb[3:-2]) <= {"lamb/norms/0", "lamb/norms/1"}


# --- options and their errors -------------------------------------------------------------------
def test_defaults_as_torch_optim():
    assert nn.TrainConfig(optimizer="adam").betas is None        # None: the kind's default
    adam = nn.optim.create(nn.TrainConfig(optimizer="adam"))
    assert (adam.betas, adam.eps, adam.weight_decay) == ((0.9, 0.999), 1e-8, 0.0)
    adamw = nn.optim.create(nn.TrainConfig(optimizer="adamw", lr=1e-3))
    assert (adamw.lr, adamw.weight_decay) == (1e-3, 0.01)
    lamb = nn.optim.create(nn.TrainConfig(optimizer="lamb", betas=[0.8, 0.9]))
    assert (lamb.betas, lamb.eps, lamb.weight_decay) == ((0.8, 0.9), 1e-6, 0.0)
    assert nn.TrainConfig(optimizer="lamb", betas=[0.8, 0.9]).betas == (0.8, 0.9)   # hashable
    assert isinstance(nn.optim.create(nn.TrainConfig(momentum=0.9)), nn.SGD)
    assert repr(adamw) == "AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01)"
    assert nn.OPTIMIZERS == ("sgd", "adam", "adamw", "lamb") == tuple(nn.optim.KINDS)


def test_state_per_parameter_for_the_planner():
    assert nn.SGD.state_per_parameter == 1 and nn.SGD(0.1).state_per_parameter == 0
    assert nn.Adam.state_per_parameter == nn.AdamW.state_per_parameter == \
        nn.LAMB.state_per_parameter == 2
    assert [nn.TrainConfig(optimizer=k).state_per_parameter for k in nn.OPTIMIZERS] == \
        [0, 2, 2, 2]
    assert nn.TrainConfig(momentum=0.9).state_per_parameter == 1
    # state to put off chip: Adam always has some, SGD only with momentum
    assert nn.TrainConfig(optimizer="adam", optimizer_state="off-chip").state_off_chip
    assert nn.TrainConfig(optimizer="lamb", phases=2).state_off_chip
    assert not nn.TrainConfig(optimizer_state="off-chip").state_off_chip


@pytest.mark.parametrize("options,option,rule", [
    ({"optimizer": "rmsprop"}, "optimizer", "must be one of sgd, adam, adamw, lamb"),
    ({"optimizer": "adam", "betas": (0.9, 1.0)}, "betas", "must be two numbers in [0, 1)"),
    ({"optimizer": "adam", "betas": (-0.1, 0.9)}, "betas", "must be two numbers in [0, 1)"),
    ({"optimizer": "adam", "betas": (0.9,)}, "betas", "must be two numbers in [0, 1)"),
    ({"optimizer": "adam", "betas": 0.9}, "betas", "must be two numbers in [0, 1)"),
    ({"optimizer": "lamb", "betas": (0.9, float("nan"))}, "betas", "must be two numbers"),
    ({"optimizer": "adam", "eps": 0}, "eps", "must be a positive number"),
    ({"optimizer": "adamw", "eps": -1e-8}, "eps", "must be a positive number"),
    ({"optimizer": "adamw", "weight_decay": -0.01}, "weight_decay", "must be a number >= 0"),
    ({"weight_decay": float("inf")}, "weight_decay", "must be a number >= 0"),
    ({"optimizer": "adam", "momentum": 0.9}, "momentum",
     "must be 0 with optimizer='adam' (SGD's; adam has betas)"),
    ({"betas": (0.9, 0.99)}, "betas", "must be None with optimizer='sgd'"),
    ({"momentum": 0.9, "eps": 1e-8}, "eps", "must be None with optimizer='sgd'"),
])
def test_bad_options_are_one_config_error_naming_the_option(options, option, rule):
    with pytest.raises(ConfigError) as info:
        nn.TrainConfig(**options)
    assert info.value.option == option and info.value.rule.startswith(rule)
    assert str(info.value).startswith(f"TrainConfig: {option} {rule}")
    with pytest.raises(ConfigError, match=f"TrainConfig: {option} "):    # the same keywords
        nn.Trainer(mlp(), ipulab.devices.ipu("bow", tiles_per_ipu=4), **options)


def test_the_classes_check_their_own_arguments(bow2000):
    with pytest.raises(GraphError, match=r"Adam: lr must be a positive number, not -1"):
        nn.Adam(lr=-1)
    with pytest.raises(GraphError, match=r"AdamW: betas\[1\] must be in \[0, 1\), not 1"):
        nn.AdamW(betas=(0.9, 1))
    with pytest.raises(GraphError, match=r"LAMB: betas must be two numbers"):
        nn.LAMB(betas="ab")
    with pytest.raises(GraphError, match=r"LAMB: eps must be a positive number, not 0"):
        nn.LAMB(eps=0)
    with pytest.raises(GraphError, match=r"SGD: weight_decay must be a number >= 0"):
        nn.SGD(0.1, weight_decay=-1)
    from ipulab import poplar
    g = poplar.Graph(bow2000.target)
    w = g.add_variable(poplar.FLOAT, [10], "w")
    ipulab.poputil.map_tensor_linearly(g, w)
    seq = poplar.program.Sequence()
    with pytest.raises(GraphError, match=r"LAMB: the update needs the elements of each weight "
                                         r"tensor \(sizes=, summing to 10\), not \[4\]"):
        nn.LAMB().build(g, w, g.clone(w, "g"), seq, sizes=[4])
    with pytest.raises(GraphError, match=r"Adam: weights \[10\] and gradients \[5\] differ"):
        nn.Adam().build(g, w, w[:5], seq)
