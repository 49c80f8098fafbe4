"""Exercise set 12 · a transformer on a Pod: a causal softmax codelet, the heads of Q, K and V
as views, the IPU-Link bytes of Megatron's all-reduces in a training step, and the fastest
training step of the small GPT on a Pod16.

The softmax runs on tiles as popnn's does (a vertex per row, where the row lives); the heads'
views are checked element by element and by running attention with poplin and popnn; the
bytes and the training step are read from nn.Trainer runs on IPUs cut down to a few tiles
(the links and syncs are full size)."""
import functools

import numpy as np

from .... import data, devices, nn, poplar, poplin, popnn, poputil
from ....errors import IpuLabError, TileMemoryError
from ....poplar import program as prog
from ..messages import Fail, short
from ..kit import (Kit, call, compare, device, grade_par, number, require_codelet,
                   training_config)
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex12", "12_a_transformer_on_a_pod.ipynb", "A transformer on a Pod",
             "A causal softmax codelet, the heads of Q, K and V as views, the IPU-Link bytes of "
             "Megatron's all-reduces in a training step, and the fastest training step of the "
             "small GPT on a Pod16.")


# --- 1 ---------------------------------------------------------------------------------------
# (sequence length S, groups of S rows, tiles, how large the scores are)
SOFTMAX_CASES = ((8, 3, 4, 3.0), (5, 2, 2, 60.0))


def _causal_softmax(scores: np.ndarray) -> np.ndarray:
    """numpy's causal softmax of every [S, S] square of rows (the check's reference)."""
    s = scores.shape[-1]
    z = np.where(np.tril(np.ones((s, s), bool)), scores.reshape(-1, s, s).astype(np.float64),
                 -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(scores.shape)


@question(
    "ex12.causal_softmax", title="A codelet: one row of a causal softmax", kind="codelet",
    statement="""
Complete the codelet `CausalSoftmax`: one vertex computes row i of a causal softmax. Its `x`
is connected to the scores the row may see, columns 0 … i (already scaled), its `out` to the
whole row of S attention weights: `out[j] = exp(x[j]) / Σ_k exp(x[k])` for j ≤ i and
`out[j] = 0` for the masked columns j > i. Scores can be large: compute it so that `exp` never
overflows float32. The check places one vertex per row on the tile that holds the row (so the
softmax exchanges nothing, as popnn's does), over squares of several sizes with random scores,
and runs them with bounds checking.
""",
    hints=[
        "len(x) is i + 1, len(out) is S: two loops, one over x for the visible columns and one "
        "from len(x) to len(out) for the masked ones.",
        "exp(88.8) is already infinite in float32. softmax(x) = softmax(x − c) for any c: "
        "subtract the row's maximum first, then every exp is at most 1.",
        "m = max of x; s = Σ exp(x[j] − m); out[j] = exp(x[j] − m) / s for j < len(x); "
        "out[j] = 0.0 for len(x) ≤ j < len(out).",
    ])
def _causal_softmax_check(cls):
    require_codelet(cls, {"x": "input", "out": "output"})
    rng = np.random.default_rng(1201)
    for s, groups, tiles, size in SOFTMAX_CASES:
        rows = groups * s
        kit = Kit(tiles)
        per_tile = -(-rows // tiles)
        mapping = [[(t * per_tile * s, min(rows, (t + 1) * per_tile) * s)]
                   if t * per_tile < rows else [] for t in range(tiles)]
        scores = kit.var("scores", poplar.FLOAT, [rows, s], tile=mapping)
        probs = kit.var("out", poplar.FLOAT, [rows, s], tile=mapping, read=True)
        cs = kit.g.add_compute_set("causal_softmax")
        for r in range(rows):
            i = r % s
            kit.g.add_vertex(cs, cls, {"x": scores[r, :i + 1], "out": probs[r]},
                             tile=r // per_tile)
        x = (size * rng.standard_normal((rows, s))).astype(np.float32)
        initial = filled((rows, s))
        got = kit.run(prog.Execute(cs), scores=x, out=initial)["out"]
        case = f" (squares of {s} × {s}, scores up to {np.abs(x).max():.0f})"
        if not np.isfinite(got).all():
            r, j = (int(n) for n in np.argwhere(~np.isfinite(got))[0])
            seen = x[r, :r % s + 1]
            why = (f"exp of a large score overflows float32 (exp(x) is inf beyond x ≈ 88.7; "
                   f"row {r}'s scores are {short(seen)}). Subtract the row's maximum before "
                   "exp." if np.abs(seen).max() > 80 else
                   f"row {r}'s scores are small ({short(seen)}): check what you divide by, the "
                   "sum of exp over every visible column (the diagonal, column i, too).")
            raise Fail(f"out[{r}, {j}] is {got[r, j]}{case}: {why}")

        def locate(flat, s=s, x=x, got=got):
            r, j = divmod(flat, s)
            if j <= r % s:
                return f"; the row's visible scores are {short(x[r, :r % s + 1])}"
            left = (" and your codelet never wrote it (it holds the initial -7777.0)"
                    if got[r, j] == initial[r, j] else "")
            return f"; column {j} > row position {r % s}: a masked column, its weight is 0{left}"
        compare_filled(kit, "out", got, _causal_softmax(x), rtol=1e-5, atol=1e-6, case=case,
                       context=locate)
    return ("correct: every row's weights sum to 1 over the visible columns, the masked ones "
            "are 0, and no exp overflows")


# --- 2 ---------------------------------------------------------------------------------------
# (B, S, d, heads)
HEAD_CASES = ((2, 4, 8, 2), (3, 5, 12, 3), (2, 8, 16, 4))


def _heads_truth(ids: np.ndarray, heads: int) -> np.ndarray:
    """The element ids of [B, S, d] -> [B*h, S, d/h] (the check's reference, on ids)."""
    b, s, d = ids.shape
    return ids.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3).reshape(b * heads, s, -1)


def _attention_runs(split_heads, b, s, d, heads):
    """Attention of one block on 8 tiles with the learner's views: Fail unless its context
    is numpy's."""
    kit = Kit(8)
    qkv = kit.var("qkv", poplar.FLOAT, [b, s, 3 * d])
    poputil.map_tensor_linearly(kit.g, qkv)
    q, k, v = (call(split_heads, qkv[:, :, i * d:(i + 1) * d], heads,
                    what="split_heads(t, heads)") for i in range(3))
    seq = prog.Sequence()
    scores = poplin.mat_mul_grouped(kit.g, q, k.dim_shuffle([0, 2, 1]), seq, "scores")
    probs = popnn.softmax(kit.g, scores, seq, 1 / np.sqrt(d // heads), causal=True)
    kit.tensors["context"] = poplin.mat_mul_grouped(kit.g, probs, v, seq, "context")
    kit.reads.append("context")
    host = np.random.default_rng(1202).standard_normal((b, s, 3 * d)).astype(np.float32)
    got = kit.run(seq, qkv=host)["context"]
    q_, k_, v_ = (host[:, :, i * d:(i + 1) * d].reshape(b, s, heads, -1).transpose(0, 2, 1, 3)
                  for i in range(3))
    a = _causal_softmax(q_ @ k_.transpose(0, 1, 3, 2) / np.sqrt(d // heads))
    compare(kit, "context", got, (a @ v_).reshape(b * heads, s, -1), rtol=1e-4, atol=1e-5,
            case=f" (B {b}, S {s}, d {d}, {heads} heads)")


@question(
    "ex12.split_heads", title="The heads of Q, K and V as views", kind="graph",
    statement="""
`nn`'s in_proj gives `qkv` [B, S, 3d]: for every sample and position the d features of its
query, then of its key, then of its value; `t = qkv[:, :, 0:d]` is Q [B, S, d]. Head h owns
features h·d/heads … (h+1)·d/heads − 1. Write `split_heads(t, heads)` returning a **view**
[B·heads, S, d/heads] (reshape, dim_shuffle: no copy, no graph) whose matrix g = b·heads + h
is head h of sample b: its row i is position i, its column j feature h·d/heads + j. The check
compares your view element by element on three shapes, then runs the attention of notebook 12
(`mat_mul_grouped`, a causal `popnn.softmax`, `mat_mul_grouped`) with your Q, K and V on 8
tiles.
""",
    hints=[
        "Split the last dimension first: t.reshape([B, S, heads, d // heads]). Which dimension "
        "must come second so that one (sample, head) is one block of S rows?",
        "dim_shuffle([0, 2, 1, 3]) gives [B, heads, S, d/heads]; a reshape then merges B and "
        "heads. Reshaping [B, S, d] straight to [B·heads, S, d/heads] cuts the positions, not "
        "the features, into heads.",
        "b, s, d = t.shape; return t.reshape([b, s, heads, d // heads]).dim_shuffle([0, 2, 1, 3])"
        ".reshape([b * heads, s, d // heads])",
    ])
def _split_heads(split_heads):
    for b, s, d, heads in HEAD_CASES:
        g = poplar.Graph(device(1).target)
        qkv = g.add_variable(poplar.FLOAT, [b, s, 3 * d], "qkv")
        t = qkv[:, :, 0:d]
        view = call(split_heads, t, heads, what="split_heads(t, heads)")
        if not isinstance(view, poplar.Tensor):
            raise Fail(f"split_heads should return a tensor (a view of t), got "
                       f"{type(view).__name__}")
        want_shape = [b * heads, s, d // heads]
        case = f" (B {b}, S {s}, d {d}, {heads} heads)"
        if list(view.shape) != want_shape:
            raise Fail(f"your view has shape {list(view.shape)}, expected {want_shape}{case}")
        index = {int(a): np.unravel_index(n, qkv.shape) for n, a in enumerate(qkv.ids.ravel())}
        got, want = view.ids, _heads_truth(t.ids, heads)
        bad = np.argwhere(got != want)
        if len(bad):
            gi, i, j = (int(n) for n in bad[0])
            found = index.get(int(got[gi, i, j]))
            holds = (f"qkv[{', '.join(map(str, found))}]" if found is not None else
                     "an element that is not in t")
            naive = t.ids.reshape(want_shape)
            why = (" A reshape straight to [B·heads, S, d/heads] cuts positions into heads: "
                   "split the features, then bring the heads before the positions "
                   "(dim_shuffle)." if (got == naive).all() else "")
            raise Fail(f"matrix {gi} (sample {gi // heads}, head {gi % heads}), row {i}, column "
                       f"{j} of your view holds {holds}; it should be qkv[{gi // heads}, {i}, "
                       f"{(gi % heads) * (d // heads) + j}] (position {i}, feature "
                       f"{(gi % heads) * (d // heads) + j}){case}.{why}")
    _attention_runs(split_heads, 2, 8, 16, 4)
    return ("correct: each (sample, head) is one matrix of S positions, and the attention "
            "built on your views is numpy's")


# --- 3 ---------------------------------------------------------------------------------------
# (t, sequences per replica, S, d_model) on a Bow-2000 of 8-tile IPUs: r = 4 / t replicas
LINK_CASES = ((2, 2, 8, 32), (4, 1, 16, 64), (4, 3, 8, 32))
LINK_TILES = 8


@functools.lru_cache(maxsize=None)
def link_truth(t: int, batch: int, seq: int, d_model: int) -> int:
    """The bytes that cross IPU-Links in one training step in block 2's all-reduces (the
    first TransformerEncoderLayer), per replica: read from the profile's exchanges."""
    dev = devices.bow2000(tiles_per_ipu=LINK_TILES)
    r = dev.target.num_ipus // t
    x, y, _, _ = data.sort_tokens(n_train=r * batch, n_test=1, length=seq // 2)
    trainer = nn.Trainer(nn.small_gpt(seq_len=seq, d_model=d_model, dim_feedforward=2 * d_model),
                         dev, optimizer="adam", lr=3e-3, replicas=r, batch_size=batch,
                         tensor_parallel=t)
    trainer.fit(x, y, shuffle=False)
    p = trainer.profile()
    crossing = 0
    for rec in p.steps:
        if rec.name.startswith("2.") and "/all_reduce/" in rec.name and rec.index in p.traffic:
            src, dst, nbytes = p.traffic[rec.index]
            crossing += int(nbytes[src // p.tiles_per_ipu != dst // p.tiles_per_ipu].sum())
    return crossing // r


@question(
    "ex12.megatron_bytes", title="Predict: the IPU-Link bytes of Megatron's all-reduces",
    kind="predict",
    statement="""
A GPT block under Megatron's tensor parallelism over t IPUs (`tensor_parallel=t`) all-reduces
its activations [b, S, d] (float32) once after the attention and once after the feed-forward
in the forward pass, and the gradients of its inputs as often in the backward pass.
`gcl.all_reduce` over t IPUs is a ring: a reduce-scatter then an all-gather, t − 1 steps each,
in which every IPU sends a chunk of n / t values to the next. Write
`link_bytes(t, batch, seq, d_model)`: the bytes that cross IPU-Links in one training step in
ONE block's all-reduces, for one replica of `batch` sequences. The check trains small GPTs on
a Bow-2000 of 8-tile IPUs and reads the bytes from the profile's exchanges.
""",
    hints=[
        "How many all-reduces does a block do in one step? Two in the forward pass, and their "
        "mirrors in the backward pass. Each moves n = batch · seq · d_model float32 values.",
        "One ring: 2(t − 1) steps, in each of which ALL t IPUs send n / t values of 4 bytes at "
        "once: 2(t − 1) · n · 4 bytes cross the links per all-reduce.",
        "4 * 2 * (t - 1) * batch * seq * d_model * 4",
    ])
def _megatron_bytes(answer):
    said = [(case, link_truth(*case), number(call(answer, *case, what="link_bytes(t, batch, "
                                                                      "seq, d_model)")))
            for case in LINK_CASES]
    wrong = [(case, truth, got) for case, truth, got in said if got != truth]
    if not wrong:
        return "correct for all cases: four rings a block, 2(t − 1) · n · 4 bytes each"
    # a mistake is recognised when it explains every case (t = 2 and t = 4 tell them apart)
    known = ((lambda c, truth: truth / 2, "That is half: count the backward pass's two "
              "all-reduces as well as the forward's, and both halves of each ring (a "
              "reduce-scatter AND an all-gather)."),
             (lambda c, truth: truth / 4, "That is a quarter: a block does four all-reduces a "
              "step (two in the forward pass, two in the backward), and counts bytes, 4 per "
              "float32 value."),
             (lambda c, truth: truth / c[0], "That is what one IPU sends: all t IPUs of the "
              "replica send at once."))
    why = " ".join(text for wrong_value, text in known
                   if all(abs(got - wrong_value(case, truth)) < 0.5 for case, truth, got in said))
    (t, batch, seq, d), truth, got = wrong[0]
    raise Fail(f"t = {t}, {batch} sequence(s) of {seq} tokens, d_model {d}: you said "
               f"{got:,.0f} bytes; the simulator sent {truth:,} over the IPU-Links in block 2's "
               f"all-reduces. {why}".rstrip())


# --- 4 ---------------------------------------------------------------------------------------
FAST_TILES, FAST_BATCH, FAST_SEQ = 4, 16, 16
FAST_KEYS = ("replicas", "batch_size", "tensor_parallel", "pipeline", "micro_batches", "rts",
             "phases", "recompute", "precision", "optimizer_state")
FAST_PAR = Par(cycles=495_523, tolerance=1.1)


def _diagnose(cfg) -> str:
    """What in this configuration costs cycles the par does not spend."""
    notes = []
    if cfg.precision == "fp32":
        notes.append("fp32: the products run at half the fp16 rate and every exchange moves "
                     "twice the bytes.")
    if not cfg.rts and cfg.replicas > 1:
        notes.append(f"without RTS each of the {cfg.replicas} replicas runs Adam's update on "
                     "every weight; with rts=True each updates its shard (1/r of them).")
    if cfg.phases > 1 or cfg.optimizer_state == "off-chip":
        notes.append("Streaming Memory: the weights or Adam's moments cross the host links "
                     "every step; they fit on chip here.")
    if cfg.pipeline is not None:
        notes.append("a pipeline pays its bubble: its stages wait for each other.")
    if cfg.recompute:
        notes.append("recompute runs the forward pass twice.")
    return "".join(f"\n  · {n}" for n in notes)


def _too_many_ipus(cfg) -> str:
    """'t · p · r = 4 · 1 · 8 = 32 IPUs, but ...' when the replicas' IPUs exceed the Pod16's."""
    t, p, r = cfg.tensor_parallel_ipus, cfg.num_stages, cfg.replicas or 1
    if t * p * r <= 16:
        return ""
    return (f"t · p · r = {t} · {p} · {r} = {t * p * r} IPUs, but the Pod16 has 16: each of the "
            f"{r} replicas gets {16 // r} IPU(s), and tensor_parallel = {t} with {p} pipeline "
            f"stage(s) needs {t * p}. Use fewer replicas (with a bigger batch_size: replicas × "
            f"batch_size = {FAST_BATCH}) or a smaller t.")


@question(
    "ex12.fastest", title="Performance: the fastest training step of the small GPT on a Pod16",
    kind="performance",
    statement=f"""
Train the small GPT (`nn.small_gpt(seq_len={FAST_SEQ})`, Adam, lr 3e-3) on a Pod16 whose IPUs
are cut down to **{FAST_TILES} tiles** (`devices.pod(16, tiles_per_ipu={FAST_TILES})`) with a
global batch of **{FAST_BATCH}** sequences of the sorting task per step. Give `config`, a dict
of `nn.Trainer` options among {', '.join(f'`{k}`' for k in FAST_KEYS)}
(`replicas × batch_size = {FAST_BATCH}`; t · p · r may not exceed the 16 IPUs). It must fit in
tile memory; the check trains one step and grades its simulated cycles. **Par**:
{FAST_PAR.cycles:,} cycles, within {FAST_PAR.tolerance:g}×.
""",
    par=FAST_PAR,
    hints=[
        "Notebook 12 section 4 compares the mappings; the MappingExplorer runs one in a few "
        "seconds. Read trainer.profile().phase_totals(): where do the cycles go?",
        "Adam's update runs on every replica for the weights it holds: RTS shards it. Tensor "
        "parallelism shrinks each IPU's share of the products and the update, and pays two "
        "all-reduces a block each way. Half precision doubles the products' rate.",
        "{'replicas': 4, 'batch_size': 4, 'tensor_parallel': 4, 'rts': True, "
        "'precision': 'fp16'}",
    ])
def _fastest(config):
    cfg = training_config(config, FAST_KEYS, FAST_BATCH, "sequences", optimizer="adam",
                          lr=3e-3, seed=12)
    x, y, _, _ = data.sort_tokens(n_train=FAST_BATCH, n_test=1, length=FAST_SEQ // 2)
    try:
        t = nn.Trainer(nn.small_gpt(seq_len=FAST_SEQ), devices.pod(16, tiles_per_ipu=FAST_TILES),
                       config=cfg)
        t.fit(x, y, shuffle=False)
    except TileMemoryError as e:
        raise Fail(f"your configuration does not fit in tile memory: {e}") from None
    except IpuLabError as e:
        raise Fail(f"your configuration could not be trained: {_too_many_ipus(cfg) or e}") from None
    profile = t.profile()
    report = grade_par(profile, FAST_PAR, _diagnose(cfg))
    return (f"correct; {report.text}: {FAST_BATCH * profile.clock_hz / report.cycles:,.0f} "
            "sequences/s (simulated)", {"cycles": report.cycles})
