"""The graph API in bulk: add_vertices with poplar.Regions, set_tile_mapping with an array,
and the vectorised placement helpers. A bulk graph must run exactly like the same graph built
one vertex at a time, and refuse what add_vertex / connect refuse, with the same messages."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar, poputil
from ipulab.errors import GraphError
from ipulab.machine.exchange import CopyPlan
from ipulab.poplar import Regions
from ipulab.poplar import program as prog


class Scale(poplar.Vertex):
    """out = k * sum(parts)."""

    k = poplar.Input(poplar.FLOAT)
    parts = poplar.Input(poplar.VectorList[poplar.FLOAT])
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(k, parts, out):
        for i in range(len(out)):
            s = 0.0
            for p in parts:
                s += p[i]
            out[i] = k[0] * s

    @staticmethod
    def cycle_estimate(k, parts, out):
        return 7 + len(parts) * out


DEV = ipulab.devices.ipu("ipu2", tiles_per_ipu=6)


def _graph():
    g = poplar.Graph(DEV.target)
    x = g.add_variable(poplar.FLOAT, [24], "x")
    k = g.add_variable(poplar.FLOAT, [3], "k")
    y = g.add_variable(poplar.FLOAT, [12], "y")
    g.set_tile_mapping(x, np.arange(24) % 6)          # one tile per element, in bulk
    g.set_tile_mapping(k, [[(0, 3)]])
    g.set_tile_mapping(y, np.repeat(np.arange(6), 2))
    return g, x, k, y


def _run(g, x, k, y, seq):
    g.create_host_write("x", x), g.create_host_write("k", k), g.create_host_read("y", y)
    e = poplar.Engine(g, seq)
    e.load(DEV)
    e.write_tensor("x", np.arange(24, dtype=np.float32))
    e.write_tensor("k", np.array([1, 2, 3], np.float32))
    e.run()
    return e.read_tensor("y"), e.profile()


# vertex v: out = y[2v:2v+2], parts = x[4v:4v+2] and x[4v+2:4v+4] (two regions), k[v % 3]
def _one_at_a_time():
    g, x, k, y = _graph()
    cs = g.add_compute_set("scale")
    for v in range(6):
        g.add_vertex(cs, Scale, {"k": k[v % 3], "parts": [x[4 * v:4 * v + 2], x[4 * v + 2:4 * v + 4]],
                                 "out": y[2 * v:2 * v + 2]}, tile=v)
    return _run(g, x, k, y, prog.Execute(cs))


def _in_bulk():
    g, x, k, y = _graph()
    cs = g.add_compute_set("scale")
    v = np.arange(6)
    vs = g.add_vertices(cs, Scale, v, {
        "k": Regions(k, v % 3, v % 3 + 1),
        "parts": Regions(x, np.arange(12) * 2, np.arange(12) * 2 + 2, counts=np.full(6, 2)),
        "out": y.reshape([6, 2])})
    assert len(vs) == 6 and vs[2].tile == 2 and list(vs.ids) == list(range(6))
    return _run(g, x, k, y, prog.Execute(cs))


def test_bulk_graph_runs_like_one_at_a_time():
    a, pa = _one_at_a_time()
    b, pb = _in_bulk()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.repeat([1, 2, 3, 1, 2, 3], 2) *
                                  (np.arange(24, dtype=np.float32).reshape(6, 2, 2).sum(1)
                                   .ravel()))
    assert pa.total_cycles == pb.total_cycles
    np.testing.assert_array_equal(pa.memory_total, pb.memory_total)
    np.testing.assert_array_equal(pa.compute_cycles, pb.compute_cycles)


def test_bulk_vertices_can_be_read_back():
    g, x, k, y = _graph()
    cs = g.add_compute_set("scale")
    vs = g.add_vertices(cs, Scale, [3, 4], {
        "k": Regions.whole(k[:1], 2), "parts": Regions(x, [0, 5, 9], [2, 7, 11], [1, 2]),
        "out": Regions(y, [0, 2], [2, 4])}, estimates=[10, 20])
    conns = vs[1].connections()
    assert [t.num_elements() for t in conns["parts"]] == [2, 2]
    assert g.variable_regions(conns["parts"][1]) == [("x", 9, 11)]
    assert g.variable_regions(conns["out"][0]) == [("y", 2, 4)]
    assert vs[0].codelet is Scale and vs[0].compute_set is cs


@pytest.mark.parametrize("conns,tiles,message", [
    ({"k": "k", "parts": "parts2", "out": "out"}, [0, 9], "tile 9 does not exist: this graph "
                                                         "has tiles 0 to 5"),
    ({"k": "x2", "parts": "parts2", "out": "out"}, [0, 1], "field 'k' of vertex 0 (Scale, "
                                                           "tile 0, compute set 'c') is a scalar "
                                                           "but tensor 'x' has 2 elements"),
    ({"k": "k", "parts": "parts2", "out": "int"}, [0, 1], "field 'out' of vertex 0 (Scale, "
                                                          "tile 0, compute set 'c') is FLOAT "
                                                          "but tensor 'n' is INT"),
    ({"k": "k", "parts": "parts2"}, [0, 1], "field 'out' of vertex 0 (Scale, tile 0, compute "
                                            "set 'c') is not connected"),
    ({"k": "k", "parts": "parts2", "out": "out", "nope": "k"}, [0, 1],
     "codelet Scale has no field 'nope' (vertex 0)"),
    ({"k": "k", "parts": "parts2", "out": "out3"}, [0, 1], "regions for 3 vertices, not 2"),
])
def test_bulk_refusals_leave_the_graph_as_it_was(conns, tiles, message):
    g, x, k, y = _graph()
    n = g.add_variable(poplar.INT, [4], "n")
    other = poplar.Graph(DEV.target).add_variable(poplar.FLOAT, [4], "other")
    specs = {"k": Regions(k, [0, 1], [1, 2]), "x2": Regions(x, [0, 2], [2, 4]),
             "parts2": Regions(x, [0, 2], [2, 4]), "out": Regions(y, [0, 2], [2, 4]),
             "out3": Regions(y, [0, 2, 4], [2, 4, 6]), "int": Regions(n, [0, 2], [2, 4]),
             "other": Regions(other, [0, 2], [2, 4])}
    cs = g.add_compute_set("c")
    with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
        g.add_vertices(cs, Scale, tiles, {f: specs[s] for f, s in conns.items()})
    assert g.num_vertices() == 0
    g.add_vertex(cs, Scale, {"k": k[0], "parts": [x[:2]], "out": y[:2]}, tile=0)   # still usable
    assert g.num_vertices() == 1


def test_bulk_refuses_tensors_of_another_graph_and_bad_regions():
    g, x, k, y = _graph()
    other = poplar.Graph(DEV.target).add_variable(poplar.FLOAT, [4], "other")
    cs = g.add_compute_set("c")
    with pytest.raises(GraphError, match="tensor 'other' belongs to another graph"):
        g.add_vertices(cs, Scale, [0], {"k": Regions(k, [0], [1]), "parts": Regions(x, [0], [2]),
                                        "out": Regions(other, [0], [2])})
    with pytest.raises(GraphError, match="each region needs 0 <= begin <= end <= 24"):
        Regions(x, [20], [25])
    with pytest.raises(GraphError, match="counts must be >= 0 and add up to the 2 regions"):
        Regions(x, [0, 2], [2, 4], counts=[3])
    with pytest.raises(GraphError, match="one row per vertex"):
        g.add_vertices(cs, Scale, [0, 1], {"k": k})
    with pytest.raises(GraphError, match="connected by add_vertices"):
        vs = g.add_vertices(cs, Scale, [0], {"k": Regions(k, [0], [1]),
                                             "parts": Regions(x, [0], [2]),
                                             "out": Regions(y, [0], [2])})
        g.connect(vs[0]["out"], y[2:4])


def test_set_tile_mapping_with_an_array():
    g, x, k, y = _graph()
    np.testing.assert_array_equal(g.tiles_of(x), np.arange(24) % 6)
    with pytest.raises(GraphError, match="one tile per element"):
        g.set_tile_mapping(x, np.zeros(5, np.int64))
    with pytest.raises(GraphError, match="tile 7 does not exist"):
        g.set_tile_mapping(x, np.full(24, 7))
    np.testing.assert_array_equal(g.tiles_of(x), np.arange(24) % 6)      # unchanged
    vg = g.create_virtual_graph(2, 4)
    vg.set_tile_mapping(y, np.ones(12, np.int64))                    # vg's tile 1 is tile 3
    assert (g.tiles_of(y) == 3).all()


@settings(max_examples=200, deadline=None)
@given(tiles=st.lists(st.integers(0, 4), max_size=60), parts=st.integers(1, 7),
       grain=st.integers(1, 4), sort=st.booleans())
def test_pieces_cut_every_tile_as_split_even_does(tiles, parts, grain, sort):
    tiles = np.sort(tiles) if sort else np.asarray(tiles, np.int64)
    p = poputil.pieces(tiles, parts, grain)
    expected = [(t, piece) for t, runs in enumerate(poputil.per_tile_runs(tiles, np.arange(
        tiles.size), 5)) if runs for piece in poputil.split_even(runs, parts, grain)]
    got, r = [], 0
    for i in range(p.tile.size):
        c = int(p.counts[i])
        got.append((int(p.tile[i]), list(zip(p.begins[r:r + c].tolist(),
                                              p.ends[r:r + c].tolist()))))
        r += c
    assert got == expected


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 40), replicas=st.integers(2, 4), seed=st.integers(0, 1000))
def test_a_replicated_plan_moves_what_each_replicas_plan_moves(n, replicas, seed):
    rng = np.random.default_rng(seed)
    stride = 100
    src = rng.choice(50, n, replace=False).astype(np.int64)
    dst = 50 + rng.permutation(n).astype(np.int64)
    tiles = np.zeros(n, np.int64)
    plan = CopyPlan(DEV.target, src, dst, tiles, tiles, 4)
    arena = rng.standard_normal(stride * replicas).astype(np.float32)
    expected = arena.copy()
    for i in range(replicas):
        expected[dst + i * stride] = arena[src + i * stride]
    plan.replicated(replicas, stride, stride, 1).run(arena, arena)
    np.testing.assert_array_equal(arena, expected)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 60), replicas=st.integers(2, 4), shift=st.sampled_from([0, 1, -2]),
       seed=st.integers(0, 1000))
def test_a_replicated_plan_over_regions_of_several_strides_moves_each_replicas_copy(
        n, replicas, shift, seed):
    """Runs merged across tiles, grouped by their regions' strides, staged when the copy
    overlaps itself, and cut into parts as lanes cut it: each replica's copy, read then
    written."""
    rng = np.random.default_rng(seed)
    width = {0: 64, 1: 80}                        # region 0 at 0.., region 1 at 1000..
    base = {0: 0, 1: 1000}
    region = rng.integers(0, 2, n)
    at = rng.choice(60, n, replace=False)
    src = np.array([base[k] for k in region]) + at
    if shift:                                     # a copy that overlaps itself (staged)
        dst = np.array([base[k] for k in region]) + (at + shift) % 60
        keep = np.unique(dst, return_index=True)[1]
        src, dst = src[keep], dst[keep]
    else:
        dst = np.array([base[1 - k] for k in region]) + 2 + rng.permutation(len(src))
    stride_of = lambda a: np.where(a >= 1000, width[1], width[0])   # noqa: E731
    tiles = (src // 7).astype(np.int64)           # runs meet tile boundaries
    plan = CopyPlan(DEV.target, src, dst, tiles, (dst // 7).astype(np.int64), 4)
    arena = rng.standard_normal(1000 + width[1] * replicas).astype(np.float32)
    expected = arena.copy()
    for i in range(replicas):
        expected[dst + i * stride_of(dst)] = arena[src + i * stride_of(src)]
    rep = plan.replicated(replicas, stride_of(plan.src_start), stride_of(plan.dst_start), 1)
    whole, parts = arena.copy(), arena.copy()
    rep.run(whole, whole)
    for lo in range(replicas):
        rep.run_part(parts, parts, lo, lo + 1)
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(parts, expected)
