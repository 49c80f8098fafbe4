"""Programs: Poplar's tutorial 1, copies, host handles, FIFOs, control flow, PrintTensor."""
import numpy as np
import pytest
from helpers import run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar
from ipulab.errors import EngineError, ProgramError
from ipulab.poplar import program as prog


def test_tutorial1_variables(dev4, capsys):
    """Poplar's tutorial 1 (tut1_variables), line for line, and its printed output."""
    g = poplar.Graph(dev4.target)
    v1 = g.add_variable(poplar.FLOAT, [4], "v1")
    v2 = g.add_variable(poplar.FLOAT, [4], "v2")
    v3 = g.add_variable(poplar.FLOAT, [4, 4], "v3")
    v4 = g.add_variable(poplar.INT, [10], "v4")
    for i in range(4):
        g.set_tile_mapping(v1[i], i)
        g.set_tile_mapping(v2[i], i)
    g.set_tile_mapping(v3, 0)
    g.set_tile_mapping(v4, 0)
    p = prog.Sequence()
    c1 = g.add_constant(poplar.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    g.set_tile_mapping(c1, 0)
    p.add(prog.Copy(c1, v1))
    p.add(prog.PrintTensor("v1-debug", v1))
    p.add(prog.Copy(v1, v2))
    p.add(prog.PrintTensor("v2-debug", v2))
    g.create_host_write("v3-write", v3)
    g.create_host_read("v3-read", v3)
    v1slice = v1.slice(0, 3)
    v3slice = v3.slice([1, 1], [2, 4])
    p.add(prog.Copy(v1slice, v3slice))
    in_stream = g.add_host_to_device_fifo("v4-input-stream", poplar.INT, 10)
    p.add(prog.Copy(in_stream, v4))
    p.add(prog.PrintTensor("v4-0", v4))
    p.add(prog.Copy(in_stream, v4))
    p.add(prog.PrintTensor("v4-1", v4))

    e = poplar.Engine(g, p)
    e.load(dev4)
    e.write_tensor("v3-write", np.zeros(16, np.float32))
    in_data = np.arange(30, dtype=np.int32)
    e.connect_stream("v4-input-stream", in_data)
    e.run(0)
    h3 = e.read_tensor("v3-read")
    assert capsys.readouterr().out.splitlines() == [
        "v1-debug: [1.0000000 1.5000000 2.0000000 2.5000000]",
        "v2-debug: [1.0000000 1.5000000 2.0000000 2.5000000]",
        "v4-0: [0 1 2 3 4 5 6 7 8 9]",
        "v4-1: [10 11 12 13 14 15 16 17 18 19]",
    ]
    expected = np.zeros((4, 4), np.float32)
    expected[1, 1:4] = [1.0, 1.5, 2.0]
    assert h3.shape == (4, 4) and h3.dtype == np.float32
    np.testing.assert_array_equal(h3, expected)

    # The FIFO is read circularly: the second run takes elements 20..29, then 0..9.
    e.run(0)
    out = capsys.readouterr().out.splitlines()
    assert out[2:] == ["v4-0: [20 21 22 23 24 25 26 27 28 29]",
                       "v4-1: [0 1 2 3 4 5 6 7 8 9]"]
    assert in_data.tolist() == list(range(30))          # the host buffer is only read


def test_copy_across_tiles_and_back(g4, dev4):
    a = g4.add_variable(poplar.FLOAT, [6], "a")
    b = g4.add_variable(poplar.FLOAT, [6], "b")
    c = g4.add_variable(poplar.FLOAT, [2, 3], "c")
    g4.set_tile_mapping(a, 0)
    g4.set_tile_mapping(b, [[], [(0, 3)], [], [(3, 6)]])
    g4.set_tile_mapping(c, 2)
    g4.create_host_write("a", a)
    g4.create_host_read("b", b)
    g4.create_host_read("c", c)
    p = prog.Sequence([prog.Copy(a, b), prog.Copy(b.reverse(0), c)])   # shapes may differ
    e = poplar.Engine(g4, p)
    e.load(dev4)
    data = np.array([3, 1, 4, 1, 5, 9], np.float32)
    e.write_tensor("a", data)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), data)
    np.testing.assert_array_equal(e.read_tensor("c"), data[::-1].reshape(2, 3))
    prof = e.profile()
    assert prof.exchange_cycles[0] > 0 and prof.exchange_cycles[1] > 0


def test_copy_of_slices(g4, dev4):
    m = g4.add_variable(poplar.INT, [4, 5], "m")
    g4.set_tile_mapping(m, [[(0, 5)], [(5, 10)], [(10, 15)], [(15, 20)]])
    g4.create_host_write("m", m)
    g4.create_host_read("m-read", m)
    # column 0 <- column 4 (reversed), and a block moved across tiles
    p = prog.Sequence([prog.Copy(m[::-1, 4], m[:, 0]),
                       prog.Copy(m.slice([0, 1], [2, 3]), m.slice([2, 2], [4, 4]))])
    e = poplar.Engine(g4, p)
    e.load(dev4)
    h = np.arange(20, dtype=np.int32).reshape(4, 5)
    e.write_tensor("m", h)
    e.run()
    exp = h.copy()
    exp[:, 0] = exp[::-1, 4]
    exp[2:4, 2:4] = exp[0:2, 1:3]
    np.testing.assert_array_equal(e.read_tensor("m-read"), exp)


def test_host_write_and_read(g4, dev4):
    v = g4.add_variable(poplar.UNSIGNED_INT, [2, 3], "v")
    g4.set_tile_mapping(v, 1)
    g4.create_host_write("w", v)
    g4.create_host_read("r", v)
    e = poplar.Engine(g4, prog.Sequence())
    e.load(dev4)
    data = np.array([[1, 2, 3], [4, 5, 2**32 - 1]], np.uint32)
    e.write_tensor("w", data)
    got = e.read_tensor("r")
    assert got.dtype == np.uint32 and got.shape == (2, 3)
    np.testing.assert_array_equal(got, data)
    got[0, 0] = 99                                  # a new array, not a view of the device
    np.testing.assert_array_equal(e.read_tensor("r"), data)
    e.write_tensor("w", np.arange(6, dtype=np.uint32))   # any shape with the right count
    np.testing.assert_array_equal(e.read_tensor("r"), np.arange(6).reshape(2, 3))


def test_half_host_write_rounds_to_half(g4, dev4):
    h = g4.add_variable(poplar.HALF, [3], "h")
    g4.set_tile_mapping(h, 0)
    g4.create_host_write("w", h)
    g4.create_host_read("r", h)
    e = poplar.Engine(g4, prog.Sequence())
    e.load(dev4)
    data = np.array([0.1, 1 / 3, 65504], np.float16)
    e.write_tensor("w", data)
    got = e.read_tensor("r")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, data)


def test_fifo_read_circularly_across_runs(g4, dev4):
    v = g4.add_variable(poplar.FLOAT, [10], "v")
    acc = g4.add_variable(poplar.FLOAT, [2, 10], "acc")
    g4.set_tile_mapping(v, 1)
    g4.set_tile_mapping(acc, 2)
    s = g4.add_host_to_device_fifo("in", poplar.FLOAT, 10)
    g4.create_host_read("acc", acc)
    p = prog.Sequence([prog.Copy(s, v), prog.Copy(v, acc[0]), prog.Copy(s, acc[1])])
    e = poplar.Engine(g4, p)
    e.load(dev4)
    host = np.arange(30, dtype=np.float32)
    e.connect_stream("in", host)
    # 30 elements, 10 per copy, two copies per run: each run continues where the last stopped
    expected = [[range(0, 10), range(10, 20)], [range(20, 30), range(0, 10)],
                [range(10, 20), range(20, 30)]]
    for run, rows in enumerate(expected):
        e.run()
        np.testing.assert_array_equal(e.read_tensor("acc"), np.array(rows, np.float32),
                                      err_msg=f"run {run}")


def test_fifo_sees_host_changes_between_runs(g4, dev4):
    v = g4.add_variable(poplar.INT, [4], "v")
    g4.set_tile_mapping(v, 0)
    g4.create_host_read("v", v)
    s = g4.add_host_to_device_fifo("in", poplar.INT, 4)
    e = poplar.Engine(g4, prog.Copy(s, v))
    e.load(dev4)
    host = np.zeros(4, np.int32)
    e.connect_stream("in", host)
    e.run()
    host[:] = [7, 8, 9, 10]
    e.run()
    np.testing.assert_array_equal(e.read_tensor("v"), [7, 8, 9, 10])


def test_device_to_host_fifo_written_circularly_in_place(g4, dev4):
    v = g4.add_variable(poplar.FLOAT, [4], "v")
    g4.set_tile_mapping(v, [[(0, 2)], [], [(2, 4)], []])
    g4.create_host_write("v", v)
    out = g4.add_device_to_host_fifo("out", poplar.FLOAT, 4)
    e = poplar.Engine(g4, prog.Copy(v, out))
    e.load(dev4)
    host = np.full((3, 4), -1, np.float32)             # room for three copies
    e.connect_stream("out", host)
    for r in range(4):
        e.write_tensor("v", np.full(4, r, np.float32) + np.arange(4, dtype=np.float32) / 10)
        e.run()
        if r == 1:
            np.testing.assert_array_equal(host[2], -1)     # not yet written
    # written in place (same array), the 4th copy wrapped round to the start
    np.testing.assert_allclose(host, [[3.0, 3.1, 3.2, 3.3], [1.0, 1.1, 1.2, 1.3],
                                      [2.0, 2.1, 2.2, 2.3]], rtol=1e-6)


def test_reconnecting_a_stream_restarts_it(g4, dev4):
    v = g4.add_variable(poplar.INT, [2], "v")
    g4.set_tile_mapping(v, 0)
    g4.create_host_read("v", v)
    s = g4.add_host_to_device_fifo("in", poplar.INT, 2)
    e = poplar.Engine(g4, prog.Copy(s, v))
    e.load(dev4)
    e.connect_stream("in", np.arange(6, dtype=np.int32))
    e.run()
    e.run()
    assert e.read_tensor("v").tolist() == [2, 3]
    e.connect_stream("in", np.arange(10, 16, dtype=np.int32))
    e.run()
    assert e.read_tensor("v").tolist() == [10, 11]


# --- control flow ---------------------------------------------------------------------------
class AddOne(poplar.Vertex):
    x = poplar.InOut(poplar.INT)

    @staticmethod
    def compute(x):
        x[0] += 1


class CountDown(poplar.Vertex):
    """Decrement the counter and report whether to go on."""
    n = poplar.InOut(poplar.INT)
    more = poplar.Output(poplar.BOOL)

    @staticmethod
    def compute(n, more):
        n[0] -= 1
        more[0] = n[0] > 0


@pytest.fixture
def counter(g4):
    """An INT counter on tile 1 and a compute set adding one to it."""
    x = g4.add_variable(poplar.INT, [1], "x")
    g4.set_tile_mapping(x, 1)
    cs = g4.add_compute_set("add-one")
    g4.add_vertex(cs, AddOne, {"x": x[0]}, tile=1)
    g4.create_host_read("x", x)
    g4.create_host_write("x-write", x)
    return x, cs


def test_repeat(g4, dev4, counter):
    x, cs = counter
    e = run_engine(g4, prog.Repeat(7, prog.Execute(cs)), dev4)
    assert e.read_tensor("x").tolist() == [7]
    assert sum(r.kind == "execute" for r in e.profile().steps) == 7
    e.run()
    assert e.read_tensor("x").tolist() == [14]
    e = run_engine(g4, prog.Repeat(0, prog.Execute(cs)), dev4)
    assert e.read_tensor("x").tolist() == [0]
    nested = prog.Repeat(3, prog.Sequence([prog.Execute(cs), prog.Repeat(2, prog.Execute(cs))]))
    assert run_engine(g4, nested, dev4).read_tensor("x").tolist() == [9]


@pytest.mark.parametrize("dtype,value,branch", [(poplar.BOOL, True, "then"),
                                                (poplar.BOOL, False, "else"),
                                                (poplar.INT, 5, "then"), (poplar.INT, 0, "else"),
                                                (poplar.UNSIGNED_INT, 1, "then")])
def test_if_else(g4, dev4, capsys, dtype, value, branch):
    pred = g4.add_variable(dtype, [1], "pred")
    g4.set_tile_mapping(pred, 2)
    g4.create_host_write("pred", pred)
    r = g4.add_variable(poplar.INT, [1], "r")
    g4.set_tile_mapping(r, 3)
    g4.create_host_read("r", r)
    one = g4.add_constant(poplar.INT, [1], 1, "one")
    two = g4.add_constant(poplar.INT, [1], 2, "two")
    g4.set_tile_mapping(one, 0)
    g4.set_tile_mapping(two, 0)
    p = prog.If(pred, prog.Sequence([prog.Copy(one, r), prog.PrintTensor("then", r)]),
                prog.Sequence([prog.Copy(two, r), prog.PrintTensor("else", r)]))
    e = poplar.Engine(g4, p)
    e.load(dev4)
    e.write_tensor("pred", np.array([value], dtype.host))
    e.run()
    assert e.read_tensor("r").tolist() == [1 if branch == "then" else 2]
    assert capsys.readouterr().out == f"{branch}: [{1 if branch == 'then' else 2}]\n"


def test_if_without_else(g4, dev4, counter):
    x, cs = counter
    pred = g4.add_variable(poplar.BOOL, [1], "pred")
    g4.set_tile_mapping(pred, 0)
    g4.create_host_write("pred", pred)
    e = poplar.Engine(g4, prog.If(pred[0], prog.Execute(cs)))
    e.load(dev4)
    e.write_tensor("pred", np.array([False]))
    e.run()
    assert e.read_tensor("x").tolist() == [0]
    e.write_tensor("pred", np.array([True]))
    e.run()
    assert e.read_tensor("x").tolist() == [1]


@pytest.mark.parametrize("start", [5, 1])
def test_repeat_while_true_counts_down(g4, dev4, counter, start, mode):
    x, cs_body = counter
    n = g4.add_variable(poplar.INT, [1], "n")
    more = g4.add_variable(poplar.BOOL, [1], "more")
    g4.set_tile_mapping(n, 2)
    g4.set_tile_mapping(more, 3)
    g4.create_host_write("n", n)
    g4.create_host_read("n-read", n)
    cs_cond = g4.add_compute_set("count-down")
    g4.add_vertex(cs_cond, CountDown, {"n": n[0], "more": more[0]}, tile=2)
    loop = prog.RepeatWhileTrue(prog.Execute(cs_cond), more, prog.Execute(cs_body))
    e = poplar.Engine(g4, loop, mode[1])
    e.load(dev4)
    e.write_tensor("n", np.array([start], np.int32))
    e.run()
    # cond runs start times; the body runs while n > 0 after the decrement
    assert e.read_tensor("n-read").tolist() == [0]
    assert e.read_tensor("x").tolist() == [start - 1]
    kinds = [(r.kind, r.name) for r in e.profile().steps]
    assert kinds.count(("execute", "count-down")) == start
    assert kinds.count(("execute", "add-one")) == start - 1


def test_repeat_while_false(g4, dev4, counter):
    x, cs = counter
    done = g4.add_variable(poplar.BOOL, [1], "done")
    g4.set_tile_mapping(done, 0)
    g4.create_host_write("done", done)
    e = poplar.Engine(g4, prog.RepeatWhileFalse(prog.Sequence(), done, prog.Execute(cs)))
    e.load(dev4)
    e.write_tensor("done", np.array([True]))
    e.run()                                       # terminates at once: the body never runs
    assert e.read_tensor("x").tolist() == [0]
    assert [s.kind for s in e.profile().steps] == ["control"]


def test_sync(g4, dev4):
    e = run_engine(g4, prog.Sequence([prog.Sync(poplar.SyncType.INTERNAL),
                                      prog.Sync(poplar.SyncType.EXTERNAL),
                                      prog.Sync(poplar.SyncType.GLOBAL)]), dev4)
    prof = e.profile()
    assert [r.kind for r in prof.steps] == ["sync"] * 3
    internal, external, glob = (r.cycles for r in prof.steps)
    assert internal == 150 and internal <= external <= glob
    assert (prof.sync_cycles == internal + external + glob).all()


def test_multiple_programs(g4, dev4, counter, capsys):
    x, cs = counter
    zero = g4.add_constant(poplar.INT, [1], 0, "zero")
    g4.set_tile_mapping(zero, 1)
    progs = [prog.Execute(cs), prog.Copy(zero, x), prog.PrintTensor("x", x)]
    e = poplar.Engine(g4, progs)
    e.load(dev4)
    e.run()                                     # program 0 by default
    e.run(0)
    e.run(2)
    e.run(1)
    e.run(2)
    assert capsys.readouterr().out == "x: [2]\nx: [0]\n"
    assert [r.kind for r in e.profile().steps] == ["print"]   # profile of the latest run only
    with pytest.raises(EngineError, match="3"):
        e.run(3)


def test_execute_same_compute_set_twice_compiles_once(g4, dev4, counter):
    x, cs = counter
    e = run_engine(g4, prog.Sequence([prog.Execute(cs), prog.Execute(cs)]), dev4)
    assert e.read_tensor("x").tolist() == [2]
    assert e.profile().vertex_stats["AddOne"]["count"] == 1


# --- PrintTensor --------------------------------------------------------------------------------
def test_print_tensor_formats(g4, dev4, capsys):
    f = g4.add_constant(poplar.FLOAT, [3], [-1.5, 0.0, 1 / 3], "f")
    i = g4.add_constant(poplar.INT, [4], [-2, 0, 7, 123456], "i")
    u = g4.add_constant(poplar.UNSIGNED_INT, [2], [0, 4294967295], "u")
    h = g4.add_constant(poplar.HALF, [1], [0.1], "h")
    m = g4.add_constant(poplar.FLOAT, [2, 3], (np.arange(6) / 2).reshape(2, 3), "m")
    s = g4.add_constant(poplar.FLOAT, [1], [2.0], "s")
    for t in (f, i, u, h, m, s):
        g4.set_tile_mapping(t, 0)
    run_engine(g4, prog.Sequence([prog.PrintTensor("f", f), prog.PrintTensor("i", i),
                                  prog.PrintTensor("u", u), prog.PrintTensor("h", h),
                                  prog.PrintTensor("m", m), prog.PrintTensor(s),
                                  prog.PrintTensor("col", m[:, 1])]), dev4)
    assert capsys.readouterr().out.splitlines() == [
        "f: [-1.5000000 0.0000000 0.3333333]",
        "i: [-2 0 7 123456]",
        "u: [0 4294967295]",
        "h: [0.0999756]",                        # the half nearest 0.1
        "m: [",
        " [0.0000000 0.5000000 1.0000000]",
        " [1.5000000 2.0000000 2.5000000]",
        "]",
        "s: [2.0000000]",
        "col: [0.5000000 2.0000000]",
    ]


def test_add_constant_takes_values_in_flattened_order(g4, dev4):
    """As Poplar's addConstant(type, shape, values): a flat list of num_elements values fills a
    tensor of any shape in row-major order (a scalar is broadcast)."""
    m = g4.add_constant(poplar.FLOAT, [2, 3], [0.0, 0.5, 1.0, 1.5, 2.0, 2.5], "m")
    k = g4.add_constant(poplar.INT, [2, 2], 7, "k")
    for t in (m, k):
        g4.set_tile_mapping(t, 0)
    g4.create_host_read("m", m)
    g4.create_host_read("k", k)
    e = run_engine(g4, prog.Sequence(), dev4)
    np.testing.assert_array_equal(e.read_tensor("m"), np.arange(6).reshape(2, 3) / 2)
    np.testing.assert_array_equal(e.read_tensor("k"), np.full((2, 2), 7))


# --- property: copies through random mappings preserve data -------------------------------------
DEV8 = ipulab.devices.ipu("ipu2", tiles_per_ipu=8)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 60),
       dtype=st.sampled_from([poplar.FLOAT, poplar.INT, poplar.HALF, poplar.UNSIGNED_INT]))
def test_copies_through_random_mappings_preserve_data(data, n, dtype):
    g = poplar.Graph(DEV8.target)
    src = g.add_variable(dtype, [n], "src")
    mid = g.add_variable(dtype, [n], "mid")
    dst = g.add_variable(dtype, [n], "dst")
    tiles = st.lists(st.integers(0, 7), min_size=n, max_size=n)
    for t in (src, mid, dst):
        for i, tile in enumerate(data.draw(tiles, label=f"{t.name} tiles")):
            g.set_tile_mapping(t[i], tile)
    g.create_host_write("src", src)
    g.create_host_read("mid", mid)
    g.create_host_read("dst", dst)
    p = prog.Sequence([prog.Copy(src, mid), prog.Copy(mid.reverse(0), dst)])
    e = poplar.Engine(g, p)
    e.load(DEV8)
    rng = np.random.default_rng(n)
    if dtype.host.kind == "f":
        host = rng.standard_normal(n).astype(dtype.host)
    else:
        host = rng.integers(0, 2**31 - 1, n).astype(dtype.host)
    e.write_tensor("src", host)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("mid"), host)
    np.testing.assert_array_equal(e.read_tensor("dst"), host[::-1])
    # the exchange cost appears exactly on tiles that send or receive
    prof = e.profile()
    moved = np.zeros(8, bool)

    def tile_of(t):
        """The tile of each element, in flattened order."""
        out = np.empty(n, int)
        for tile, iv in enumerate(g.get_tile_mapping(t)):
            for b, e_ in iv:
                out[b:e_] = tile
        return out
    s, m, d = tile_of(src), tile_of(mid), tile_of(dst)
    for a, b in ((s, m), (m[::-1], d)):
        cross = a != b
        moved[a[cross]] = True
        moved[b[cross]] = True
    np.testing.assert_array_equal(prof.exchange_cycles > 0, moved)


def test_copy_program_errors(g4):
    a = g4.add_variable(poplar.FLOAT, [4], "a")
    with pytest.raises(ProgramError, match="'a'.*'b'"):
        prog.Copy(a, g4.add_variable(poplar.FLOAT, [5], "b"))
    with pytest.raises(ProgramError, match="INT"):
        prog.Copy(a, g4.add_variable(poplar.INT, [4], "i"))
    s = g4.add_host_to_device_fifo("s", poplar.FLOAT, 4)
    with pytest.raises(ProgramError, match="'s'"):
        prog.Copy(a, s)                             # a host-to-device stream is not a destination
    with pytest.raises(ProgramError):
        prog.Copy(s, s)
    with pytest.raises(ProgramError):
        prog.Copy(a, np.zeros(4, np.float32))
    with pytest.raises(ProgramError):
        prog.Sequence([a])
    with pytest.raises(ProgramError):
        prog.Repeat(-1, prog.Sequence())
    with pytest.raises(ProgramError, match="predicate"):
        prog.If(a, prog.Sequence())                 # 4 elements
    with pytest.raises(ProgramError, match="FLOAT"):
        prog.If(a[0], prog.Sequence())              # a FLOAT predicate
    with pytest.raises(ProgramError):
        prog.Sync("internal")
