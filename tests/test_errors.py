"""Every misuse raises the right ipulab.errors type, with a message that names the thing, and
leaves the graph or engine usable (DESIGN section 6)."""
import numpy as np
import pytest
from codelets import SumVertex
from helpers import run_engine

import ipulab
from ipulab import poplar, poputil
from ipulab.errors import (CodeletError, EngineError, GraphError, IpuLabError, ProgramError,
                           TileMemoryError)
from ipulab.poplar import program as prog


class SumPastTheEnd(poplar.Vertex):
    """A learner's bug: reads one element past the end of its input."""
    inp = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        s = 0.0
        for i in range(len(inp) + 1):
            s += inp[i]
        out[0] = s


class WritesItsInput(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(inp, out):
        inp[0] = 1.0
        out[0] = inp[0]


class Copy(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        for i in range(len(out)):
            out[i] = inp[i]


def test_hierarchy():
    for cls in (GraphError, TileMemoryError, CodeletError, ProgramError, EngineError):
        assert issubclass(cls, IpuLabError)
    assert issubclass(IpuLabError, Exception)


# --- graph construction ----------------------------------------------------------------------
def test_wrong_tile_index(g4, dev4):
    v = g4.add_variable(poplar.FLOAT, [4], "v")
    with pytest.raises(GraphError, match=r"tile 7\b") as ei:
        g4.set_tile_mapping(v, 7)
    assert "0 to 3" in str(ei.value)
    g4.set_tile_mapping(v, 3)                     # still usable
    run_engine(g4, prog.Sequence(), dev4)


def test_unmapped_tensor_at_engine_construction(g4, dev4):
    v = g4.add_variable(poplar.FLOAT, [8], "my_tensor")
    g4.set_tile_mapping(v[:5], 0)
    g4.create_host_read("v", v)
    with pytest.raises(GraphError, match="my_tensor") as ei:
        poplar.Engine(g4, prog.Sequence())
    assert "3 of 8" in str(ei.value) and "element 5" in str(ei.value)
    g4.set_tile_mapping(v[5:], 1)                 # fix the mapping: now it compiles
    e = run_engine(g4, prog.Sequence(), dev4)
    assert e.read_tensor("v").shape == (8,)


def test_unmapped_vertex(g4, dev4):
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    y = g4.add_variable(poplar.FLOAT, [1], "y")
    g4.set_tile_mapping(x, 0)
    g4.set_tile_mapping(y, 0)
    cs = g4.add_compute_set("my-cs")
    v = g4.add_vertex(cs, SumVertex, {"in": x, "out": y[0]})
    with pytest.raises(GraphError, match="not mapped") as ei:
        poplar.Engine(g4, prog.Execute(cs))
    msg = str(ei.value)
    assert f"vertex {v.id}" in msg and "SumVertex" in msg and "my-cs" in msg
    g4.set_tile_mapping(v, 0)
    run_engine(g4, prog.Execute(cs), dev4)


def test_unconnected_field(g4, dev4):
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    y = g4.add_variable(poplar.FLOAT, [1], "y")
    g4.set_tile_mapping(x, 0)
    g4.set_tile_mapping(y, 0)
    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, SumVertex, {"in": x}, tile=0)
    with pytest.raises(GraphError, match="'out'") as ei:
        poplar.Engine(g4, prog.Execute(cs))
    assert f"vertex {v.id}" in str(ei.value) and "SumVertex" in str(ei.value)
    g4.connect(v["out"], y[0])
    g4.create_host_write("x", x)
    g4.create_host_read("y", y)
    e = poplar.Engine(g4, prog.Execute(cs))
    e.load(dev4)
    e.write_tensor("x", np.ones(4, np.float32))
    e.run()
    assert e.read_tensor("y").tolist() == [4.0]


def test_the_first_faulty_vertex_is_named_across_codelets(g4):
    """Vertices of two codelets interleaved: the error names the lowest vertex id at fault."""
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    y = g4.add_variable(poplar.FLOAT, [4], "y")
    g4.set_tile_mapping(x, 0)
    g4.set_tile_mapping(y, 0)
    cs = g4.add_compute_set("cs")
    g4.add_vertex(cs, SumVertex, {"in": x, "out": y[0]}, tile=0)
    copy = g4.add_vertex(cs, Copy, {"inp": x[:2]}, tile=0)               # 'out' not connected
    g4.add_vertex(cs, SumVertex, {"in": x, "out": y[1]})                 # not mapped
    with pytest.raises(GraphError, match="'out'") as ei:
        poplar.Engine(g4, prog.Execute(cs))
    assert f"vertex {copy.id}" in str(ei.value) and "Copy" in str(ei.value)


def test_unknown_codelet_name(g4):
    cs = g4.add_compute_set("cs")
    g4.add_codelets(SumVertex)
    with pytest.raises(GraphError, match="'Summ'") as ei:
        g4.add_vertex(cs, "Summ")
    assert "SumVertex" in str(ei.value).replace("'Summ'", "")     # lists the known codelets
    assert g4.add_vertex(cs, "SumVertex").codelet is SumVertex


def test_not_a_codelet(g4):
    class NoCompute(poplar.Vertex):
        x = poplar.Input(poplar.FLOAT)

    class WrongParams(poplar.Vertex):
        x = poplar.Input(poplar.FLOAT)

        @staticmethod
        def compute(y):
            pass

    with pytest.raises(CodeletError, match="NoCompute"):
        g4.add_codelets(NoCompute)
    with pytest.raises(CodeletError, match="WrongParams"):
        g4.add_codelets(WrongParams)
    with pytest.raises(CodeletError):
        g4.add_codelets(int)


def test_unknown_field(g4, dev4):
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    y = g4.add_variable(poplar.FLOAT, [1], "y")
    g4.set_tile_mapping(x, 0)
    g4.set_tile_mapping(y, 0)
    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, SumVertex, tile=0)
    with pytest.raises(GraphError, match="'inp'") as ei:   # the attribute, not the key "in"
        v["inp"]
    assert "SumVertex" in str(ei.value) and "'in'" in str(ei.value)
    # a bad connection in add_vertex leaves no half-made vertex behind
    with pytest.raises(GraphError, match="'bogus'"):
        g4.add_vertex(cs, SumVertex, {"in": x, "out": y[0], "bogus": x}, tile=0)
    g4.connect(v["in"], x)
    g4.connect(v["out"], y[0])
    e = run_engine(g4, prog.Execute(cs), dev4)
    assert e.profile().vertex_stats["SumVertex"]["count"] == 1


def test_dtype_mismatch_on_connect(g4):
    i = g4.add_variable(poplar.INT, [4], "ints")
    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, SumVertex, tile=0)
    with pytest.raises(GraphError, match="ints") as ei:
        g4.connect(v["in"], i)
    assert "INT" in str(ei.value) and "FLOAT" in str(ei.value) and "'in'" in str(ei.value)
    h = g4.add_variable(poplar.HALF, [4], "halves")
    with pytest.raises(GraphError, match="halves"):
        g4.add_vertex(cs, SumVertex, {"in": h}, tile=0)


def test_scalar_field_connected_to_four_elements(g4):
    x = g4.add_variable(poplar.FLOAT, [4], "four")
    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, SumVertex, tile=0)
    with pytest.raises(GraphError, match="four") as ei:
        g4.connect(v["out"], x)
    assert "4 elements" in str(ei.value) and "'out'" in str(ei.value)
    g4.connect(v["out"], x[1])                     # one element is fine
    g4.connect(v["out"], x[1:2])


def test_vector_list_needs_a_list(g4):
    class VL(poplar.Vertex):
        rows = poplar.Input(poplar.VectorList[poplar.FLOAT])

        @staticmethod
        def compute(rows):
            pass

    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, VL, tile=0)
    with pytest.raises(GraphError, match="VectorList"):
        g4.connect(v["rows"], 3.0)


def test_shape_mismatch_in_copy(g4):
    a = g4.add_variable(poplar.FLOAT, [4], "src4")
    b = g4.add_variable(poplar.FLOAT, [2, 3], "dst6")
    with pytest.raises(ProgramError, match="src4") as ei:
        prog.Copy(a, b)
    assert "dst6" in str(ei.value) and "4" in str(ei.value) and "6" in str(ei.value)


def test_copy_to_a_broadcast_view(g4):
    a = g4.add_variable(poplar.FLOAT, [4], "a")
    b = g4.add_variable(poplar.FLOAT, [2], "b")
    g4.set_tile_mapping(a, 0)
    g4.set_tile_mapping(b, 0)
    with pytest.raises(ProgramError, match="'b.broadcast"):
        poplar.Engine(g4, prog.Copy(a, b.broadcast(2, 0)))


def test_host_write_with_wrong_size_and_dtype(g4, dev4):
    v = g4.add_variable(poplar.FLOAT, [2, 3], "v")
    g4.set_tile_mapping(v, 0)
    g4.create_host_write("v-write", v)
    g4.create_host_read("v-read", v)
    e = poplar.Engine(g4, prog.Sequence())
    e.load(dev4)
    e.write_tensor("v-write", np.ones(6, np.float32))
    with pytest.raises(EngineError, match="v-write") as ei:
        e.write_tensor("v-write", np.zeros(5, np.float32))
    assert "6" in str(ei.value) and "5" in str(ei.value)
    with pytest.raises(EngineError, match="float32") as ei:
        e.write_tensor("v-write", np.zeros(6, np.float64))
    assert "v-write" in str(ei.value)
    with pytest.raises(EngineError):
        e.write_tensor("v-write", [0.0] * 6)        # a list becomes float64
    np.testing.assert_array_equal(e.read_tensor("v-read"), np.ones((2, 3)))   # untouched


def test_unknown_handle_and_stream(g4, dev4):
    v = g4.add_variable(poplar.INT, [4], "v")
    g4.set_tile_mapping(v, 0)
    g4.create_host_write("w", v)
    g4.create_host_read("r", v)
    g4.add_host_to_device_fifo("in", poplar.INT, 4)
    e = poplar.Engine(g4, prog.Sequence())
    e.load(dev4)
    with pytest.raises(EngineError, match="'nope'"):
        e.write_tensor("nope", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match="'nope'"):
        e.read_tensor("nope")
    with pytest.raises(EngineError, match="'w'"):
        e.read_tensor("w")                         # a write handle is not readable
    with pytest.raises(EngineError, match="'r'"):
        e.write_tensor("r", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match="'nostream'"):
        e.connect_stream("nostream", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match="'in'"):
        e.connect_stream("in", np.zeros(6, np.int32))     # not a multiple of 4
    with pytest.raises(EngineError, match="'in'"):
        e.connect_stream("in", np.zeros(4, np.float32))
    with pytest.raises(EngineError, match="'in'"):
        e.connect_stream("in", np.zeros(0, np.int32))
    with pytest.raises(GraphError, match="'w'"):
        g4.create_host_read("w", v)                # names are unique


def test_device_to_host_stream_needs_a_writeable_contiguous_array(g4, dev4):
    v = g4.add_variable(poplar.FLOAT, [2], "v")
    g4.set_tile_mapping(v, 0)
    out = g4.add_device_to_host_fifo("results", poplar.FLOAT, 2)
    e = poplar.Engine(g4, prog.Copy(v, out))
    e.load(dev4)
    with pytest.raises(EngineError, match="'results'"):
        e.connect_stream("results", np.zeros(8, np.float32)[::2])
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(EngineError, match="'results'"):
        e.connect_stream("results", ro)
    with pytest.raises(EngineError, match="'results'"):
        e.connect_stream("results", [0.0, 0.0])
    e.connect_stream("results", np.zeros(4, np.float32))
    e.run()


def test_stream_not_connected(g4, dev4):
    v = g4.add_variable(poplar.INT, [4], "v")
    g4.set_tile_mapping(v, 0)
    s = g4.add_host_to_device_fifo("feed", poplar.INT, 4)
    e = poplar.Engine(g4, prog.Copy(s, v))
    e.load(dev4)
    with pytest.raises(EngineError, match="'feed'"):
        e.run()
    e.connect_stream("feed", np.arange(4, dtype=np.int32))
    e.run()


def test_run_before_load(g4, dev4):
    v = g4.add_variable(poplar.INT, [4], "v")
    g4.set_tile_mapping(v, 0)
    g4.create_host_write("w", v)
    g4.create_host_read("r", v)
    e = poplar.Engine(g4, prog.Sequence())
    with pytest.raises(EngineError, match="load"):
        e.run()
    with pytest.raises(EngineError, match="load"):
        e.write_tensor("w", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match="load"):
        e.read_tensor("r")
    with pytest.raises(EngineError, match="run"):
        e.profile()
    e.load(dev4)
    e.run()
    e.profile()


def test_load_onto_a_device_of_another_target(g4, dev4, dev8):
    e = poplar.Engine(g4, prog.Sequence())
    with pytest.raises(EngineError, match="8 tiles|4 tiles"):
        e.load(dev8)
    with pytest.raises(EngineError):
        e.load(ipulab.devices.ipu("bow", tiles_per_ipu=4))
    with pytest.raises(EngineError):
        e.load("ipu2")
    e.load(ipulab.devices.ipu("ipu2", tiles_per_ipu=4))   # an equal target is fine
    e.run()


def test_engine_argument_errors(g4):
    with pytest.raises(EngineError, match="debug.foo"):
        poplar.Engine(g4, prog.Sequence(), {"debug.foo": "true"})
    with pytest.raises(EngineError, match="maybe"):
        poplar.Engine(g4, prog.Sequence(), {"debug.checkedCodelets": "maybe"})
    with pytest.raises(EngineError):
        poplar.Engine(g4, "not a program")
    with pytest.raises(EngineError):
        poplar.Engine("not a graph", prog.Sequence())


def test_tile_overflow(g4, dev4):
    big = g4.add_variable(poplar.FLOAT, [170_000], "big_activations")
    small = g4.add_variable(poplar.FLOAT, [10], "small")
    g4.set_tile_mapping(big, 2)
    g4.set_tile_mapping(small, 2)
    with pytest.raises(TileMemoryError) as ei:
        poplar.Engine(g4, prog.Sequence())
    err = ei.value
    assert err.tile == 2
    assert err.available == 638_976 == dev4.target.bytes_per_tile
    assert err.needed >= 680_040
    assert err.largest[0] == ("big_activations", 680_000)
    msg = str(err)
    assert "tile 2" in msg and "big_activations" in msg and "638,976" in msg
    poputil.map_tensor_linearly(g4, big)           # spread it: 170 KB per tile fits
    e = run_engine(g4, prog.Sequence(), dev4)
    assert e.profile().memory["variables"].sum() >= 680_040


def test_tile_overflow_reports_the_worst_tile(g4):
    a = g4.add_variable(poplar.FLOAT, [165_000], "a")
    b = g4.add_variable(poplar.FLOAT, [200_000], "b")
    g4.set_tile_mapping(a, 0)
    g4.set_tile_mapping(b, 3)
    with pytest.raises(TileMemoryError, match="tile 3") as ei:
        poplar.Engine(g4, prog.Sequence())
    assert ei.value.tile == 3 and "b (800,000 B)" in str(ei.value)


# --- codelet failures ----------------------------------------------------------------------------
def _oob_graph(dev, bad_tile=2):
    """A graph whose vertex 1 (tile bad_tile) reads past its input; program streams x out first."""
    g = poplar.Graph(dev.target)
    x = g.add_variable(poplar.FLOAT, [8], "x")
    y = g.add_variable(poplar.FLOAT, [2], "y")
    g.set_tile_mapping(x, bad_tile)
    g.set_tile_mapping(y, bad_tile)
    cs = g.add_compute_set("buggy-cs")
    g.add_vertex(cs, SumVertex, {"in": x[4:], "out": y[0]}, tile=bad_tile)
    g.add_vertex(cs, SumPastTheEnd, {"inp": x[:4], "out": y[1]}, tile=bad_tile)
    out = g.add_device_to_host_fifo("x-out", poplar.FLOAT, 8)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    return g, prog.Sequence([prog.Copy(x, out), prog.Execute(cs), prog.Copy(x, out)])


@pytest.mark.parametrize("options", [{"debug.checkedCodelets": "true"},
                                     {"debug.codeletMode": "python"}], ids=["checked", "python"])
def test_out_of_bounds_in_a_codelet(dev4, options):
    g, p = _oob_graph(dev4)
    e = poplar.Engine(g, p, options)
    e.load(dev4)
    host = np.full(16, -7, np.float32)
    e.connect_stream("x-out", host)
    e.write_tensor("x", np.arange(8, dtype=np.float32))
    with pytest.raises(CodeletError) as ei:
        e.run()
    msg = str(ei.value)
    assert "SumPastTheEnd" in msg and "vertex 1" in msg and "tile 2" in msg
    assert "buggy-cs" in msg
    # a failed run leaves host arrays untouched (the stream copy before the failure included)
    np.testing.assert_array_equal(host, -7)
    with pytest.raises(CodeletError):
        e.run()                                    # the same again, still no crash
    np.testing.assert_array_equal(host, -7)


def test_failed_run_leaves_stream_positions_and_a_later_engine_works(dev4):
    g, p = _oob_graph(dev4)
    e = poplar.Engine(g, p, {"debug.codeletMode": "python"})
    e.load(dev4)
    host = np.full(16, -7, np.float32)
    e.connect_stream("x-out", host)
    with pytest.raises(CodeletError):
        e.run()
    np.testing.assert_array_equal(host, -7)

    # a correct engine over a fixed graph runs fine, and the stream starts at position 0
    g2 = poplar.Graph(dev4.target)
    x = g2.add_variable(poplar.FLOAT, [8], "x")
    y = g2.add_variable(poplar.FLOAT, [1], "y")
    g2.set_tile_mapping(x, 2)
    g2.set_tile_mapping(y, 2)
    cs = g2.add_compute_set("ok")
    g2.add_vertex(cs, SumVertex, {"in": x, "out": y[0]}, tile=2)
    out = g2.add_device_to_host_fifo("x-out", poplar.FLOAT, 8)
    g2.create_host_write("x", x)
    g2.create_host_read("y", y)
    for options in ({"debug.codeletMode": "python"}, {}):
        e2 = poplar.Engine(g2, prog.Sequence([prog.Execute(cs), prog.Copy(x, out)]), options)
        e2.load(dev4)
        e2.connect_stream("x-out", host)
        e2.write_tensor("x", np.arange(8, dtype=np.float32))
        e2.run()
        assert e2.read_tensor("y").tolist() == [28.0]
        np.testing.assert_array_equal(host[:8], np.arange(8))
        np.testing.assert_array_equal(host[8:], -7)


def test_failed_run_does_not_advance_input_streams(dev4):
    """After a failed run, a host-to-device FIFO resumes where it was before that run."""
    g = poplar.Graph(dev4.target)
    x = g.add_variable(poplar.FLOAT, [4], "x")
    y = g.add_variable(poplar.FLOAT, [1], "y")
    g.set_tile_mapping(x, 1)
    g.set_tile_mapping(y, 1)
    bad = g.add_compute_set("bad")
    g.add_vertex(bad, SumPastTheEnd, {"inp": x, "out": y[0]}, tile=1)
    s = g.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    g.create_host_read("x", x)
    fail = g.add_variable(poplar.BOOL, [1], "fail")
    g.set_tile_mapping(fail, 0)
    g.create_host_write("fail", fail)
    e = poplar.Engine(g, prog.Sequence([prog.Copy(s, x), prog.If(fail, prog.Execute(bad))]),
                      {"debug.checkedCodelets": "true"})
    e.load(dev4)
    e.connect_stream("in", np.arange(12, dtype=np.float32))
    e.write_tensor("fail", np.array([False]))
    e.run()                                         # takes 0..3
    e.write_tensor("fail", np.array([True]))
    with pytest.raises(CodeletError):
        e.run()                                     # would take 4..7, but fails
    e.write_tensor("fail", np.array([False]))
    e.run()
    assert e.read_tensor("x").tolist() == [4.0, 5.0, 6.0, 7.0]


@pytest.mark.parametrize("options", [{}, {"debug.checkedCodelets": "true"}])
def test_codelet_writing_its_input_fails_to_compile(g4, dev4, options):
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    y = g4.add_variable(poplar.FLOAT, [1], "y")
    g4.set_tile_mapping(x, 0)
    g4.set_tile_mapping(y, 0)
    bad = g4.add_compute_set("writes-input")
    g4.add_vertex(bad, WritesItsInput, {"inp": x, "out": y[0]}, tile=0)
    with pytest.raises(CodeletError, match="WritesItsInput") as ei:
        poplar.Engine(g4, prog.Execute(bad), options)
    assert "Input" in str(ei.value) and "writes-input" in str(ei.value)
    good = g4.add_compute_set("fine")
    g4.add_vertex(good, SumVertex, {"in": x, "out": y[0]}, tile=0)
    run_engine(g4, prog.Execute(good), dev4, options)


def test_codelet_writing_its_input_in_python_mode(g4, dev4):
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    y = g4.add_variable(poplar.FLOAT, [1], "y")
    g4.set_tile_mapping(x, 3)
    g4.set_tile_mapping(y, 3)
    g4.create_host_read("x", x)
    cs = g4.add_compute_set("writes-input")
    g4.add_vertex(cs, WritesItsInput, {"inp": x, "out": y[0]}, tile=3)
    e = poplar.Engine(g4, prog.Execute(cs), {"debug.codeletMode": "python"})
    e.load(dev4)
    with pytest.raises(CodeletError, match="WritesItsInput") as ei:
        e.run()
    assert "vertex 0" in str(ei.value) and "tile 3" in str(ei.value)
    assert e.read_tensor("x").tolist() == [0.0] * 4          # the input was not changed


def test_codelet_that_numba_cannot_compile(g4):
    class Bad(poplar.Vertex):
        x = poplar.Output(poplar.FLOAT)

        @staticmethod
        def compute(x):
            x[0] = "text"

    x = g4.add_variable(poplar.FLOAT, [1], "x")
    g4.set_tile_mapping(x, 0)
    cs = g4.add_compute_set("cs")
    g4.add_vertex(cs, Bad, {"x": x[0]}, tile=0)
    with pytest.raises(CodeletError, match="Bad"):
        poplar.Engine(g4, prog.Execute(cs))


# --- hazards in a compute set ----------------------------------------------------------------
def test_overlapping_writes_in_one_compute_set(g4, dev4):
    x = g4.add_variable(poplar.FLOAT, [8], "x")
    y = g4.add_variable(poplar.FLOAT, [6], "shared_out")
    g4.set_tile_mapping(x, 0)
    g4.set_tile_mapping(y, 1)
    cs = g4.add_compute_set("clash")
    a = g4.add_vertex(cs, Copy, {"inp": x[:4], "out": y[:4]}, tile=0)
    b = g4.add_vertex(cs, Copy, {"inp": x[4:], "out": y[2:]}, tile=1)
    with pytest.raises(GraphError, match="shared_out") as ei:
        poplar.Engine(g4, prog.Execute(cs))
    msg = str(ei.value)
    assert f"vertex {a.id}" in msg and f"vertex {b.id}" in msg and "Copy" in msg
    # the same vertices in two compute sets are fine
    cs1, cs2 = g4.add_compute_set("first"), g4.add_compute_set("second")
    g4.add_vertex(cs1, Copy, {"inp": x[:4], "out": y[:4]}, tile=0)
    g4.add_vertex(cs2, Copy, {"inp": x[4:], "out": y[2:]}, tile=1)
    g4.create_host_write("x", x)
    g4.create_host_read("y", y)
    e = poplar.Engine(g4, prog.Sequence([prog.Execute(cs1), prog.Execute(cs2)]))
    e.load(dev4)
    e.write_tensor("x", np.arange(8, dtype=np.float32))
    e.run()
    assert e.read_tensor("y").tolist() == [0, 1, 4, 5, 6, 7]


def test_overlapping_writes_between_fields_of_different_vertices_scalar(g4):
    y = g4.add_variable(poplar.FLOAT, [1], "y")
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    g4.set_tile_mapping(y, 0)
    g4.set_tile_mapping(x, 0)
    cs = g4.add_compute_set("cs")
    g4.add_vertex(cs, SumVertex, {"in": x, "out": y[0]}, tile=0)
    g4.add_vertex(cs, SumVertex, {"in": x, "out": y[0]}, tile=2)
    with pytest.raises(GraphError, match="vertex 0.*vertex 1|vertex 1.*vertex 0"):
        poplar.Engine(g4, prog.Execute(cs))


def test_input_read_while_another_vertex_writes_it(g4, dev4):
    x = g4.add_variable(poplar.FLOAT, [8], "x")
    g4.set_tile_mapping(x, 0)
    cs = g4.add_compute_set("race")
    w = g4.add_vertex(cs, Copy, {"inp": x[:2], "out": x[4:6]}, tile=0)
    r = g4.add_vertex(cs, Copy, {"inp": x[5:7], "out": x[2:4]}, tile=0)
    with pytest.raises(GraphError, match="Input") as ei:
        poplar.Engine(g4, prog.Execute(cs))
    msg = str(ei.value)
    assert f"vertex {w.id}" in msg and f"vertex {r.id}" in msg and "'x" in msg
    ok = g4.add_compute_set("ok")
    g4.add_vertex(ok, Copy, {"inp": x[:2], "out": x[4:6]}, tile=0)
    run_engine(g4, prog.Execute(ok), dev4)


def test_writing_a_constant(g4, dev4):
    c = g4.add_constant(poplar.FLOAT, [4], [1, 2, 3, 4], "my_const")
    x = g4.add_variable(poplar.FLOAT, [4], "x")
    g4.set_tile_mapping(c, 0)
    g4.set_tile_mapping(x, 0)
    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, Copy, {"inp": x, "out": c}, tile=0)
    with pytest.raises(GraphError, match="my_const") as ei:
        poplar.Engine(g4, prog.Execute(cs))
    assert f"vertex {v.id}" in str(ei.value)
    with pytest.raises(ProgramError, match="my_const"):
        poplar.Engine(g4, prog.Copy(x, c))
    s = g4.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    with pytest.raises(ProgramError, match="my_const"):
        poplar.Engine(g4, prog.Copy(s, c))
    # reading the constant is fine, and it holds its values on the device
    g4.create_host_read("x", x)
    e = run_engine(g4, prog.Copy(c, x), dev4)
    assert e.read_tensor("x").tolist() == [1, 2, 3, 4]


def test_constant_values_must_fit(g4):
    with pytest.raises(GraphError, match="'k'"):
        g4.add_constant(poplar.FLOAT, [4], [1, 2, 3], "k")


def test_bad_types_and_shapes(g4):
    with pytest.raises(GraphError):
        g4.add_variable("COMPLEX", [2], "z")
    with pytest.raises(GraphError):
        g4.add_variable(np.float64, [2], "d")
    with pytest.raises(GraphError, match="'neg'"):
        g4.add_variable(poplar.FLOAT, [2, -1], "neg")
    with pytest.raises(GraphError):
        poplar.Graph("ipu2")
    with pytest.raises(GraphError):
        poplar.Graph(ipulab.devices.ipu("ipu2", tiles_per_ipu=4).target, replication_factor=3)
    with pytest.raises(GraphError):
        ipulab.IPUModel("ipu9")
    with pytest.raises(GraphError):
        ipulab.devices.ipu("ipu2", tiles_per_ipu=2000)


def test_tensor_of_another_graph(g4, dev4):
    other = poplar.Graph(dev4.target)
    t = other.add_variable(poplar.FLOAT, [2], "foreign")
    with pytest.raises(GraphError, match="foreign"):
        g4.set_tile_mapping(t, 0)
    other.set_tile_mapping(t, 0)
    with pytest.raises(ProgramError, match="foreign"):
        poplar.Engine(g4, prog.PrintTensor(t))


def test_execute_of_a_compute_set_of_another_graph(g4, dev4):
    """A compute set belongs to one graph: executing another graph's must be refused, not run
    whatever compute set has the same number here."""
    class Mark(poplar.Vertex):
        x = poplar.InOut(poplar.INT)

        @staticmethod
        def compute(x):
            x[0] += 1

    x = g4.add_variable(poplar.INT, [1], "x")
    g4.set_tile_mapping(x, 0)
    g4.create_host_read("x", x)
    mine = g4.add_compute_set("mine")
    g4.add_vertex(mine, Mark, {"x": x[0]}, tile=0)
    other = poplar.Graph(dev4.target)
    theirs = other.add_compute_set("theirs")
    with pytest.raises((ProgramError, GraphError), match="theirs"):
        e = run_engine(g4, prog.Execute(theirs), dev4)
        assert e.read_tensor("x").tolist() == [0], "ran this graph's compute set 0 instead"


def test_tile_overflow_carries_a_memory_profile_to_look_at(dev4):
    from bokeh.models import GlyphRenderer

    from ipulab import viz
    g = poplar.Graph(dev4.target)
    big = g.add_variable(poplar.FLOAT, [170_000], "big")
    g.set_tile_mapping(big, 2)
    with pytest.raises(TileMemoryError) as ei:
        poplar.Engine(g, prog.Sequence())
    profile = ei.value.profile
    assert profile.steps == [] and profile.memory_total[2] == 680_000
    data = viz.tile_memory_heatmap(profile).select_one(GlyphRenderer).data_source.data
    assert list(data["over_budget"]) == [False, False, True, False]
    # and the graph is still usable: spread it out and it compiles
    poputil.map_tensor_linearly(g, big)
    poplar.Engine(g, prog.Sequence())
