"""Exercise set 07 · PopLibs: fused element-wise maps, reductions, convolution arithmetic, and
operands mapped where the work happens."""
import numpy as np

from .... import poplar, poputil
from ....poplar import program as prog
from ..messages import Fail
from ..kit import Kit, call, compare, exchange_note, grade_par, predicted
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex07", "07_popLibs_ops_and_conv.ipynb", "PopLibs operations",
             "One fused expression, a reduction, the arithmetic of a convolution, and operands "
             "mapped where the work is.")


def _linear(kit, name, shape):
    t = kit.var(name, poplar.FLOAT, shape)
    poputil.map_tensor_linearly(kit.g, t)
    return t


def _result(kit, name, t, shape):
    """Register the learner's result tensor `t` under `name`, after checking its shape."""
    if not isinstance(t, poplar.Tensor):
        raise Fail(f"your function should return the result tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise Fail(f"the result has shape {list(t.shape)}, expected {list(shape)}")
    kit.tensors[name] = t
    kit.reads.append(name)
    kit.write(name, filled(shape))          # before every run: a value no right answer leaves


# --- 1 ---------------------------------------------------------------------------------------
@question(
    "ex07.fused", title="One fused expression", kind="graph",
    statement="""
Write `fused(g, x, w, b, seq)` returning `y = relu(x·w + b)` (element-wise; `x`, `w` are
[R, C], `b` is [C], broadcast over the rows), computed by **one** compute set: one
`popops.map` of an expression over the placeholders `_1, _2, _3`. The check runs two shapes on 8
tiles.
""",
    hints=[
        "popops.map(g, expression, [x, w, b], seq) applies the expression element by element; "
        "_1, _2, _3 stand for the tensors in the list.",
        "relu(v) = max(v, 0): expr.maximum(v, 0.0) builds it inside the same expression.",
        "return popops.map(g, expr.maximum(_1 * _2 + _3, 0.0), [x, w, b], seq).",
    ])
def _fused(build):
    rng = np.random.default_rng(701)
    for rows, cols in ((32, 12), (9, 7)):
        kit = Kit(8)
        x, w, b = (_linear(kit, n, s) for n, s in (("x", [rows, cols]), ("w", [rows, cols]),
                                                    ("b", [cols])))
        seq = prog.Sequence()
        _result(kit, "y", call(build, kit.g, x, w, b, seq, what="fused(g, x, w, b, seq)"),
                (rows, cols))
        xv, wv = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
        bv = rng.standard_normal(cols).astype(np.float32)
        got = kit.run(seq, x=xv, w=wv, b=bv)["y"]
        compare_filled(kit, "y", got, np.maximum(xv.astype(np.float64) * wv + bv, 0), rtol=1e-5,
                       atol=1e-6, case=f" (shape {rows} × {cols})")
        names = [s.name for s in kit.profile.steps]
        if len(names) != 1:
            raise Fail(f"correct, but your program runs {len(names)} compute sets ({names}): "
                       "each pays a sync, a loop and a temporary tensor. Write the whole thing "
                       "as ONE expression in one popops.map.")
    return "correct, in one compute set"


# --- 2 ---------------------------------------------------------------------------------------
@question(
    "ex07.row_norms", title="A reduction: row lengths", kind="graph",
    statement="""
Write `row_norms(g, x, seq)` returning `n` with `n[i] = sqrt(sum_j x[i, j]²)` for a [R, C] tensor
`x`, using `popops.reduce` (which operation squares and adds?) and an element-wise square root.
The check runs two shapes on 8 tiles.
""",
    hints=[
        "popops.reduce(g, t, dims, op, seq) reduces over the dimensions listed in dims.",
        "popops.Operation.SQUARE_ADD adds the squares; reduce over dimension 1 (the columns) to "
        "get one value per row. popops.sqrt(g, t, seq) takes the root.",
        "return popops.sqrt(g, popops.reduce(g, x, [1], popops.Operation.SQUARE_ADD, seq), seq).",
    ])
def _row_norms(build):
    rng = np.random.default_rng(702)
    for rows, cols in ((40, 24), (7, 5)):
        kit = Kit(8)
        x = _linear(kit, "x", [rows, cols])
        seq = prog.Sequence()
        n = call(build, kit.g, x, seq, what="row_norms(g, x, seq)")
        if isinstance(n, poplar.Tensor) and tuple(n.shape) == (cols,) and rows != cols:
            raise Fail(f"the result has shape [{cols}]: one value per COLUMN. Reduce over "
                       "dimension 1 (the columns) to get one value per row.")
        _result(kit, "n", n, (rows,))
        xv = rng.standard_normal((rows, cols)).astype(np.float32)
        got = kit.run(seq, x=xv)["n"]
        compare_filled(kit, "n", got, np.sqrt((xv.astype(np.float64) ** 2).sum(axis=1)),
                       rtol=1e-5, atol=1e-6, case=f" (shape {rows} × {cols})")
    return "correct for both shapes"


# --- 3 ---------------------------------------------------------------------------------------
CONV_X, CONV_W, CONV_STRIDE, CONV_PAD = (2, 3, 10, 10), (8, 3, 3, 3), 2, 1


@question(
    "ex07.conv_macs", title="Predict: the work of a convolution", kind="predict",
    statement=f"""
`poplin.conv2d` of `x` with shape {list(CONV_X)} (NCHW) and `w` with shape {list(CONV_W)}
(out channels, in channels, kh, kw), stride {CONV_STRIDE}, padding {CONV_PAD}. How many
**multiply-adds** does it do? (`poplin.plan_conv2d(...).flops` counts 2 FLOP per multiply-add.)
""",
    hints=[
        "Output size: (H + 2·padding − kh) // stride + 1 in each direction.",
        "Each output value (one per image, out channel and output position) is one dot product of "
        "in_channels × kh × kw multiply-adds.",
        "2 images × 8 channels × 5 × 5 positions × (3 × 3 × 3).",
    ])
def _conv_macs(answer):
    from .... import poplin
    plan = poplin.plan_conv2d(Kit(8).target, CONV_X, CONV_W, stride=CONV_STRIDE,
                              padding=CONV_PAD)
    truth = plan.flops // 2
    n, c, h, _ = CONV_X
    o, _, kh, kw = CONV_W
    return predicted(answer, truth, {
        2 * truth: "that counts FLOPs (2 per multiply-add); the question asks for multiply-adds.",
        n * o * h * h * c * kh * kw: "that ignores the stride: with stride 2 the output is 5 × 5.",
        n * o * 4 * 4 * c * kh * kw: "that ignores the padding: with padding 1 the output is 5 × 5.",
    }, unit="multiply-adds")


# --- 4 ---------------------------------------------------------------------------------------
ALIGN_TILES, ALIGN_SHAPE = 16, (64, 48)
ALIGN_PAR = Par(cycles=1362, tolerance=1.05)


@question(
    "ex07.aligned", title="Performance: operands where the work is", kind="performance",
    statement=f"""
`x` ({ALIGN_SHAPE[0]} × {ALIGN_SHAPE[1]}) is mapped for you, in blocks spread over the
{ALIGN_TILES} tiles in an unusual order. Write `make_w(g, x)` returning a NEW variable `w` of
the same shape (mapped as you choose) so that `popops.map(g, sqrt(_1*_1 + _2*_2), [x, w], seq)`
is as fast as it can be. **Par**: {ALIGN_PAR.cycles:,} cycles, within 1.05×.
""",
    par=ALIGN_PAR,
    hints=[
        "map runs where its output lives, and the output is mapped like its largest input — x. "
        "Any element of w held on another tile must cross the exchange first.",
        "Map w exactly like x: read x's mapping with g.get_tile_mapping(x) and give it to "
        "g.set_tile_mapping(w, ...) — or let the graph clone it.",
        "return g.clone(x, 'w')  (a new variable with x's shape, type and mapping).",
    ])
def _aligned(make_w):
    from .... import popops
    from ....popops.expr import _1, _2
    rng = np.random.default_rng(704)
    rows, cols = ALIGN_SHAPE
    kit = Kit(ALIGN_TILES)
    n = rows * cols
    order = list(rng.permutation(ALIGN_TILES))
    mapping = [[] for _ in range(ALIGN_TILES)]
    for k, tile in enumerate(order):
        mapping[tile] = [(k * n // ALIGN_TILES, (k + 1) * n // ALIGN_TILES)]
    x = kit.var("x", poplar.FLOAT, [rows, cols], tile=mapping)
    w = call(make_w, kit.g, x, what="make_w(g, x)")
    if not isinstance(w, poplar.Tensor) or tuple(w.shape) != (rows, cols):
        raise Fail(f"make_w should return a tensor of shape [{rows}, {cols}], got "
                   f"{getattr(w, 'shape', type(w).__name__)}")
    if np.intersect1d(w.ids, x.ids).size:
        raise Fail("w shares elements with x: create a new variable (g.add_variable or "
                   "g.clone), the host writes its own values into it")
    kit.tensors["w"] = w
    seq = prog.Sequence()
    h = popops.map(kit.g, popops.expr.sqrt(_1 * _1 + _2 * _2), [x, w], seq, name="hypot")
    kit.tensors["h"] = h
    kit.reads.append("h")
    xv, wv = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    got = kit.run(seq, x=xv, w=wv)["h"]
    compare(None, "h", got, np.hypot(xv.astype(np.float64), wv), rtol=1e-5)
    moved = int(kit.profile.exchange_traffic()[2].sum())
    report = grade_par(kit.profile, ALIGN_PAR, (
        f"\n  {moved:,} bytes of w crossed the exchange to reach the tiles that hold x."
        if moved else "") + exchange_note(kit, 2, ignore=("x",)))
    return f"correct; {report.text}", {"cycles": report.cycles}
