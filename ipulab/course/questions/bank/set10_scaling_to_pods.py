"""Exercise set 10 · scaling to Pods: count a model's bytes per IPU for a mapping, choose a
mapping of BERT-Large that fits a Pod16, predict a ring all-reduce that crosses Pod racks,
the number of phases a model needs, and find the fastest way to train a model on a Pod16.

The planner's questions are checked against ipulab.plan (its memory model, documented in
plan/memory.py); the all-reduce and the training step against the simulator, on Pods whose
IPUs are cut down to a few tiles (the links, racks and syncs are full size)."""
import functools
import math

from .... import data, devices, gcl, nn, plan, poplar, poputil
from ....errors import IpuLabError, PlanError, TileMemoryError
from ....poplar import program as prog
from ..messages import Fail, NotAnswered
from ..kit import call, grade_par, number, training_config
from ..registry import Par, exercise_set, question

exercise_set("ex10", "10_scaling_to_pods.ipynb", "Scaling to Pods",
             "Count a model's bytes per IPU for a mapping, choose a mapping of BERT-Large that "
             "fits a Pod16, predict an all-reduce across Pod racks, the phases a model needs, "
             "and find the fastest way to train a model on a Pod16.",
             guide="10_scaling_to_pods.ipynb")

MIB = 2**20


def _stack(layer_params: int, layers: int) -> plan.ModelSpec:
    """A model of `layers` identical blocks of layer_params parameters (no embeddings)."""
    block = plan.Block("layer", layer_params, layer_params, 0.0, 1, 1)
    return plan.ModelSpec("stack", tuple(block for _ in range(layers)), kind="transformer",
                          micro=1, global_batch=1 << 12)


# --- 1 ---------------------------------------------------------------------------------------
# (parameters per layer, layers, t, p, optimizer)
BYTES_CASES = ((12_596_224, 24, 1, 4, "lamb"), (1_812_099_072, 96, 8, 8, "adam"),
               (78_676_480, 32, 4, 2, "sgd"), (4_000_000, 12, 2, 4, "adam"))


def resident_truth(layer_params, layers, t, p, optimizer) -> int:
    """The planner's weights + optimizer state + gradients on an IPU of stage 0 (the
    replicas fill the smallest Pod of at least t·p IPUs; without RTS they change nothing)."""
    pod = max(16, t * p)
    m = plan.make_mapping(tensor_parallel=(t, 1), pipeline=p, replicas=pod // (t * p),
                          optimizer=optimizer)
    kinds = plan.estimate(_stack(layer_params, layers), f"pod{pod}", m).memory[0]["kinds"]
    return kinds["weights"] + kinds["optimizer_state"] + kinds["gradients"]


@question(
    "ex10.bytes_per_ipu", title="Count: a model's bytes per IPU for a mapping", kind="predict",
    statement="""
A model of `layers` identical layers of `layer_params` parameters trains in fp16 (weights and
gradient accumulators: 2 bytes per parameter, Graphcore's stochastic rounding needs no fp32
master copy) with an optimizer whose state is fp32: SGD keeps 1 value per parameter
(momentum), Adam and LAMB 2 (two moments). It is mapped with **t** IPUs sharing each layer and
**p** pipeline stages of equal numbers of layers; everything stays in In-Processor Memory, no
RTS. Write `resident_bytes(layer_params, layers, t, p, optimizer)`: the bytes of weights,
optimizer state and gradients on ONE IPU. The check compares with `ipulab.plan` (its memory
model is documented in `ipulab/plan/memory.py`).
""",
    hints=[
        "An IPU holds one stage's layers (layers / p of them), and of each only its 1/t share. "
        "Replicas do not matter here: each holds a whole copy.",
        "Per parameter on the IPU: 2 bytes of weight, 2 of gradient, and 4 bytes for each "
        "state value of the optimizer.",
        "layer_params * (layers // p) // t * (2 + 2 + 4 * {'sgd': 1, 'adam': 2, 'lamb': 2}"
        "[optimizer]).",
    ])
def _bytes_per_ipu(answer):
    for params, layers, t, p, opt in BYTES_CASES:
        truth = resident_truth(params, layers, t, p, opt)
        case = (f"{layers} layers of {params:,} parameters, t = {t}, p = {p}, {opt}")
        got = number(call(answer, params, layers, t, p, opt,
                          what="resident_bytes(layer_params, layers, t, p, optimizer)"))
        if abs(got - truth) <= 1e-6 * truth + 8:
            continue
        share = params * (layers // p) // t
        state = 4 * (1 if opt == "sgd" else 2)
        known = ((share * (4 + state) + 4 * share, "That counts 4 more bytes per parameter: "
                  "an fp32 master copy, or fp32 weights; here the weights are fp16."),
                 (share * (2 + state), "You left out the gradients (2 bytes per parameter)."),
                 (share * 4, "You left out the optimizer's fp32 state."),
                 (share * t * (4 + state) if t > 1 else -1,
                  f"That is a whole stage: with t = {t} an IPU holds 1/t of each layer."))
        why = " ".join(text for wrong, text in known if abs(got - wrong) <= 8)
        raise Fail(f"for {case}: you said {got:,.0f} bytes; the planner counts {truth:,} "
                   f"({truth / MIB:,.1f} MiB) on one IPU. {why}".rstrip())
    return "correct for all cases: weights, gradients and optimizer state of one stage's 1/t"


# --- 2 ---------------------------------------------------------------------------------------
FIT_GLOBAL_BATCH = 65536


@question(
    "ex10.choose_mapping", title="Choose: a mapping of BERT-Large that fits a Pod16",
    kind="system",
    statement=f"""
Map BERT-Large pretraining (`plan.bert_large()`, LAMB, fp16, global batch
{FIT_GLOBAL_BATCH:,}) onto a Pod16 so that it fits **with the optimizer state in
In-Processor Memory, without RTS and without phased execution** (the fastest training keeps
everything on chip). Give `mapping`, a string as `ipulab plan --mapping` takes it, e.g.
`"p=4,layers=3/7/7/7,r=4"`. The check asks `plan.estimate` whether it fits.
""",
    hints=[
        "Try some: plan.estimate(plan.bert_large(), 'pod16', plan.parse_mapping(text, "
        "optimizer='lamb'), 65536) tells you the bytes per IPU by kind and why a mapping does "
        "not fit.",
        "LAMB keeps 8 bytes of state per parameter: 4 IPUs of 7 layers each cannot hold it. "
        "With more pipeline stages each IPU holds fewer layers (and t·p·r = 16).",
        "Graphcore's: 8 stages, 2 replicas, the embeddings with 2 layers on IPU 0: "
        "'p=8,layers=2/3/3/3/3/3/3/4,r=2'.",
    ])
def _choose_mapping(text):
    if text is None or text is Ellipsis:
        raise NotAnswered()
    if not isinstance(text, str):
        raise Fail(f"give the mapping as a string such as 'p=4,layers=3/7/7/7,r=4', not "
                   f"{type(text).__name__}")
    try:
        m = plan.parse_mapping(text, optimizer="lamb")
        e = plan.estimate(plan.bert_large(), "pod16", m, FIT_GLOBAL_BATCH)
    except PlanError as err:
        raise Fail(f"{text!r} is not a mapping of BERT-Large on a Pod16: {err}") from None
    used = [name for name, on in (("RTS", m.rts), ("phased execution", m.phased),
                                  ("off-chip optimizer state", m.optimizer_state != "on-chip"))
            if on]
    if used:
        raise Fail(f"{text!r} uses {' and '.join(used)}: the question asks for everything on "
                   "chip, without RTS or phases")
    if not e.fits:
        raise Fail(f"{e.mapping.label()} does not fit: {e.reason}")
    return f"{e.mapping.label()} fits: {e.reason.removeprefix('fits: ')}"


# --- 3 ---------------------------------------------------------------------------------------
RING_CASES = ((64, 6400), (128, 6400), (128, 12800))
RING_TILES = 2


@functools.lru_cache(maxsize=None)
def ring_truth(num_ipus: int, n: int) -> int:
    """The IPU-Link/GW-Link cycles of gcl.all_reduce of n floats, one replica per IPU."""
    dev = devices.pod(num_ipus, tiles_per_ipu=RING_TILES)
    g = poplar.Graph(dev, replication_factor=num_ipus)
    x = g.add_variable(poplar.FLOAT, [n], "grads")
    poputil.map_tensor_linearly(g, x)
    seq = prog.Sequence()
    gcl.all_reduce(g, x, "add", seq)
    e = poplar.Engine(g, seq)
    e.load(dev)
    e.run()
    return int(e.profile().phase_totals()["inter_ipu_exchange"])


@question(
    "ex10.cross_rack", title="Predict: an all-reduce across Pod racks", kind="predict",
    statement="""
`gcl.all_reduce` over r replicas, one per IPU of a Pod, is a ring: a reduce-scatter then an
all-gather, each of r − 1 steps in which replica j sends a chunk of ceil(n / r) values to
replica j + 1 (mod r), all at once. Every step waits for the slowest pair. Write
`ring_cycles(target, n)`: the cycles the ring spends on the links (the profile's
`inter_ipu_exchange`) for n float32 values over all `target.num_ipus` IPUs.
`target.link_cycles(nbytes, a, b)` gives the cycles to move nbytes from IPU a to IPU b: over
IPU-Links inside a POD64 rack, over the machine's GW-Links between racks. The check runs the
all-reduce on a Pod64 and a Pod128 (2 racks) and reads the profile.
""",
    hints=[
        "Steps: 2(r − 1). Each moves ceil(n / r) values of 4 bytes from every replica to the "
        "next, at the same time: a step lasts as long as its slowest pair.",
        "In a Pod128 two pairs of the ring cross racks (IPU 63 → 64 and 127 → 0): those pay the "
        "GW-Links, a quarter of a machine's 25 GB/s each and 2 µs of latency. Every step waits "
        "for them.",
        "chunk = 4 * ceil(n / r); 2 * (r − 1) * max(target.link_cycles(chunk, j, (j + 1) % r) "
        "for j in range(r)).",
    ])
def _cross_rack(answer):
    for num_ipus, n in RING_CASES:
        truth = ring_truth(num_ipus, n)
        target = devices.pod(num_ipus, tiles_per_ipu=RING_TILES).target
        got = number(call(answer, target, n, what="ring_cycles(target, n)"))
        if abs(got - truth) <= 0.01 * truth:
            continue
        r, chunk = num_ipus, 4 * math.ceil(n / num_ipus)
        inside = max(target.link_cycles(chunk, j, j + 1) for j in range(r - 1)
                     if target.system.rack_of(j) == target.system.rack_of(j + 1))
        slow = max(target.link_cycles(chunk, j, (j + 1) % r) for j in range(r))
        known = ((2 * (r - 1) * inside, "Your steps cost an IPU-Link hop; in a Pod128 every "
                  "step waits for the pairs that cross racks on the GW-Links."),
                 ((r - 1) * slow, "That is half the ring: the reduce-scatter AND the "
                  "all-gather take r − 1 steps each."),
                 (2 * (r - 1) * target.link_cycles(4 * n, 0, 1), "Each step sends a chunk of "
                  "n / r values, not the whole tensor."))
        why = " ".join(text for wrong, text in known if abs(got - wrong) <= 0.01 * truth)
        raise Fail(f"on a Pod{num_ipus} ({target.system.num_racks} rack(s)) with n = {n:,}: "
                   f"you predicted {got:,.0f} cycles; the simulator spent {truth:,} on the "
                   f"links. {why}".rstrip())
    return ("correct on a Pod64 and a Pod128: across racks every ring step waits for the "
            "GW-Links")


# --- 4 ---------------------------------------------------------------------------------------
# (preset, system, t, r, MiB of weights allowed per IPU)
PHASE_CASES = (("gpt3-175b", "pod256", 8, 32, 2000), ("gpt3-175b", "pod256", 64, 4, 512),
               ("gpt3-2.7b", "pod16", 1, 16, 1024), ("bert-large", "pod16", 1, 16, 200))


def phases_truth(preset: str, system: str, t: int, r: int, budget_mib: int) -> int:
    """The fewest phases for which the planner's weights per IPU fit the budget."""
    spec = plan.PRESETS[preset]()
    for k in range(1, spec.num_layers + 1):
        shards = (t, 1) if t <= 8 else (8, t // 8)       # 2-D beyond 8: heads stay whole
        m = plan.make_mapping(tensor_parallel=shards, replicas=r, phases=k, optimizer="adam")
        if plan.estimate(spec, system, m).memory[0]["kinds"]["weights"] <= budget_mib * MIB:
            return k
    return 0


@question(
    "ex10.phases", title="Predict: the phases a model needs", kind="predict",
    statement="""
With phased execution the layers are cut into k phases of ceil(layers / k) consecutive layers;
their weights live in Streaming Memory and an IPU holds the weights of the phase it runs AND of
the next one (loaded while this one computes), fp16, its 1/t share of each layer (no RTS).
Write `fewest_phases(layers, layer_params, t, budget_bytes)`: the smallest k (1 ≤ k ≤ layers)
for which those weights fit in `budget_bytes` (the budgets are large enough for the
embeddings, which `plan` runs as a phase of their own). The check compares with
`ipulab.plan` for GPT-3 175B, GPT-3 2.7B and BERT-Large (their `spec.blocks[0].params` per
layer).
""",
    hints=[
        "A phase of g = ceil(layers / k) layers holds g · layer_params / t parameters on one IPU, "
        "2 bytes each, twice (this phase and the next).",
        "Try k = 1, 2, ... and stop at the first where 2 · 2 · ceil(layers / k) · layer_params "
        "/ t ≤ budget_bytes.",
        "next(k for k in range(1, layers + 1) if 4 * math.ceil(layers / k) * (layer_params // t)"
        " <= budget_bytes).",
    ])
def _phases(answer):
    for preset, system, t, r, budget in PHASE_CASES:
        spec = plan.PRESETS[preset]()
        truth = phases_truth(preset, system, t, r, budget)
        got = number(call(answer, spec.num_layers, spec.blocks[0].params, t, budget * MIB,
                          what="fewest_phases(layers, layer_params, t, budget_bytes)"))
        if got == truth:
            continue
        once = next((k for k in range(1, spec.num_layers + 1) if 2 * math.ceil(
            spec.num_layers / k) * (spec.blocks[0].params // t) <= budget * MIB), 0)
        why = (" You counted one phase's weights: the next phase is loaded while this one "
               "computes, so an IPU holds two." if got == once else "")
        raise Fail(f"{preset} with t = {t} and {budget} MiB for weights per IPU: you said "
                   f"{got:g} phases; the planner needs {truth}.{why}")
    return "correct for all models: two phases' weights, 1/t of each layer, in the budget"


# --- 5 ---------------------------------------------------------------------------------------
FAST_TILES, FAST_BATCH = 4, 256
FAST_KEYS = ("replicas", "batch_size", "precision", "pipeline", "micro_batches", "recompute")
FAST_PAR = Par(cycles=166_863, tolerance=1.1)


def wide_mlp():
    """The model of ex10.fastest: 64 → 384 → 384 → 10 (about 180,000 parameters); the
    exercise notebook defines the same, with try_fastest(config), the step this check runs."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 384), nn.ReLU(), nn.Linear(384, 384),
                         nn.ReLU(), nn.Linear(384, 10))


def _fast_config(config) -> nn.TrainConfig:
    return training_config(config, FAST_KEYS, FAST_BATCH, "images", lr=0.05, seed=10)


@question(
    "ex10.fastest", title="Performance: the fastest feasible mapping on a Pod16",
    kind="performance",
    statement=f"""
Train `wide_mlp()` (64 → 384 → 384 → 10, about 180,000 parameters; the cell below defines it)
on a Pod16 whose IPUs are cut down to **{FAST_TILES} tiles**
(`devices.pod(16, tiles_per_ipu={FAST_TILES})`) with a global batch of **{FAST_BATCH}** images
per step: plain SGD (`nn.Trainer`'s default optimizer, no momentum), lr 0.05, seed 10, one step
on the first {FAST_BATCH} images of `data.digits()`, in order. Give `config`, a dict of
`nn.Trainer` options among {', '.join(f'`{k}`' for k in FAST_KEYS)}
(`replicas × batch_size = {FAST_BATCH}`; the replicas share the 16 IPUs). It must fit in tile
memory; the check grades the simulated cycles of that step. `try_fastest(config)`, in the cell
below, trains it exactly as the check does. **Par**: {FAST_PAR.cycles:,} cycles, within
{FAST_PAR.tolerance:g}×.
""",
    par=FAST_PAR,
    hints=[
        "Try a few and read trainer.profile().phase_totals(): with 16 replicas, where do the "
        "cycles go?",
        "Every replica's gradients (180,000 of them) go round a ring of all the replicas, over "
        "the links between the Pod's machines. Fewer replicas, each spread over more IPUs, "
        "send fewer; a pipeline pays its bubble and may not fit on 4 tiles.",
        "{'replicas': 1, 'batch_size': 256, 'precision': 'fp16'}.",
    ])
def _fastest(config):
    cfg = _fast_config(config)
    x, y, _, _ = data.digits()
    try:
        t = nn.Trainer(wide_mlp(), devices.pod(16, tiles_per_ipu=FAST_TILES), config=cfg)
        t.fit(x[:FAST_BATCH], y[:FAST_BATCH], shuffle=False)
    except TileMemoryError as e:
        raise Fail(f"your configuration does not fit in tile memory: {e}") from None
    except IpuLabError as e:
        raise Fail(f"your configuration could not be trained: {e}") from None
    profile = t.profile()
    report = grade_par(profile, FAST_PAR)
    return (f"correct; {report.text}: {FAST_BATCH * profile.clock_hz / report.cycles:,.0f} "
            "images/s (simulated)", {"cycles": report.cycles})
