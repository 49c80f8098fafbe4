"""The public inspection API of Graph and Tensor: what the operation libraries, gcl and the
course read instead of private attributes."""
import numpy as np
import pytest

import ipulab
from ipulab import poplar
from ipulab.errors import GraphError
from ipulab.poplar import program as prog


class Copy2(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        for i in range(len(out)):
            out[i] = inp[i]


class Gather(poplar.Vertex):
    parts = poplar.Input(poplar.VectorList[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(parts, out):
        out[0] = 0.0


@pytest.fixture
def graph():
    dev = ipulab.devices.ipu("ipu2", tiles_per_ipu=8)
    g = poplar.Graph(dev.target)
    a = g.add_variable(poplar.FLOAT, [4, 6], "a")
    b = g.add_variable(poplar.FLOAT, [10], "b")
    g.set_tile_mapping(a, 1)
    g.set_tile_mapping(a[2:], 5)
    return g, a, b


def test_owns_and_check_tensor(graph):
    g, a, b = graph
    other = poplar.Graph(g.target).add_variable(poplar.FLOAT, [2], "other")
    assert g.owns(a) and g.owns(a[1:, ::2]) and not g.owns(other) and not g.owns(3)
    assert g.check_tensor(a) is a
    with pytest.raises(GraphError, match="mat: tensor 'other' belongs to another graph"):
        g.check_tensor(other, "mat")
    with pytest.raises(GraphError, match="expected a Tensor, got int"):
        g.check_tensor(7)


def test_tiles_of_every_element(graph):
    g, a, b = graph
    np.testing.assert_array_equal(g.tiles_of(a[1:3, 0]), [1, 5])
    assert (g.tiles_of(b) == -1).all()                      # not mapped yet
    vg = g.create_virtual_graph(4, 8)
    np.testing.assert_array_equal(vg.tiles_of(a[2:, :1]), [1, 1])    # tile 5 is the vg's 1
    with pytest.raises(GraphError, match="outside this virtual graph's tiles"):
        vg.tiles_of(a)
    # the same mapping, two ways
    tiles = g.tiles_of(a).tolist()
    for tile, intervals in enumerate(g.get_tile_mapping(a)):
        for lo, hi in intervals:
            assert tiles[lo:hi] == [tile] * (hi - lo)
    assert vg.get_top_level_graph().tiles_of(a).tolist() == tiles


def test_variable_regions_of_a_view(graph):
    g, a, b = graph
    assert g.variable_regions(a) == [("a", 0, 24)]
    assert g.variable_regions(a[1:3, 2:4]) == [("a", 8, 10), ("a", 14, 16)]
    joined = poplar.concat([b[7:], a[0, :2], b[:1]])
    assert g.variable_regions(joined) == [("b", 7, 10), ("a", 0, 2), ("b", 0, 1)]
    assert g.variable_regions(a.reverse(1)[0, :3]) == [("a", 5, 6), ("a", 4, 5), ("a", 3, 4)]
    assert g.variable_regions(b[:0]) == []


def test_vertices_can_be_read_back(graph):
    g, a, b = graph
    g.set_tile_mapping(b, 2)
    cs = g.add_compute_set("copy")
    other = g.add_compute_set("gather")
    v = g.add_vertex(cs, Copy2, {"in": a[0], "out": a[1]}, tile=1)
    w = g.add_vertex(other, Gather, {"parts": [b[:2], b[5:]], "out": b[2]}, tile=2)
    assert [x.id for x in g.get_vertices()] == [v.id, w.id] and g.num_vertices() == 2
    assert [x.id for x in g.get_vertices(other)] == [w.id]
    assert g.get_compute_sets() == [cs, other]
    assert (v.codelet, v.tile, v.compute_set.name) == (Copy2, 1, "copy")
    conns = w.connections()
    assert list(conns) == ["parts", "out"]
    assert [t.name for t in conns["parts"]] == ["b[:2]", "b[5:]"]
    assert conns["out"][0].num_elements() == 1
    unmapped = g.add_vertex(cs, Copy2)
    assert unmapped.tile == -1 and unmapped.connections() == {}


def test_has_handle(graph):
    g, a, b = graph
    g.create_host_write("w", a)
    g.add_host_to_device_fifo("in", poplar.FLOAT, 3)
    assert g.has_handle("w") and g.has_handle("in") and not g.has_handle("r")


def test_element_view(graph):
    g, a, b = graph
    v = a.element_view(np.array([[23, 0], [6, 7]]), "picked")
    assert v.shape == (2, 2) and v.name == "picked"
    np.testing.assert_array_equal(v.ids, a.ids.ravel()[[23, 0, 6, 7]].reshape(2, 2))
    assert not v.ids.flags.writeable
    col = a[:, 1]                          # indices count the VIEW's elements, not the variable's
    np.testing.assert_array_equal(col.element_view(np.array([3, 0])).ids, a.ids[[3, 0], 1])
    for bad in (np.array([24]), np.array([-1]), np.array([0.5])):
        with pytest.raises(GraphError, match="element_view"):
            a.element_view(bad)


def test_element_views_run_like_any_view(graph):
    """A program over element views moves exactly the elements named."""
    g, a, b = graph
    g.set_tile_mapping(b, 3)
    g.create_host_write("a", a)
    g.create_host_read("b", b)
    p = prog.Copy(a.element_view(np.arange(23, 13, -1)), b)
    e = poplar.Engine(g, p)
    e.load(ipulab.devices.ipu("ipu2", tiles_per_ipu=8))
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    e.write_tensor("a", values)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), np.arange(23, 13, -1))
