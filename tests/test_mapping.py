"""Tile mappings: set/get, mapping lists, virtual graphs, and poputil.map_tensor_linearly."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar, poputil
from ipulab.errors import GraphError
from ipulab.poplar import program as prog


def used_tiles(mapping):
    return [t for t, iv in enumerate(mapping) if iv]


def elements_per_tile(mapping):
    return [sum(e - b for b, e in iv) for iv in mapping]


def assert_exact_cover(mapping, n):
    """Every flattened element 0..n-1 appears in exactly one interval."""
    count = np.zeros(n, np.int64)
    for iv in mapping:
        for b, e in iv:
            assert 0 <= b < e <= n
            count[b:e] += 1
    np.testing.assert_array_equal(count, 1)


# --- set_tile_mapping / get_tile_mapping ------------------------------------------------------
def test_whole_tensor_on_one_tile(g4):
    v = g4.add_variable(poplar.FLOAT, [2, 5], "v")
    g4.set_tile_mapping(v, 2)
    assert g4.get_tile_mapping(v) == [[], [], [(0, 10)], []]


def test_elementwise_mapping_gives_intervals_over_flattened_elements(g4):
    v1 = g4.add_variable(poplar.FLOAT, [4], "v1")
    for i in range(4):
        g4.set_tile_mapping(v1[i], i)
    assert g4.get_tile_mapping(v1) == [[(0, 1)], [(1, 2)], [(2, 3)], [(3, 4)]]
    g4.set_tile_mapping(v1, 0)
    g4.set_tile_mapping(v1[2], 2)                  # DESIGN section 4
    assert g4.get_tile_mapping(v1) == [[(0, 2), (3, 4)], [], [(2, 3)], []]


def test_mapping_of_a_2d_slice(g4):
    m = g4.add_variable(poplar.FLOAT, [3, 4], "m")
    g4.set_tile_mapping(m, 0)
    g4.set_tile_mapping(m[1:3, 1:3], 3)
    # flattened row-major: row 1 cols 1,2 -> elements 5,6; row 2 -> 9,10
    assert g4.get_tile_mapping(m) == [[(0, 5), (7, 9), (11, 12)], [], [], [(5, 7), (9, 11)]]
    # the mapping of a view is over the view's own flattened elements
    assert g4.get_tile_mapping(m[1:3, 1:3]) == [[], [], [], [(0, 4)]]
    assert g4.get_tile_mapping(m.transpose()[1]) == [[(0, 1)], [], [], [(1, 3)]]


def test_mapping_by_list_round_trips(g4):
    v = g4.add_variable(poplar.INT, [10], "v")
    mapping = [[(0, 3), (8, 10)], [], [(3, 8)], []]
    g4.set_tile_mapping(v, mapping)
    assert g4.get_tile_mapping(v) == mapping
    # a list mapping of a view maps the view's elements
    w = g4.add_variable(poplar.FLOAT, [2, 3], "w")
    g4.set_tile_mapping(w.transpose(), [[(0, 2)], [(2, 4)], [(4, 6)], []])
    # transposed order: w[0,0] w[1,0] | w[0,1] w[1,1] | w[0,2] w[1,2]
    assert g4.get_tile_mapping(w) == [[(0, 1), (3, 4)], [(1, 2), (4, 5)], [(2, 3), (5, 6)], []]


def test_unmapped_elements_are_absent_from_the_mapping(g4):
    v = g4.add_variable(poplar.FLOAT, [6], "v")
    assert g4.get_tile_mapping(v) == [[], [], [], []]
    g4.set_tile_mapping(v[2:4], 1)
    assert g4.get_tile_mapping(v) == [[], [(2, 4)], [], []]


def test_mapping_by_numpy_integer_tile(g4):
    v = g4.add_variable(poplar.FLOAT, [2], "v")
    g4.set_tile_mapping(v, np.int64(3))
    assert used_tiles(g4.get_tile_mapping(v)) == [3]


@pytest.mark.parametrize("tile", [4, -1, 1472])
def test_wrong_tile_index(g4, tile):
    v = g4.add_variable(poplar.FLOAT, [2], "v")
    with pytest.raises(GraphError, match=f"tile {tile}"):
        g4.set_tile_mapping(v, tile)


@pytest.mark.parametrize("tile", [1.0, "1", True, None])
def test_tile_must_be_an_integer(g4, tile):
    v = g4.add_variable(poplar.FLOAT, [2], "v")
    with pytest.raises(GraphError):
        g4.set_tile_mapping(v, tile)


def test_wrong_tile_for_a_vertex(g4):
    class Noop(poplar.Vertex):
        x = poplar.InOut(poplar.FLOAT)

        @staticmethod
        def compute(x):
            pass

    cs = g4.add_compute_set("cs")
    v = g4.add_vertex(cs, Noop)
    with pytest.raises(GraphError, match="tile 9"):
        g4.set_tile_mapping(v, 9)
    x = g4.add_variable(poplar.FLOAT, [1], "x")
    with pytest.raises(GraphError, match="tile 4"):
        g4.add_vertex(cs, Noop, {"x": x[0]}, tile=4)


def test_bad_mapping_list(g4):
    v = g4.add_variable(poplar.FLOAT, [4], "v")
    with pytest.raises(GraphError, match="'v'"):
        g4.set_tile_mapping(v, [[(0, 5)]])            # past the end
    with pytest.raises(GraphError, match="tile 4"):
        g4.set_tile_mapping(v, [[], [], [], [], [(0, 4)]])  # a fifth tile


def test_failed_mapping_list_changes_nothing(g4):
    """DESIGN section 6: nothing is left half-done. A mapping list that fails part-way must not
    leave the intervals before the bad one applied."""
    v = g4.add_variable(poplar.FLOAT, [4], "v")
    with pytest.raises(GraphError):
        g4.set_tile_mapping(v, [[(0, 2)], [(2, 4)], [], [], [(0, 1)]])
    assert g4.get_tile_mapping(v) == [[], [], [], []]
    g4.set_tile_mapping(v, 3)
    with pytest.raises(GraphError):
        g4.set_tile_mapping(v, [[(0, 2)], [(2, 9)]])
    assert g4.get_tile_mapping(v) == [[], [], [], [(0, 4)]]


def test_clone_copies_shape_and_mapping(g4):
    v = g4.add_variable(poplar.FLOAT, [2, 3], "v")
    g4.set_tile_mapping(v, [[(0, 1)], [(1, 4)], [], [(4, 6)]])
    c = g4.clone(v, "c")
    assert c.shape == v.shape and c.dtype is v.dtype and c.name == "c"
    assert not set(c.ids.ravel()) & set(v.ids.ravel())
    assert g4.get_tile_mapping(c) == g4.get_tile_mapping(v)


# --- virtual graphs ------------------------------------------------------------------------------
def test_virtual_graph_offsets(g16):
    vg = g16.create_virtual_graph(4, 8)
    assert vg.target.num_tiles == 4
    v = g16.add_variable(poplar.FLOAT, [8], "v")
    vg.set_tile_mapping(v[:4], 0)
    vg.set_tile_mapping(v[4:], 3)
    assert used_tiles(g16.get_tile_mapping(v)) == [4, 7]
    assert vg.get_tile_mapping(v) == [[(0, 4)], [], [], [(4, 8)]]
    # a list mapping on a virtual graph is relative to its first tile
    w = vg.add_variable(poplar.FLOAT, [4], "w")       # variables are shared with the parent
    vg.set_tile_mapping(w, [[], [(0, 2)], [(2, 4)]])
    assert g16.get_tile_mapping(w)[5:7] == [[(0, 2)], [(2, 4)]]


def test_nested_virtual_graphs_add_offsets(g16):
    outer = g16.create_virtual_graph(8, 16)
    inner = outer.create_virtual_graph(2, 4)
    assert inner.target.num_tiles == 2
    v = g16.add_variable(poplar.INT, [2], "v")
    inner.set_tile_mapping(v[0], 0)
    inner.set_tile_mapping(v[1], 1)
    assert used_tiles(g16.get_tile_mapping(v)) == [10, 11]
    assert used_tiles(outer.get_tile_mapping(v)) == [2, 3]


def test_vertices_on_a_virtual_graph(g16, dev16):
    class Inc(poplar.Vertex):
        x = poplar.InOut(poplar.FLOAT)

        @staticmethod
        def compute(x):
            x[0] += 1.0

    vg = g16.create_virtual_graph(8, 12)
    x = vg.add_variable(poplar.FLOAT, [4], "x")
    for i in range(4):
        vg.set_tile_mapping(x[i], i)
    cs = vg.add_compute_set("inc")
    for i in range(4):
        v = vg.add_vertex(cs, Inc, {"x": x[i]})
        vg.set_tile_mapping(v, i)
    e = poplar.Engine(g16, prog.Execute(cs))
    e.load(dev16)
    e.run()
    busy = np.flatnonzero(e.profile().compute_cycles)
    assert busy.tolist() == [8, 9, 10, 11]


def test_virtual_graph_range_errors(g16):
    for lo, hi in [(0, 17), (-1, 4), (5, 5), (6, 2)]:
        with pytest.raises(GraphError):
            g16.create_virtual_graph(lo, hi)
    vg = g16.create_virtual_graph(12, 16)
    v = g16.add_variable(poplar.FLOAT, [1], "v")
    with pytest.raises(GraphError, match="tile 4"):
        vg.set_tile_mapping(v, 4)
    with pytest.raises(GraphError):
        vg.create_virtual_graph(2, 6)
    g16.set_tile_mapping(v, 0)
    with pytest.raises(GraphError, match="'v'"):       # its element is outside the range
        vg.get_tile_mapping(v)


def test_map_tensor_linearly_on_a_virtual_graph(g16, dev16):
    vg = g16.create_virtual_graph(10, 14)
    v = g16.add_variable(poplar.FLOAT, [40], "v")
    poputil.map_tensor_linearly(vg, v, 0, 1)
    assert used_tiles(g16.get_tile_mapping(v)) == [10, 11, 12, 13]
    assert elements_per_tile(g16.get_tile_mapping(v))[10:14] == [10, 10, 10, 10]
    # and it runs: the data goes where the mapping says and comes back intact
    g16.create_host_write("v", v)
    w = g16.clone(v, "w")
    g16.create_host_read("w", w)
    e = poplar.Engine(g16, prog.Copy(v, w))
    e.load(dev16)
    data = np.arange(40, dtype=np.float32)
    e.write_tensor("v", data)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("w"), data)
    assert e.profile().memory["variables"][10:14].tolist() == [80, 80, 80, 80]   # v and w
    assert e.profile().memory["variables"][:10].sum() == 0


# --- poputil.map_tensor_linearly ------------------------------------------------------------------
def test_linear_2000_floats_use_59_tiles(dev_full):
    g = poplar.Graph(dev_full.target)
    t = g.add_variable(poplar.FLOAT, [2000], "t")
    poputil.map_tensor_linearly(g, t)
    m = g.get_tile_mapping(t)
    assert len(m) == 1472
    assert used_tiles(m) == list(range(59))
    assert_exact_cover(m, 2000)
    sizes = elements_per_tile(m)[:59]
    assert min(sizes) * 4 >= 128                       # at least 128 bytes per tile
    assert all(s % 2 == 0 for s in sizes)              # grains of one 64-bit vector


def test_linear_540000_floats_use_1468_tiles(dev_full):
    g = poplar.Graph(dev_full.target)
    t = g.add_variable(poplar.FLOAT, [540, 1000], "t")
    poputil.map_tensor_linearly(g, t)
    m = g.get_tile_mapping(t)
    assert len(used_tiles(m)) == 1468 and used_tiles(m) == list(range(1468))
    assert_exact_cover(m, 540_000)
    assert set(elements_per_tile(m)[:1468]) <= {366, 368}


def test_linear_explicit_min_and_grain(dev_full, dev16):
    g = poplar.Graph(dev_full.target)
    t = g.add_variable(poplar.FLOAT, [10_000], "t")
    poputil.map_tensor_linearly(g, t, 1000, 100)       # 100 grains, >= 10 grains per tile
    m = g.get_tile_mapping(t)
    assert used_tiles(m) == list(range(10))
    assert [m[i] for i in range(10)] == [[(1000 * i, 1000 * (i + 1))] for i in range(10)]

    g = poplar.Graph(dev16.target)
    a = g.add_variable(poplar.FLOAT, [10], "a")
    poputil.map_tensor_linearly(g, a, 0, 4)            # grains of 4: 3 grains on 3 tiles
    assert g.get_tile_mapping(a)[:4] == [[(0, 4)], [(4, 8)], [(8, 10)], []]
    b = g.add_variable(poplar.INT, [100], "b")
    poputil.map_tensor_linearly(g, b, 0, 1)            # ceil(100/16)=7 per tile -> 15 tiles
    m = g.get_tile_mapping(b)
    assert len(used_tiles(m)) == 15
    assert set(elements_per_tile(m)[:15]) == {6, 7}
    c = g.add_variable(poplar.FLOAT, [64], "c")
    poputil.map_tensor_linearly(g, c, min_elements_per_tile=32, grain_size=1)
    assert elements_per_tile(g.get_tile_mapping(c))[:3] == [32, 32, 0]


def test_linear_defaults_depend_on_element_size(dev16):
    g = poplar.Graph(dev16.target)
    h = g.add_variable(poplar.HALF, [200], "h")
    poputil.map_tensor_linearly(g, h)                  # >= 64 halves (128 B), grain 4
    m = g.get_tile_mapping(h)
    sizes = [s for s in elements_per_tile(m) if s]
    assert len(sizes) == 3 and min(sizes) >= 64 and all(s % 4 == 0 for s in sizes[:-1])


def test_calc_linear_tile_mapping_matches_map_tensor_linearly(g16):
    t = g16.add_variable(poplar.FLOAT, [3, 77], "t")
    m = poputil.calc_linear_tile_mapping(g16, t)
    assert g16.get_tile_mapping(t) == [[]] * 16         # calc does not map
    poputil.map_tensor_linearly(g16, t)
    assert g16.get_tile_mapping(t) == m


def test_linear_bad_arguments(g16):
    t = g16.add_variable(poplar.FLOAT, [10], "t")
    with pytest.raises(GraphError, match="'t'"):
        poputil.map_tensor_linearly(g16, t, 0, 0)
    with pytest.raises(GraphError):
        poputil.map_tensor_linearly(g16, t, -1, 1)


def poplar_split(n, tiles, min_elements, grain):
    """Poplar's splitRegions (poputil/Util.cpp) for one region, written out independently."""
    if n == 0:
        return []
    groups = -(-n // grain)
    per = -(-groups // tiles)
    if min_elements:
        min_groups = -(-min_elements // grain)
        per = max(per, -(-groups // max(1, groups // min_groups)))
    parts = -(-groups // per)
    return [(i * groups // parts * grain, min(n, (i + 1) * groups // parts * grain))
            for i in range(parts)]


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 5000), tiles=st.integers(1, 64), min_elements=st.integers(0, 300),
       grain=st.integers(1, 16), dtype=st.sampled_from([poplar.FLOAT, poplar.HALF, poplar.INT]))
def test_linear_mapping_covers_every_element_once(n, tiles, min_elements, grain, dtype):
    g = poplar.Graph(ipulab.devices.ipu("ipu2", tiles_per_ipu=tiles).target)
    t = g.add_variable(dtype, [n], "t")
    poputil.map_tensor_linearly(g, t, min_elements, grain)
    m = g.get_tile_mapping(t)
    assert len(m) == tiles
    assert_exact_cover(m, n)
    used = used_tiles(m)
    assert used == list(range(len(used)))              # tiles 0, 1, ... in order
    flat = [iv for tile in m for iv in tile]
    assert flat == sorted(flat) and all(len(tile) <= 1 for tile in m)
    sizes = elements_per_tile(m)[:len(used)]
    assert all(s % grain == 0 for s in sizes[:-1])
    if len(sizes) > 1:
        assert max(sizes[:-1]) - min(sizes[:-1]) <= grain   # balanced
        assert min(sizes[:-1]) >= min_elements
    assert flat == poplar_split(n, tiles, min_elements, grain)

    # defaults too
    poputil.map_tensor_linearly(g, t)
    m = g.get_tile_mapping(t)
    assert_exact_cover(m, n)
    assert [iv for tile in m for iv in tile] == poplar_split(
        n, tiles, -(-128 // dtype.size), 8 // dtype.size)
