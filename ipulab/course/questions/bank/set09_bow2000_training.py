"""Exercise set 09 · training on a Bow-2000: build a CNN from its description, predict the
bytes a data-parallel step sends over the IPU-Links, read a training step's profile layer by
layer, predict a pipeline's schedule, and choose the fastest way to train on a Bow-2000.

Every check trains with nn.Trainer on Bow IPUs cut down to 16 tiles (the chips, clocks, links
and syncs are full size), a step or two each: the numbers are the simulator's."""
import functools
import re

import numpy as np

from .... import data, devices, nn
from ....errors import IpuLabError, TileMemoryError
from ..messages import Fail, NotAnswered
from ..kit import call, grade_par, number, training_config
from ..registry import Par, exercise_set, question

exercise_set("ex09", "09_bow2000_training.ipynb", "Training on a Bow-2000",
             "Build a CNN from its description, predict what a data-parallel step sends over "
             "the IPU-Links, read a training step's profile layer by layer, predict a "
             "pipeline's schedule, and find the fastest way to train on a Bow-2000.",
             guide="09_bow2000_cnn_training.ipynb")

TILES_PER_IPU = 16      # small IPUs: a check builds and runs several trainers in seconds
SEED = 9


@functools.lru_cache(maxsize=None)
def _system(num_ipus: int):
    """A Bow-2000 (4 IPUs), a Bow Pod16 (16) or an IPUModel('bow') of num_ipus, small IPUs."""
    if num_ipus == 4:
        return devices.bow2000(tiles_per_ipu=TILES_PER_IPU)
    if num_ipus == 16:
        return devices.pod16(tiles_per_ipu=TILES_PER_IPU)
    model = devices.IPUModel("bow")
    model.num_ipus, model.tiles_per_ipu = num_ipus, TILES_PER_IPU
    return model.create_device()


def _train(model, dev, x, y, steps: int, weights=None, what: str = "", explain=str,
           config=None, **options):
    """A Trainer of `model` on `dev` (config, else lr 0.05 and no momentum with `options`)
    after `steps` steps over (x, y) in order, from `weights` if given; a configuration that
    fails becomes a Fail whose message starts with `what` (explain(error) says why)."""
    try:
        config = config or nn.TrainConfig(lr=0.05, seed=SEED, **options)
        t = nn.Trainer(model, dev, config=config)
        if weights is not None:
            t.set_weights(weights)
        n = steps * t.global_batch_size
        t.fit(x[:n], y[:n], shuffle=False)
    except TileMemoryError as e:
        raise Fail(f"{what}does not fit in tile memory: {e}") from None
    except IpuLabError as e:
        raise Fail(f"{what}could not be trained: {type(e).__name__}: {explain(e)}") from None
    return t


@functools.lru_cache(maxsize=None)
def _digits():
    """The training images and labels of data.digits(), read once."""
    x, y, _, _ = data.digits()
    return x, y


def _random_batch(shape, classes: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.random((n, *shape), dtype=np.float32),
            rng.integers(0, classes, n).astype(np.int64))


def _mlp(width: int, hidden: int = 1, dropout: float = 0.0):
    """Flatten, then `hidden` Linear+ReLU layers of `width`, (Dropout), Linear to 10 classes:
    samples of 1 x 8 x 8 (the digits)."""
    layers, features = [nn.Flatten()], 64
    for _ in range(hidden):
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(features, 10))


# --- 1 ---------------------------------------------------------------------------------------
CNN_CASES = ((1, 8, 8, 10), (3, 8, 12, 5), (2, 12, 4, 7))      # C, H, W, classes
CNN_REPLICAS, CNN_BATCH, CNN_STEPS = 4, 4, 2


def reference_cnn(input_shape, classes):
    """The network of ex09.cnn (used by the check; the statement describes it in words)."""
    c, h, w = input_shape
    return nn.Sequential(nn.Conv2d(c, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
                         nn.Flatten(), nn.Dropout(0.25),
                         nn.Linear(16 * (h // 4) * (w // 4), classes))


def _cnn_data(k: int):
    c, h, w, classes = CNN_CASES[k]
    return _random_batch((c, h, w), classes, CNN_STEPS * CNN_REPLICAS * CNN_BATCH, 900 + k)


@functools.lru_cache(maxsize=None)
def _cnn_reference(k: int):
    """(weights, losses) of the reference network of case k after CNN_STEPS steps."""
    c, h, w, classes = CNN_CASES[k]
    model = reference_cnn((c, h, w), classes)
    model.reset_parameters(SEED + k)
    weights = model.state_dict()
    t = _train(model, _system(4), *_cnn_data(k), CNN_STEPS, weights,
               replicas=CNN_REPLICAS, batch_size=CNN_BATCH)
    return weights, tuple(t.history["loss"])


def _layer_list(model) -> str:
    return ", ".join(type(layer).__name__ for layer in model)


def _check_structure(model, ref, sample, case: str) -> None:
    """The same layer types, the same shape after every layer, the same weights' shapes."""
    for i, (mine, theirs) in enumerate(zip(model, ref)):
        if type(mine) is not type(theirs):
            name = type(theirs).__name__
            article = "an" if name[0] in "AEIO" else "a"
            raise Fail(f"layer {i} is {mine!r}; the network has {article} {name} there.\n"
                       f"  Yours: {_layer_list(model)}\n  The network: {_layer_list(ref)}")
    if len(model) != len(ref):
        more = "more" if len(model) > len(ref) else "fewer"
        raise Fail(f"your model has {len(model)} layers, {more} than the network's {len(ref)}."
                   f"\n  Yours: {_layer_list(model)}\n  The network: {_layer_list(ref)}")
    want, shape = ref.shapes(sample), sample
    for i, layer in enumerate(model):
        try:
            shape = tuple(layer.output_shape(shape))
        except IpuLabError as e:
            sizes = (" Compute in_channels and in_features from input_shape: nothing may be "
                     "fixed for 8 x 8 digits." if isinstance(layer, (nn.Conv2d, nn.Linear))
                     else "")
            raise Fail(f"your model fails at layer {i}{case}: {e}.{sizes}") from None
        if shape != want[i + 1]:
            why = ""
            if isinstance(layer, nn.Conv2d) and shape[1:] != want[i + 1][1:]:
                why = (" A 3 x 3 convolution keeps the height and width only with padding=1 "
                       "('same' padding).")
            elif i == len(model) - 1:
                why = " The last layer gives one score per class: `classes` of them."
            raise Fail(f"after layer {i} ({layer!r}) one sample has shape {shape}; in the "
                       f"network it has {want[i + 1]}{case}.{why}")
    mine, theirs = model.param_shapes(), ref.param_shapes()
    for key, shape in theirs.items():
        if mine.get(key) != shape:
            raise Fail(f"weight {key!r} has shape {mine.get(key)}, the network's {shape}{case}: "
                       "check kernel_size and the channels.")


@question(
    "ex09.cnn", title="Build a CNN from its description", kind="graph",
    statement="""
Write `build_cnn(input_shape, classes)` returning an `nn.Sequential` of this network, for
samples of shape `input_shape = (C, H, W)` (H and W multiples of 4) and `classes` classes:

1. a 3 × 3 convolution to **8** channels that keeps H and W, a ReLU, a 2 × 2 **max** pooling;
2. a 3 × 3 convolution to **16** channels that keeps the size, a ReLU, a 2 × 2 **average**
   pooling;
3. flatten, dropout with p = 0.25, and a linear layer to `classes` scores.

Like `torch.nn.Sequential`, its `state_dict()` then has the keys `0.weight`, `0.bias`,
`3.weight`, `3.bias`, `8.weight`, `8.bias`. The check builds it for three input shapes,
compares the shape after every layer, and trains it for two steps on a Bow-2000 (4 replicas)
from the same weights as the reference network: the losses must agree.
""",
    hints=[
        "Every layer counts in the indices, also ReLU, pooling, Flatten and Dropout: nine "
        "layers, the weights at 0, 3 and 8. nn.Conv2d(in_channels, out_channels, kernel_size, "
        "padding=...) and nn.Linear(in_features, out_features) take PyTorch's arguments.",
        "The first convolution takes C input channels. padding=1 keeps H x W for a 3 x 3 "
        "kernel; each 2 x 2 pooling halves H and W, so Flatten gives 16 * (H // 4) * (W // 4) "
        "features. model.shapes(input_shape) lists the shape after every layer.",
        "nn.Sequential(nn.Conv2d(C, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, "
        "16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Dropout(0.25), "
        "nn.Linear(16 * (H // 4) * (W // 4), classes)).",
    ])
def _cnn(build):
    for k, (c, h, w, classes) in enumerate(CNN_CASES):
        sample = (c, h, w)
        case = f" (input_shape {sample}, {classes} classes)"
        model = call(build, sample, classes, what="build_cnn(input_shape, classes)")
        if not isinstance(model, nn.Sequential):
            raise Fail(f"build_cnn should return an nn.Sequential, got {type(model).__name__}"
                       f"{case}")
        ref = reference_cnn(sample, classes)
        _check_structure(model, ref, sample, case)
        weights, want = _cnn_reference(k)
        t = _train(model, _system(4), *_cnn_data(k), CNN_STEPS, weights,
                   what=f"your model{case} ", replicas=CNN_REPLICAS, batch_size=CNN_BATCH)
        got = t.history["loss"]
        if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            step = int(np.flatnonzero(~np.isclose(got, want, rtol=1e-5, atol=1e-6))[0])
            differ = [(i, mine, theirs) for i, (mine, theirs) in enumerate(zip(model, ref))
                      if repr(mine) != repr(theirs)]
            where = (f" Every shape matches, but layer {differ[0][0]} is {differ[0][1]!r} where "
                     f"the network has {differ[0][2]!r}." if differ else "")
            raise Fail(f"trained from the same weights on the same images{case}, your model's "
                       f"loss at step {step + 1} is {got[step]:.6f}; the network's is "
                       f"{want[step]:.6f}.{where}")
    return (f"correct for all {len(CNN_CASES)} input shapes: the same shapes, weights and "
            "losses as the network, trained on the simulated Bow-2000")


# --- 2 ---------------------------------------------------------------------------------------
# (replicas, hidden width or None for the course's CNN, precision); one replica per IPU
LINK_CASES = ((4, 24, "fp32"), (2, 40, "fp16"), (16, 12, "fp32"), (4, None, "fp16"))
BYTES = {"fp32": 4, "fp16": 2}


def link_bytes_of(profile) -> int:
    """Bytes that went from a tile of one IPU to a tile of another in the profiled run."""
    src, dst, nbytes = profile.exchange_traffic()
    tpi = profile.tiles_per_ipu
    return int(nbytes[src // tpi != dst // tpi].sum())


@functools.lru_cache(maxsize=None)
def _link_case(k: int):
    """(parameters, IPU-Link bytes of one simulated training step) of LINK_CASES[k]."""
    r, width, precision = LINK_CASES[k]
    model = nn.default_cnn() if width is None else _mlp(width)
    x, y = _digits()
    t = _train(model, _system(r), x, y, 1, replicas=r, batch_size=4, precision=precision)
    return model.num_parameters(), link_bytes_of(t.profile())


@question(
    "ex09.link_bytes", title="Predict: the IPU-Link bytes of a data-parallel step",
    kind="predict",
    statement="""
`nn.Trainer(model, device, replicas=r, ...)` on a device of **r IPUs** runs one replica per IPU.
Write `link_bytes(r, n, precision)`: the bytes that cross the IPU-Links in **one training
step** (from a tile of one IPU to a tile of another, summed over all IPUs) for a model of `n`
parameters, with `precision` `"fp32"` or `"fp16"`. The check trains models of several sizes on
2, 4 and 16 IPUs and compares your function with the simulated step's
`profile.exchange_traffic()`.
""",
    hints=[
        "Each replica holds the whole model and its own images: the forward and backward passes "
        "stay on its IPU. What must the replicas agree on before the update?",
        "The gradients (n values) are summed by a ring all-reduce: a reduce-scatter then an "
        "all-gather, each of r − 1 exchanges in which every replica sends one chunk of about "
        "n / r values to its neighbour. In fp16 the gradients are HALF values.",
        "2 · (r − 1) · n values in all, of 4 bytes (fp32) or 2 bytes (fp16).",
    ])
def _link_bytes(predict):
    for k, (r, width, precision) in enumerate(LINK_CASES):
        n, truth = _link_case(k)
        b = BYTES[precision]
        what = "the course's CNN" if width is None else "an MLP"
        case = f"r = {r} replicas, n = {n:,} parameters ({what}), {precision}"
        value = number(call(predict, r, n, precision, what="link_bytes(r, n, precision)"),
                       "link_bytes(r, n, precision)")
        if value == truth:
            continue
        known = (
            ((r - 1) * n * b, "That is half of it: the ring's reduce-scatter AND its "
                              "all-gather each take r − 1 exchanges."),
            (2 * (r - 1) * n * b / r, "That is what ONE replica sends; all r replicas send at "
                                      "the same time, each to its neighbour."),
            (2 * r * n * b, "A replica never sends a chunk to itself: r − 1 exchanges per "
                            "phase, not r."),
            (2 * (r - 1) * n, "That counts values; the question asks for bytes."),
            (r * (r - 1) * n * b, "That sends every replica's whole gradient to every other "
                                  "replica; the ring sends chunks of n / r values."),
            (2 * (r - 1) * n * 4, "In fp16 the gradients are HALF values: 2 bytes each."),
        )
        why = " Or: ".join(text for wrong, text in known if value == wrong) or (
            "Work it out from the ring all-reduce of notebook 08 (the hints walk you through "
            "it).")
        raise Fail(f"for {case}, you predicted {value:,.0f} bytes; the simulated step sent "
                   f"{truth:,} bytes over the IPU-Links. {why}")
    return (f"correct for all {len(LINK_CASES)} machines and models: 2(r − 1)·n gradient "
            "values cross the links, nothing else")


# --- 3 ---------------------------------------------------------------------------------------
_STEP_LAYER = re.compile(r"^(?:recompute/)?(\d+)\.[A-Z]\w*/")


def deep_cnn():
    """Twelve layers: four convolutions, two poolings, a Linear at index 11."""
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 2 * 2, 10))


# (name, model, trainer options)
PROFILE_CASES = (
    ("the course's CNN, 4 replicas", nn.default_cnn, dict(replicas=4, batch_size=8)),
    ("a 12-layer CNN, 4 replicas, recompute=True", deep_cnn,
     dict(replicas=4, batch_size=8, recompute=True)),
    ("an MLP with Dropout, 2 replicas, fp16", lambda: _mlp(48, hidden=2, dropout=0.25),
     dict(replicas=2, batch_size=8, precision="fp16")),
)


@functools.lru_cache(maxsize=None)
def _profile_case(k: int):
    """(the model, the profile of one training step) of PROFILE_CASES[k]."""
    _, make, options = PROFILE_CASES[k]
    model = make()
    x, y = _digits()
    return model, _train(model, _system(4), x, y, 1, **options).profile()


def layer_steps(profile, num_layers: int) -> list:
    """The steps of the profile that belong to each layer, by their names."""
    out = [[] for _ in range(num_layers)]
    for step in profile.steps:
        m = _STEP_LAYER.match(step.name)
        if m and int(m.group(1)) < num_layers:
            out[int(m.group(1))].append(step)
    return out


def _why_layer(i, got, expected, steps, model) -> str:
    """Which misreading of the step names gives `got` for layer i."""
    def total(which):
        return sum(s.cycles for s in which)

    again = total(s for s in steps[i] if s.name.startswith("recompute/"))
    relu = total(s for s in steps[i] if "/relu" in s.name)
    compute = sum(int(dict(s.phases).get("compute", np.zeros(1)).max()) for s in steps[i])
    longer = [j for j in range(len(steps)) if j != i and str(j).startswith(str(i)) and steps[j]]
    if again and got == expected - again:
        return (f" You left out the steps named 'recompute/{i}.…': with recompute=True the "
                "layer's forward pass is built again just before its backward pass, and both "
                "carry that prefix. They are the layer's steps too.")
    if longer and got == expected + total(s for j in longer for s in steps[j]):
        return (f" You added the steps of layer {longer[0]} ('{steps[longer[0]][0].name}', …): "
                "the layer index is the whole number before the dot, not its first digit.")
    if got == compute and compute != expected:
        return (" You counted only the compute phase; count whole steps (step.cycles: sync, "
                "exchange and compute).")
    if relu and got == expected - relu:
        return (f" You left out the steps '{i}.{type(model[i]).__name__}/relu…': a ReLU right "
                "after a Conv2d or Linear is fused into it (one map on its output), so those "
                f"steps are layer {i}'s; the ReLU layer has no steps of its own.")
    if isinstance(model[i], nn.ReLU) and got > 0 and i > 0 and steps[i - 1]:
        return (f" Layer {i} is a ReLU right after layer {i - 1}, fused into it: the steps "
                f"'{i - 1}.…/relu…' are layer {i - 1}'s, and a fused ReLU has no steps of its "
                "own (0 cycles).")
    return ""


@question(
    "ex09.layer_cycles", title="Read a profile: the cycles of each layer", kind="profile",
    statement="""
Write `layer_cycles(profile, num_layers)`: from the profile of one training step
(`trainer.profile()`, without a pipeline), return a list of `num_layers` numbers, the cycles of
each layer of the model — the sum of `step.cycles` over every step that works for that layer:
its forward pass, its backward pass and, with `recompute=True`, its forward pass run again. A
layer with no steps of its own gets 0. The name of a step says which layer it belongs to: look
at `[s.name for s in profile.steps]`. The check reads three profiles: the course's CNN, a
12-layer CNN trained with `recompute=True`, and an MLP with Dropout in fp16.
""",
    hints=[
        "Print the names: '0.Conv2d/conv/products', '3.Conv2d/weight_grad/reduce', "
        "'all_reduce/combine', 'sgd/update', … A layer's steps start with its index, a dot "
        "and its type; the others (FIFO copies, loss, all-reduce, update) belong to no layer.",
        "With recompute=True a layer's forward pass is built again before its backward pass, "
        "and both are named 'recompute/<index>.<Type>/…'. Indices have one or two digits: "
        "'11.Linear/…' is layer 11, not layer 1.",
        "A regular expression does it: re.match(r'(?:recompute/)?(\\d+)\\.[A-Z]\\w*/', "
        "step.name); add step.cycles to cycles[int(m.group(1))].",
    ])
def _layer_cycles(answer):
    for k, (name, _, _) in enumerate(PROFILE_CASES):
        model, profile = _profile_case(k)
        L = len(model)
        got = call(answer, profile, L, what="layer_cycles(profile, num_layers)")
        if not isinstance(got, (list, tuple, np.ndarray)):
            raise Fail(f"layer_cycles should return a list of {L} numbers, got "
                       f"{type(got).__name__}")
        got = [number(v, "each layer's cycles") for v in np.asarray(got, dtype=object).ravel()]
        if len(got) != L:
            raise Fail(f"for {name} ({L} layers) layer_cycles returned {len(got)} numbers; "
                       f"return one per layer, 0 for a layer without steps")
        steps = layer_steps(profile, L)
        for i, layer_steps_i in enumerate(steps):
            expected = sum(s.cycles for s in layer_steps_i)
            if got[i] != expected:
                names = sorted({re.sub(r"\d+$", "", s.name) for s in layer_steps_i})
                shown = ", ".join(f"'{n}'" for n in names[:4]) + (", …" if len(names) > 4 else "")
                raise Fail(f"for {name}: layer {i} ({model[i]!r}) took {expected:,} cycles, "
                           f"you said {got[i]:,.0f}."
                           + (_why_layer(i, got[i], expected, steps, model) or
                              (f" Its {len(layer_steps_i)} steps are named {shown}." if names
                               else " It has no steps of its own.")))
    return (f"correct for all {len(PROFILE_CASES)} profiles: every layer's forward, backward "
            "and recomputed steps")


# --- 4 ---------------------------------------------------------------------------------------
# (stages, micro-batches, boundaries) for _mlp(24, hidden=3): layers F L R L R L R L
SCHEDULE_CASES = ((4, 4, [3, 5, 7]), (2, 3, [5]), (4, 2, [3, 5, 7]), (3, 5, [3, 5]))
_MICRO = re.compile(r"(?:^|/)mb(\d+)/")


def observed_schedule(trainer) -> dict:
    """{"forward"/"backward": [{IPU: micro-batch} per slot]}, read from the profile (which
    IPUs compute in the steps named 'pipeline <phase> <slot>/…') and from the graph (the
    micro-batch of the tensors their vertices touch, named 'mb<m>/…')."""
    profile, g = trainer.profile(), trainer.graph
    compute_sets = {cs.name: cs for cs in g.get_compute_sets()}
    slots = {"forward": {}, "backward": {}}
    for step in profile.steps:
        words = step.name.split()
        if step.kind != "execute" or len(words) != 3 or words[0] != "pipeline":
            continue
        slot = slots[words[1]].setdefault(int(words[2].split("/")[0]), {})
        for v in g.get_vertices(compute_sets[step.name]):
            for parts in v.connections().values():
                for part in parts:
                    for m in _MICRO.findall(part.name):
                        slot.setdefault(v.tile // profile.tiles_per_ipu, set()).add(int(m))
    return {phase: [{ipu: min(mbs) for ipu, mbs in sorted(by_slot[t].items())}
                     for t in range(len(by_slot))] for phase, by_slot in slots.items()}


@functools.lru_cache(maxsize=None)
def _schedule_case(k: int) -> dict:
    S, M, cuts = SCHEDULE_CASES[k]
    x, y = _digits()
    t = _train(_mlp(24, hidden=3), _system(4), x, y, 1, batch_size=2 * M, pipeline=cuts,
               micro_batches=M)
    return observed_schedule(t)


def _gpipe(S, M, backward_order="reverse", backward_from="last") -> dict:
    """GPipe's schedule, and the misreadings of it the check explains."""
    forward = [{s: t - s for s in range(S) if 0 <= t - s < M} for t in range(M + S - 1)]
    backward = []
    for t in range(M + S - 1):
        slot = {}
        for s in range(S):
            k = t - (S - 1 - s) if backward_from == "last" else t - s
            if 0 <= k < M:
                slot[s] = M - 1 - k if backward_order == "reverse" else k
        backward.append(slot)
    return {"forward": forward, "backward": backward}


def _show(slot: dict) -> str:
    return "{" + ", ".join(f"stage {s}: mb {m}" for s, m in sorted(slot.items())) + "}" \
        if slot else "{} (no stage)"


def _as_schedule(answer, S, M) -> dict:
    if not isinstance(answer, dict) or set(answer) != {"forward", "backward"}:
        raise Fail("schedule(S, M) should return {'forward': [...], 'backward': [...]}, "
                   f"got {answer!r:.120}")
    out = {}
    for phase, slots in answer.items():
        _no_waiting_stages(phase, slots, S, M)
        try:
            out[phase] = [{int(s): int(m) for s, m in dict(slot).items()} for slot in slots]
        except (TypeError, ValueError):
            raise Fail(f"schedule({S}, {M})['{phase}'] should be a list with one dict "
                       "{stage: micro-batch} per slot") from None
    return out


def _no_waiting_stages(phase, slots, S, M) -> None:
    """Fail, saying so, when a slot maps a stage to None (a stage that waits is left out)."""
    for t, slot in enumerate(slots if isinstance(slots, (list, tuple)) else ()):
        waiting = [s for s, m in (slot.items() if isinstance(slot, dict) else ()) if m is None]
        if waiting:
            raise Fail(f"schedule({S}, {M})['{phase}'][{t}] maps stage(s) {waiting} to None: "
                       "leave out the stages that wait — a slot's dict holds only the stages "
                       "that work in it, each with its micro-batch.")


@question(
    "ex09.schedule", title="Predict: the schedule of a pipeline", kind="predict",
    statement="""
A model cut into **S** stages (stage s on IPU s) trains a batch as **M** micro-batches
(`nn.Trainer(..., pipeline=[...], micro_batches=M)`). Each phase, forward then backward, is a
sequence of time slots; in a slot every working stage processes one micro-batch. Write
`schedule(S, M)` returning `{"forward": [...], "backward": [...]}`: for each phase, one dict per
slot, in order, mapping each stage that works in that slot to its micro-batch (both counted
from 0; stages that wait are left out of the dict, not mapped to `None`). The forward pass runs
from stage 0 to stage S − 1, micro-batch 0 first; the **backward pass runs in reverse**: it
starts at the last stage, where the loss is, and takes the micro-batches in reverse order (the
last to finish its forward pass goes back first), the gradients travelling back to stage 0.
The check trains pipelines of 2, 3 and 4 stages and reads the schedule the simulator ran from
the profile (steps named `pipeline forward <slot>/…`) and the graph.
""",
    hints=[
        "Forward: a micro-batch goes through stage 0, then stage 1, …, one slot each, and "
        "stage 0 takes the next micro-batch as soon as it hands one on. So in slot t stage s "
        "works on micro-batch t − s. How many slots until the last micro-batch leaves the "
        "last stage?",
        "Both phases take M + S − 1 slots. The backward phase starts where the loss is, at the "
        "LAST stage, with the micro-batch whose forward pass ended last, and goes back to "
        "stage 0: stage s joins S − 1 − s slots after the last stage.",
        "forward[t] = {s: t − s for s in range(S) if 0 <= t − s < M}; backward[t] = "
        "{s: M − 1 − k for s in range(S) if 0 <= (k := t − (S − 1 − s)) < M}, for t in "
        "range(M + S − 1).",
    ])
def _schedule(answer):
    for k, (S, M, _) in enumerate(SCHEDULE_CASES):
        truth = _schedule_case(k)
        got = _as_schedule(call(answer, S, M, what="schedule(S, M)"), S, M)
        case = f"S = {S} stages, M = {M} micro-batches"
        for phase in ("forward", "backward"):
            want, mine = truth[phase], got[phase]
            if len(mine) != len(want):
                why = (f" A micro-batch takes S slots to pass all stages: the last one enters "
                       f"in slot M − 1 = {M - 1} and leaves the last stage in slot "
                       f"M + S − 2 = {M + S - 2}." if len(mine) == M else "")
                raise Fail(f"with {case} the simulator's {phase} phase has {len(want)} slots "
                           f"('pipeline {phase} 0' … 'pipeline {phase} {len(want) - 1}'); yours "
                           f"has {len(mine)}.{why}")
            for t, (w, m) in enumerate(zip(want, mine)):
                if w != m:
                    why = ""
                    if phase == "backward" and mine == _gpipe(S, M, "forward")["backward"]:
                        why = (f" The backward phase takes the micro-batches in REVERSE order: "
                               f"the last stage starts with micro-batch M − 1 = {M - 1}, the "
                               "last to finish its forward pass.")
                    elif phase == "backward" and mine == _gpipe(S, M, "reverse", "first")[
                            "backward"]:
                        why = (" The backward phase starts at the LAST stage, where the loss "
                               "is; the gradients travel back towards stage 0.")
                    raise Fail(f"with {case}, {phase} slot {t}: the simulator ran "
                               f"{_show(w)}; you said {_show(m)}.{why}")
    S, M = SCHEDULE_CASES[0][:2]
    return (f"correct for all {len(SCHEDULE_CASES)} pipelines. Each IPU waits in S − 1 of the "
            f"M + S − 1 slots of a phase: a bubble of {(S - 1) / (M + S - 1):.0%} for S = {S}, "
            f"M = {M}")


# --- 5 ---------------------------------------------------------------------------------------
FAST_BATCH, FAST_STEPS, FAST_MAX_MICRO = 256, 2, 16
FAST_KEYS = ("replicas", "batch_size", "precision", "pipeline", "micro_batches", "recompute")
FAST_PAR = Par(cycles=125_667, tolerance=1.1)


@functools.lru_cache(maxsize=None)
def _fast_reference():
    """The weights and the fp32 losses of FAST_STEPS steps, one replica per IPU."""
    model = nn.default_cnn()
    model.reset_parameters(SEED)
    weights = model.state_dict()
    x, y = _digits()
    t = _train(model, _system(4), x, y, FAST_STEPS, weights, replicas=4,
               batch_size=FAST_BATCH // 4)
    return weights, tuple(t.history["loss"])


def _fast_options(config) -> nn.TrainConfig:
    """The learner's dict of Trainer options as a TrainConfig (its rules, its messages)."""
    cfg = training_config(config, FAST_KEYS, FAST_BATCH, "images", _explain_config, lr=0.05,
                          seed=SEED)
    if (micro_batches := cfg.micro_batches) > FAST_MAX_MICRO:
        raise Fail(f"{micro_batches} micro-batches build {micro_batches} copies of every "
                   f"stage's forward and backward pass: a huge graph, slow to simulate. The bubble is "
                   f"small long before that; use at most {FAST_MAX_MICRO}.")
    return cfg


def _explain_config(error: Exception) -> str:
    """The Trainer's complaint about a configuration, and the rule behind it."""
    text = str(error)
    if "must be increasing" in text:
        return (f"{text}. A boundary is the first layer of a stage: a repeated boundary would "
                "leave a stage with no layers.")
    if "IPUs per replica" in text:
        return f"{text}. The Bow-2000 has 4 IPUs: replicas x stages may not exceed 4."
    return text


def _diagnose(cfg, profile) -> str:
    """What in this configuration costs cycles the par does not spend."""
    notes = []
    stages, ipus = cfg.num_stages, profile.num_ipus
    links = profile.phase_totals()["inter_ipu_exchange"]
    if cfg.precision == "fp32":
        notes.append("fp32: the matrix products run at half the fp16 rate, and every activation "
                     "and gradient moves twice the bytes. precision='fp16' keeps float32 master "
                     "weights and loss scaling: the loss agrees to 3 digits.")
    if cfg.pipeline is not None:
        notes.append(f"a pipeline of {stages} stages and {cfg.micro_batches} micro-batches: "
                     f"each phase takes {cfg.micro_batches + stages - 1} slots with their own "
                     f"syncs and exchanges, and the bubble leaves IPUs idle. Pipelining pays when a model does not "
                     "fit on one IPU; this one does.")
    elif cfg.replicas < ipus:
        notes.append(f"each of your {cfg.replicas} replica(s) spans {ipus // cfg.replicas} "
                     f"IPUs, so the exchanges inside every layer cross the IPU-Links ({links:,} "
                     "cycles on the links in this step). With one replica per IPU only the "
                     "gradient all-reduce does.")
    if cfg.recompute:
        notes.append("recompute=True runs the forward pass twice: it saves memory, which this "
                     "model does not need.")
    return "".join(f"\n  · {n}" for n in notes)


@question(
    "ex09.fast_step", title="Performance: the fastest training step on a Bow-2000",
    kind="performance",
    statement=f"""
Train the course's CNN (`nn.default_cnn()`) on a Bow-2000 (`bow`: 4 IPUs, 16 tiles each) with
a **global batch of {FAST_BATCH} images per step**. Choose how: give `config`, a dict of
`nn.Trainer` options among `replicas`, `batch_size` (`replicas × batch_size = {FAST_BATCH}`),
`precision`, `pipeline`, `micro_batches` and `recompute`. The check trains {FAST_STEPS} steps
on the digits (the loss must match a plain fp32 step's) and grades the simulated cycles of one
step. **Par**: {FAST_PAR.cycles:,} cycles, within {FAST_PAR.tolerance:g}×.
""",
    par=FAST_PAR,
    hints=[
        "Notebook 09 section 6 compares the ways to use four IPUs. Try a few here and read "
        "trainer.profile().phase_totals(): where do the cycles go?",
        "A model that fits on one IPU is fastest replicated, one replica per IPU: only the "
        "gradients cross the IPU-Links. A pipeline pays its bubble and per-slot costs, "
        "recompute runs the forward twice. And half precision doubles the rate of the matrix "
        "products.",
        f"{{'replicas': 4, 'batch_size': {FAST_BATCH // 4}, 'precision': 'fp16'}}.",
    ])
def _fast_step(config):
    if config is None or config is Ellipsis:
        raise NotAnswered()
    cfg = _fast_options(config)
    weights, want = _fast_reference()
    x, y = _digits()
    t = _train(nn.default_cnn(), _system(4), x, y, FAST_STEPS, weights,
               what="your configuration ", explain=_explain_config, config=cfg)
    got = t.history["loss"]
    rtol = 2e-3 if cfg.precision == "fp16" else 1e-5
    if not np.allclose(got, want, rtol=rtol):
        raise Fail(f"your configuration trains differently: losses {np.round(got, 5).tolist()},"
                   f" a plain fp32 step gives {np.round(want, 5).tolist()}")
    profile = t.profile()
    report = grade_par(profile, FAST_PAR, _diagnose(cfg, profile))
    return (f"correct; {report.text}: {FAST_BATCH * profile.clock_hz / report.cycles:,.0f} "
            "images/s (simulated)", {"cycles": report.cycles})
