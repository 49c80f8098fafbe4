"""Codelets: fields of every kind, remote data, MultiVertex, INT and HALF, cycle estimates, and
the three codelet modes (compiled, checked, python) agreeing bit for bit."""
import numpy as np
import pytest
from codelets import Dot, DotFast, SumVertex
from helpers import MODES, bits, run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar, poputil
from ipulab.errors import CodeletError
from ipulab.poplar import codelet, program as prog


class Product(poplar.Vertex):
    """float32 arithmetic only: a running product and an elementwise a*b+c."""
    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    b = poplar.Input(poplar.Vector[poplar.FLOAT])
    c = poplar.Input(poplar.Vector[poplar.FLOAT])
    prod = poplar.Output(poplar.FLOAT)
    fma = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(a, b, c, prod, fma):
        p = a[0]
        for i in range(1, len(a)):
            p *= a[i]
        prod[0] = p
        for i in range(len(a)):
            fma[i] = a[i] * b[i] + c[i]


class RowSums(poplar.Vertex):
    """A VectorList in, a Vector out, a scalar INT in."""
    rows = poplar.Input(poplar.VectorList[poplar.FLOAT])
    scale = poplar.Input(poplar.INT)
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(rows, scale, out):
        for r in range(len(rows)):
            s = np.float32(0.0)
            row = rows[r]
            for j in range(len(row)):
                s += row[j]
            out[r] = s * scale[0]


class ListWalk(poplar.Vertex):
    """A VectorList walked by iteration and read by negative index, another written; `past`
    reads one region past the end when non-zero."""
    rows = poplar.Input(poplar.VectorList[poplar.FLOAT])
    past = poplar.Input(poplar.INT)
    out = poplar.Output(poplar.VectorList[poplar.FLOAT])

    @staticmethod
    def compute(rows, past, out):
        r = 0
        for row in rows:
            o = out[r]
            for j in range(len(row)):
                o[j] = row[j] * rows[-1][0]
            r += 1
        if past[0]:
            out[0][0] = rows[len(rows)][0]


class Scale(poplar.Vertex):
    """InOut: x <- x * k + 1, reading before writing."""
    x = poplar.InOut(poplar.Vector[poplar.FLOAT])
    k = poplar.Input(poplar.FLOAT)

    @staticmethod
    def compute(x, k):
        for i in range(len(x)):
            x[i] = x[i] * k[0] + np.float32(1.0)


class Fill(poplar.MultiVertex):
    """Each worker writes its own share of out (every 6th element from worker_id)."""
    out = poplar.Output(poplar.Vector[poplar.INT])

    @staticmethod
    def compute(worker_id, out):
        for i in range(worker_id, len(out), 6):
            out[i] = worker_id * 1000 + i


class IntOps(poplar.Vertex):
    a = poplar.Input(poplar.Vector[poplar.INT])
    b = poplar.Input(poplar.Vector[poplar.INT])
    out = poplar.Output(poplar.Vector[poplar.INT])
    total = poplar.Output(poplar.UNSIGNED_INT)

    @staticmethod
    def compute(a, b, out, total):
        t = 0
        for i in range(len(a)):
            out[i] = a[i] * 3 - b[i] // 2
            t += a[i] % 7
        total[0] = t


class HalfMulAdd(poplar.Vertex):
    a = poplar.Input(poplar.Vector[poplar.HALF])
    b = poplar.Input(poplar.Vector[poplar.HALF])
    out = poplar.Output(poplar.Vector[poplar.HALF])
    acc = poplar.InOut(poplar.HALF)

    @staticmethod
    def compute(a, b, out, acc):
        for i in range(len(a)):
            out[i] = a[i] * b[i] + a[i]
        acc[0] += a[0] / np.float32(3.0)


class HalfAccumulate(poplar.Vertex):
    """Writes the same HALF element many times, reading it back in between."""
    a = poplar.Input(poplar.Vector[poplar.HALF])
    acc = poplar.InOut(poplar.HALF)

    @staticmethod
    def compute(a, acc):
        for i in range(len(a)):
            acc[0] += a[i]


class Estimated(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT])
    rows = poplar.Input(poplar.VectorList[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, rows, out):
        out[0] = inp[0]

    @staticmethod
    def cycle_estimate(inp, rows, out):
        return 3 * inp + 100 * len(rows) + sum(rows) + out


def test_sum_of_slices_on_other_tiles(dev4, mode):
    """Poplar's tutorial 2: vertex i on tile i sums v1[i:], data living on tiles 0..3."""
    g = poplar.Graph(dev4.target)
    g.add_codelets(SumVertex)
    v1 = g.add_variable(poplar.FLOAT, [4], "v1")
    v2 = g.add_variable(poplar.FLOAT, [4], "v2")
    for i in range(4):
        g.set_tile_mapping(v1[i], i)
        g.set_tile_mapping(v2[i], i)
    c1 = g.add_constant(poplar.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    g.set_tile_mapping(c1, 0)
    cs = g.add_compute_set("sum")
    for i in range(4):
        v = g.add_vertex(cs, "SumVertex", {"in": v1[i:], "out": v2[i]})
        g.set_tile_mapping(v, i)
    g.create_host_read("v2", v2)
    e = run_engine(g, prog.Sequence([prog.Copy(c1, v1), prog.Execute(cs)]), dev4, mode[1])
    np.testing.assert_array_equal(e.read_tensor("v2"), np.array([7, 6, 4.5, 2.5], np.float32))
    # the data of v1[i+1:] had to be brought to tile i: tiles 1..3 send, 0..2 receive
    prof = e.profile()
    assert (prof.exchange_cycles > 0).all()
    assert prof.vertex_stats["SumVertex"]["count"] == 4


def test_matrix_vector_product_one_vertex_per_row(dev16, mode):
    rng = np.random.default_rng(1)
    rows, cols = 48, 20
    m_host = rng.standard_normal((rows, cols)).astype(np.float32)
    x_host = rng.standard_normal(cols).astype(np.float32)
    g = poplar.Graph(dev16.target)
    m = g.add_variable(poplar.FLOAT, [rows, cols], "m")
    x = g.add_variable(poplar.FLOAT, [cols], "x")
    y = g.add_variable(poplar.FLOAT, [rows], "y")
    poputil.map_tensor_linearly(g, m, 0, cols)          # whole rows, 3 per tile
    g.set_tile_mapping(x, 0)
    poputil.map_tensor_linearly(g, y, 0, 1)
    cs = g.add_compute_set("mv")
    for r in range(rows):
        g.add_vertex(cs, Dot, {"a": m[r], "b": x, "out": y[r]}, tile=r * 16 // rows)
    g.create_host_write("m", m)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev16)
    e.write_tensor("m", m_host)
    e.write_tensor("x", x_host)
    e.run()
    got = e.read_tensor("y")
    np.testing.assert_allclose(got, m_host.astype(np.float64) @ x_host, rtol=1e-5, atol=1e-5)
    # exactly: float32 products accumulated in float64, one row at a time
    exact = [np.float32(sum(float(p) for p in m_host[r] * x_host)) for r in range(rows)]
    np.testing.assert_array_equal(bits(got), bits(np.array(exact, np.float32)))
    prof = e.profile()
    assert (prof.compute_cycles > 0).all()
    assert prof.exchange_cycles[0] > 0 and (prof.exchange_cycles[1:] > 0).all()   # x goes out


def test_vector_list_scalar_and_remote_fields(dev4, mode):
    g = poplar.Graph(dev4.target)
    m = g.add_variable(poplar.FLOAT, [3, 4], "m")
    g.set_tile_mapping(m, 0)
    g.set_tile_mapping(m[1], 1)
    k = g.add_constant(poplar.INT, [1], 3, "k")
    g.set_tile_mapping(k, 3)
    out = g.add_variable(poplar.FLOAT, [5], "out")
    g.set_tile_mapping(out, 2)
    cs = g.add_compute_set("rows")
    # a list of tensors of different lengths and tiles, and a 2-D tensor as a list of rows
    g.add_vertex(cs, RowSums, {"rows": [m[0], m[1, 1:], m[2, ::2]], "scale": k[0],
                               "out": out[:3]}, tile=2)
    g.add_vertex(cs, RowSums, {"rows": m[1:].reverse(1), "scale": k[0], "out": out[3:]},
                 tile=1)
    g.create_host_write("m", m)
    g.create_host_read("out", out)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev4)
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    e.write_tensor("m", h)
    e.run()
    expected = 3 * np.array([h[0].sum(), h[1, 1:].sum(), h[2, ::2].sum(), h[1].sum(),
                             h[2].sum()], np.float32)
    np.testing.assert_array_equal(e.read_tensor("out"), expected)


def _list_walk(dev, mode, past: int):
    g = poplar.Graph(dev.target)
    m = g.add_variable(poplar.FLOAT, [3, 4], "m")
    out = g.add_variable(poplar.FLOAT, [3, 4], "out")
    flag = g.add_constant(poplar.INT, [1], past, "past")
    for t in (m, out, flag):
        g.set_tile_mapping(t, 1)
    g.set_tile_mapping(m[2], 3)                      # one region from another tile
    cs = g.add_compute_set("walk")
    g.add_vertex(cs, ListWalk, {"rows": [m[0], m[1, 1:], m[2]], "past": flag[0],
                                "out": [out[0], out[1, 1:], out[2]]}, tile=1)
    g.create_host_write("m", m)
    g.create_host_read("out", out)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev)
    e.write_tensor("m", np.arange(12, dtype=np.float32).reshape(3, 4))
    return e


def test_vector_list_iteration_negative_index_and_past_the_end(dev4, mode):
    e = _list_walk(dev4, mode, 0)
    e.run()
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = h * h[2, 0]
    want[1, 0] = 0.0                                 # out[1, 0] is in no region
    np.testing.assert_array_equal(e.read_tensor("out"), want)
    e = _list_walk(dev4, mode, 1)
    with pytest.raises(CodeletError, match=r"ListWalk: vertex \d+ on tile 1 .*IndexError"):
        e.run()


def test_inout_reads_then_writes_in_place_and_remote(dev4, mode):
    g = poplar.Graph(dev4.target)
    x = g.add_variable(poplar.FLOAT, [8], "x")
    g.set_tile_mapping(x, [[(0, 4)], [(4, 8)]])
    k = g.add_constant(poplar.FLOAT, [1], 2.0, "k")
    g.set_tile_mapping(k, 0)
    cs = g.add_compute_set("scale")
    g.add_vertex(cs, Scale, {"x": x[:4], "k": k[0]}, tile=0)          # local, contiguous
    g.add_vertex(cs, Scale, {"x": x[4:].reverse(0), "k": k[0]}, tile=2)  # remote, reversed
    g.create_host_write("x", x)
    g.create_host_read("x-read", x)
    e = poplar.Engine(g, prog.Repeat(2, prog.Execute(cs)), mode[1])
    e.load(dev4)
    h = np.arange(8, dtype=np.float32)
    e.write_tensor("x", h)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x-read"), (h * 2 + 1) * 2 + 1)


def test_multivertex_each_worker_writes_its_part(dev4, mode):
    g = poplar.Graph(dev4.target)
    out = g.add_variable(poplar.INT, [20], "out")
    g.set_tile_mapping(out, 3)
    cs = g.add_compute_set("fill")
    g.add_vertex(cs, Fill, {"out": out}, tile=3)
    g.create_host_read("out", out)
    e = run_engine(g, prog.Execute(cs), dev4, mode[1])
    i = np.arange(20)
    np.testing.assert_array_equal(e.read_tensor("out"), (i % 6) * 1000 + i)


def test_int_and_unsigned_fields(dev4, mode):
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.INT, [6], "a")
    b = g.add_variable(poplar.INT, [6], "b")
    out = g.add_variable(poplar.INT, [6], "out")
    total = g.add_variable(poplar.UNSIGNED_INT, [1], "total")
    for t in (a, b, out, total):
        g.set_tile_mapping(t, 1)
    cs = g.add_compute_set("ints")
    g.add_vertex(cs, IntOps, {"a": a, "b": b, "out": out, "total": total[0]}, tile=1)
    for t in (a, b):
        g.create_host_write(t.name, t)
    g.create_host_read("out", out)
    g.create_host_read("total", total)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev4)
    ah = np.array([-7, -1, 0, 5, 100, 12345], np.int32)
    bh = np.array([-3, 3, 9, -9, 1, 7], np.int32)
    e.write_tensor("a", ah)
    e.write_tensor("b", bh)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("out"), ah * 3 - bh // 2)   # floor division
    assert e.read_tensor("total").tolist() == [int(np.sum(ah % 7))]
    assert e.read_tensor("total").dtype == np.uint32


def test_half_fields_round_to_float16(dev4, mode):
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.HALF, [7], "a")
    b = g.add_variable(poplar.HALF, [7], "b")
    out = g.add_variable(poplar.HALF, [7], "out")
    acc = g.add_variable(poplar.HALF, [1], "acc")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)                          # remote: through an exchange buffer
    g.set_tile_mapping(out, [[(0, 3)], [(3, 7)]])     # partly remote output
    g.set_tile_mapping(acc, 0)
    cs = g.add_compute_set("half")
    g.add_vertex(cs, HalfMulAdd, {"a": a, "b": b, "out": out, "acc": acc[0]}, tile=0)
    for t in (a, b, acc):
        g.create_host_write(t.name, t)
    g.create_host_read("out", out)
    g.create_host_read("acc-read", acc)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev4)
    rng = np.random.default_rng(3)
    ah = rng.standard_normal(7).astype(np.float16)
    bh = rng.standard_normal(7).astype(np.float16)
    e.write_tensor("a", ah)
    e.write_tensor("b", bh)
    e.write_tensor("acc", np.array([0.1], np.float16))
    e.run()
    out_h = e.read_tensor("out")
    assert out_h.dtype == np.float16
    a32, b32 = ah.astype(np.float32), bh.astype(np.float32)
    # computed in float32 inside the codelet, rounded to half where it is stored
    np.testing.assert_array_equal(bits(out_h), bits((a32 * b32 + a32).astype(np.float16)))
    acc32 = np.float32(np.float16(0.1)) + a32[0] / np.float32(3.0)
    np.testing.assert_array_equal(bits(e.read_tensor("acc-read")),
                                  bits(np.array([acc32], np.float16)))


def test_half_rounded_on_every_write(dev4, mode):
    """DESIGN section 5: HALF data 'must be rounded to half precision on every write'. A codelet
    that accumulates into a HALF InOut reads back the rounded value each time, as on an IPU
    where the element is 16 bits wide."""
    g = poplar.Graph(dev4.target)
    a = g.add_variable(poplar.HALF, [16], "a")
    acc = g.add_variable(poplar.HALF, [1], "acc")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(acc, 0)
    cs = g.add_compute_set("acc")
    g.add_vertex(cs, HalfAccumulate, {"a": a, "acc": acc[0]}, tile=0)
    g.create_host_write("a", a)
    g.create_host_read("acc", acc)
    e = poplar.Engine(g, prog.Execute(cs), mode[1])
    e.load(dev4)
    # 2048 + 1 is not a half: each +1 rounds back to 2048 when stored as half
    ah = np.array([2048] + [1] * 15, np.float16)
    e.write_tensor("a", ah)
    e.run()
    expected = np.float16(0)
    for x in ah:
        expected = np.float16(np.float32(expected) + np.float32(x))
    assert expected == 2048
    assert e.read_tensor("acc").tolist() == [2048.0]


def test_cycle_estimate_is_used(dev4):
    g = poplar.Graph(dev4.target)
    x = g.add_variable(poplar.FLOAT, [10], "x")
    y = g.add_variable(poplar.FLOAT, [2], "y")
    g.set_tile_mapping(x, 2)
    g.set_tile_mapping(y, 2)
    cs = g.add_compute_set("est")
    g.add_vertex(cs, Estimated, {"inp": x[:7], "rows": [x[:2], x[2:5]], "out": y[0]}, tile=2)
    v = g.add_vertex(cs, Estimated, {"inp": x[:1], "rows": [], "out": y[1]}, tile=2)
    g.set_perf_estimate(v, 5)                         # overrides cycle_estimate
    e = run_engine(g, prog.Execute(cs), dev4)
    est = 3 * 7 + 100 * 2 + (2 + 3) + 1
    prof = e.profile()
    assert prof.vertex_stats["Estimated"] == {"count": 2, "cycles": est + 5}
    assert prof.compute_cycles[2] == 6 * est
    assert prof.compute_cycles_excluding_idle[2] == est + 5


def test_default_estimate_is_overhead_plus_elements(dev4):
    g = poplar.Graph(dev4.target)
    x = g.add_variable(poplar.FLOAT, [10], "x")
    y = g.add_variable(poplar.FLOAT, [1], "y")
    g.set_tile_mapping(x, 1)
    g.set_tile_mapping(y, 1)
    cs = g.add_compute_set("sum")
    g.add_vertex(cs, SumVertex, {"in": x, "out": y[0]}, tile=1)
    prof = run_engine(g, prog.Execute(cs), dev4).profile()
    assert prof.vertex_stats["SumVertex"]["cycles"] == 10 + 11    # 10 + elements touched
    assert prof.compute_cycles[1] == 6 * 21


def test_add_codelets_from_a_list_and_by_class(dev4):
    g = poplar.Graph(dev4.target)
    g.add_codelets([SumVertex, Dot])
    cs = g.add_compute_set()
    x = g.add_variable(poplar.FLOAT, [2], "x")
    y = g.add_variable(poplar.FLOAT, [2], "y")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(y, 0)
    v = g.add_vertex(cs, "Dot")
    g.connect(v["a"], x)
    g.connect(v["b"], x)
    g.connect(v["out"], y[0])
    g.set_tile_mapping(v, 0)
    w = g.add_vertex(cs, SumVertex, {"in": x}, tile=0)
    g.connect(w["out"], y[1])
    assert v.codelet is Dot and w.codelet is SumVertex
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    e = poplar.Engine(g, prog.Execute(cs))
    e.load(dev4)
    e.write_tensor("x", np.array([3, 4], np.float32))
    e.run()
    assert e.read_tensor("y").tolist() == [25.0, 7.0]


# --- the three modes agree bit for bit --------------------------------------------------------
DEV4 = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)
finite32 = st.floats(-1e4, 1e4, width=32, allow_nan=False, allow_infinity=False)
factors = st.floats(-4, 4, width=32, allow_nan=False, allow_infinity=False)


def _build_arith(n):
    g = poplar.Graph(DEV4.target)
    x = g.add_variable(poplar.FLOAT, [n], "x")
    a = g.add_variable(poplar.FLOAT, [3, n], "abc")
    s = g.add_variable(poplar.FLOAT, [2], "s")
    f = g.add_variable(poplar.FLOAT, [n], "f")
    g.set_tile_mapping(x, [[(0, n // 2)], [(n // 2, n)]])    # half of it remote
    g.set_tile_mapping(a, 2)
    g.set_tile_mapping(s, 3)
    g.set_tile_mapping(f, 2)
    cs = g.add_compute_set("arith")
    g.add_vertex(cs, SumVertex, {"in": x, "out": s[0]}, tile=0)
    g.add_vertex(cs, Product, {"a": a[0], "b": a[1], "c": a[2], "prod": s[1], "fma": f}, tile=2)
    g.create_host_write("x", x)
    g.create_host_write("abc", a)
    g.create_host_read("s", s)
    g.create_host_read("f", f)
    return g, cs


@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=st.integers(1, 24))
def test_modes_agree_bit_for_bit(data, n):
    xs = np.array(data.draw(st.lists(finite32, min_size=n, max_size=n), label="x"), np.float32)
    abc = np.array(data.draw(st.lists(factors, min_size=3 * n, max_size=3 * n), label="abc"),
                   np.float32).reshape(3, n)
    g, cs = _build_arith(n)
    results = {}
    for name, options in MODES.items():
        e = poplar.Engine(g, prog.Execute(cs), options)
        e.load(DEV4)
        e.write_tensor("x", xs)
        e.write_tensor("abc", abc)
        e.run()
        results[name] = (e.read_tensor("s"), e.read_tensor("f"))
    for name in ("checked", "python"):
        for got, ref in zip(results[name], results["compiled"]):
            np.testing.assert_array_equal(bits(got), bits(ref), err_msg=name)
    # and the values are what the codelets say: float64 accumulation of float32 inputs...
    s = 0.0
    for v in xs:
        s += float(v)
    # ...and float32 products
    p = abc[0, 0]
    for v in abc[0, 1:]:
        p = np.float32(p * v)
    fma = (abc[0] * abc[1]).astype(np.float32) + abc[2]
    s_got, f_got = results["compiled"]
    assert bits(s_got).tolist() == bits(np.array([s, p], np.float32)).tolist()
    np.testing.assert_array_equal(bits(f_got), bits(fma.astype(np.float32)))


def test_fastmath_survives_inlining_into_the_driver():
    """A library codelet's compute is inlined into its batch driver, so the driver must be
    compiled with the codelet's fast-math flag, or the inlined loop loses it."""
    for cls in (Dot, DotFast):
        kinds = tuple(f.kind for f in cls.fields)
        driver = codelet._driver_for(cls, "compiled", kinds, 6)
        assert driver.targetoptions.get("fastmath", False) == cls.fastmath


def test_determinism_across_engines_and_runs(dev16):
    rng = np.random.default_rng(7)
    m_host = rng.standard_normal((32, 50)).astype(np.float32)
    x_host = rng.standard_normal(50).astype(np.float32)

    def build():
        g = poplar.Graph(dev16.target)
        m = g.add_variable(poplar.FLOAT, [32, 50], "m")
        x = g.add_variable(poplar.FLOAT, [50], "x")
        y = g.add_variable(poplar.FLOAT, [32], "y")
        poputil.map_tensor_linearly(g, m)
        poputil.map_tensor_linearly(g, x)
        poputil.map_tensor_linearly(g, y, 0, 1)
        cs = g.add_compute_set("mv")
        for r in range(32):
            g.add_vertex(cs, Dot, {"a": m[r], "b": x, "out": y[r]}, tile=r % 16)
        g.create_host_write("m", m)
        g.create_host_write("x", x)
        g.create_host_read("y", y)
        return g, prog.Sequence([prog.Execute(cs), prog.Copy(y[:16], y[16:])])

    outs, cycles = [], []
    for _ in range(2):
        g, p = build()
        e = poplar.Engine(g, p)
        e.load(dev16)
        for _ in range(2):
            e.write_tensor("m", m_host)
            e.write_tensor("x", x_host)
            e.run()
            outs.append(e.read_tensor("y"))
            prof = e.profile()
            cycles.append((prof.total_cycles, prof.compute_cycles.tolist(),
                           prof.exchange_cycles.tolist(), prof.to_json()))
    for o in outs[1:]:
        np.testing.assert_array_equal(bits(o), bits(outs[0]))
    assert all(c == cycles[0] for c in cycles[1:])
