"""The machine layer on its own: copy plans, tile memory layout, compute and exchange cost."""
import numpy as np
import pytest
from helpers import run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar
from ipulab.errors import TileMemoryError
from ipulab.machine.cost import compute_cost, default_vertex_estimate, exchange_cost
from ipulab.machine.exchange import CopyPlan, intervals_overlap, merged_runs
from ipulab.machine.kernels import element_runs, first_repeat, frozen
from ipulab.machine.memory import CATEGORIES, CATEGORY, TileMemory
from ipulab.poplar.lower_compute import first_duplicate
from ipulab.poplar import program as prog

T4 = ipulab.devices.ipu("ipu2", tiles_per_ipu=4).target
T8 = ipulab.devices.ipu("ipu2", tiles_per_ipu=8).target


def a64(x):
    return np.asarray(x, np.int64)


# --- CopyPlan ----------------------------------------------------------------------------------
def test_copy_plan_merges_contiguous_runs():
    src = a64(range(10, 20))
    dst = a64(range(100, 110))
    plan = CopyPlan(T4, src, dst, np.zeros(10, np.int64), np.ones(10, np.int64), 4)
    assert plan.length.tolist() == [10]
    assert plan.src_start.tolist() == [10] and plan.dst_start.tolist() == [100]
    assert plan.bytes.tolist() == [40] and not plan.staged
    assert plan.num_elements == 10


def test_runs_that_follow_on_merge_unless_a_same_array_differs():
    src, dst, length = a64([0, 3, 5, 9]), a64([10, 13, 15, 30]), a64([3, 2, 4, 1])
    s, d, n = merged_runs((src, dst), length)
    assert (s.tolist(), d.tolist(), n.tolist()) == ([0, 9], [10, 30], [9, 1])
    s, d, n, k = merged_runs((src, dst), length, (a64([7, 7, 8, 8]),))
    assert (s.tolist(), n.tolist(), k.tolist()) == ([0, 5, 9], [5, 4, 1], [7, 8, 8])


def test_copy_plan_breaks_runs_at_gaps_and_reversals():
    src = a64([0, 1, 2, 5, 6, 9, 8, 7])
    dst = a64([0, 1, 2, 3, 4, 5, 6, 7])
    z = np.zeros(8, np.int64)
    plan = CopyPlan(T4, src, dst, z, z, 4)
    assert plan.length.tolist() == [3, 2, 1, 1, 1]
    assert plan.src_start.tolist() == [0, 5, 9, 8, 7]
    assert plan.dst_start.tolist() == [0, 3, 5, 6, 7]


def test_copy_plan_never_crosses_tiles():
    src = a64(range(8))
    dst = a64(range(50, 58))
    src_tile = a64([0, 0, 0, 1, 1, 1, 1, 1])
    dst_tile = a64([2, 2, 3, 3, 3, 3, 3, 2])
    plan = CopyPlan(T4, src, dst, src_tile, dst_tile, 4)
    assert plan.length.tolist() == [2, 1, 4, 1]
    assert plan.src_tile.tolist() == [0, 0, 1, 1]
    assert plan.dst_tile.tolist() == [2, 3, 3, 2]
    s, d, b = plan.traffic().expand()
    assert s.tolist() == [0, 0, 1, 1] and d.tolist() == [2, 3, 3, 2]
    assert b.tolist() == [8, 4, 16, 4]
    # cost: tile 0 sends 12 B, tile 1 sends 20 B, tile 2 receives 12 B, tile 3 receives 20 B
    assert plan.cycles["exchange"].tolist() == [3 + 16, 5 + 16, 3 + 16, 5 + 16]


def test_copy_plan_on_tile_runs_are_not_traffic():
    src, dst = a64(range(4)), a64(range(10, 14))
    tiles = a64([1, 1, 2, 2])
    plan = CopyPlan(T4, src, dst, tiles, tiles, 4)
    assert plan.traffic().src_tile.size == 0
    assert plan.cycles["exchange"].sum() == 0
    assert plan.cycles["on_tile_copy"].tolist() == [0, 1, 1, 0]


def test_copy_plan_runs():
    rng = np.random.default_rng(0)
    src_arena = rng.standard_normal(30).astype(np.float32)
    dst_arena = np.zeros(30, np.float32)
    src = a64([3, 4, 5, 29, 0, 1])
    dst = a64([10, 11, 12, 13, 2, 3])
    z = np.zeros(6, np.int64)
    CopyPlan(T4, src, dst, z, z, 4).run(src_arena, dst_arena)
    expected = np.zeros(30, np.float32)
    expected[dst] = src_arena[src]
    np.testing.assert_array_equal(dst_arena, expected)


def test_copy_plan_short_and_long_runs():
    """Runs of 1 to 40 elements (short ones are copied element by element, long ones through
    views) land exactly where the element lists say."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 41, 60)
    src = np.concatenate([s + np.arange(n) for s, n in
                          zip(rng.permutation(60) * 50, lengths)]).astype(np.int64)
    dst = np.arange(src.size, dtype=np.int64) + 3000
    z = np.zeros(src.size, np.int64)
    plan = CopyPlan(T4, src, dst, z, z, 4)
    assert plan.length.min() <= 8 < plan.length.max()
    arena = rng.standard_normal(3000 + src.size).astype(np.float32)
    expected = arena.copy()
    expected[dst] = arena[src]
    plan.run(arena, arena)
    np.testing.assert_array_equal(arena, expected)


@pytest.mark.parametrize("shift", [1, -1, 3])
def test_staged_copy_when_destination_overlaps_source(shift):
    arena = np.arange(20, dtype=np.float32)
    src = a64(range(5, 12))
    dst = src + shift
    z = np.zeros(7, np.int64)
    plan = CopyPlan(T4, src, dst, z, z, 4)
    assert plan.staged
    expected = arena.copy()
    expected[dst] = arena[src]               # read everything, then write
    plan.run(arena, arena)
    np.testing.assert_array_equal(arena, expected)


def test_staged_copy_through_the_api(g4, dev4):
    v = g4.add_variable(poplar.INT, [8], "v")
    g4.set_tile_mapping(v, [[(0, 3)], [(3, 8)]])
    g4.create_host_write("v", v)
    g4.create_host_read("v-read", v)
    e = poplar.Engine(g4, prog.Sequence([prog.Copy(v[0:7], v[1:8])]))
    e.load(dev4)
    e.write_tensor("v", np.arange(8, dtype=np.int32))
    e.run()
    assert e.read_tensor("v-read").tolist() == [0, 0, 1, 2, 3, 4, 5, 6]
    e.write_tensor("v", np.arange(8, dtype=np.int32))
    e2 = run_engine(g4, prog.Copy(v[1:8], v[0:7]), dev4)
    e2.write_tensor("v", np.arange(8, dtype=np.int32))
    e2.run()
    assert e2.read_tensor("v-read").tolist() == [1, 2, 3, 4, 5, 6, 7, 7]
    # swapping two halves in one copy
    e3 = poplar.Engine(g4, prog.Copy(v, poplar.concat([v[4:], v[:4]])))
    e3.load(dev4)
    e3.write_tensor("v", np.arange(8, dtype=np.int32))
    e3.run()
    assert e3.read_tensor("v-read").tolist() == [4, 5, 6, 7, 0, 1, 2, 3]


def test_intervals_overlap():
    assert intervals_overlap(a64([0]), a64([5]), a64([4]), a64([2]))
    assert not intervals_overlap(a64([0]), a64([5]), a64([5]), a64([2]))
    assert intervals_overlap(a64([10, 0]), a64([1, 3]), a64([2]), a64([1]))
    assert not intervals_overlap(a64([10, 0]), a64([1, 3]), a64([3, 11]), a64([7, 4]))
    assert not intervals_overlap(a64([]), a64([]), a64([1]), a64([1]))


@settings(max_examples=50, deadline=None)
@given(data=st.data(), n=st.integers(1, 40), arena_size=st.integers(40, 80),
       same_arena=st.booleans(), distinct=st.booleans())
def test_copy_plan_property(data, n, arena_size, same_arena, distinct):
    if distinct:
        src = a64(data.draw(st.permutations(range(arena_size)))[:n])
    else:
        src = a64(data.draw(st.lists(st.integers(0, arena_size - 1), min_size=n, max_size=n)))
    dst = a64(data.draw(st.permutations(range(arena_size)))[:n])     # distinct destinations
    tile_of = a64(data.draw(st.lists(st.integers(0, 7), min_size=arena_size,
                                     max_size=arena_size)))
    plan = CopyPlan(T8, src, dst, tile_of[src], tile_of[dst], 4)
    # runs cover the elements in order, are contiguous on both sides and never cross a tile
    assert plan.length.sum() == n and (plan.length > 0).all()
    pos = 0
    for s0, d0, ln, st_, dt in zip(plan.src_start, plan.dst_start, plan.length, plan.src_tile,
                                   plan.dst_tile):
        np.testing.assert_array_equal(src[pos:pos + ln], np.arange(s0, s0 + ln))
        np.testing.assert_array_equal(dst[pos:pos + ln], np.arange(d0, d0 + ln))
        assert (tile_of[src[pos:pos + ln]] == st_).all()
        assert (tile_of[dst[pos:pos + ln]] == dt).all()
        pos += ln
    # maximal: no two consecutive runs could have been merged
    mergeable = ((plan.src_start[:-1] + plan.length[:-1] == plan.src_start[1:])
                 & (plan.dst_start[:-1] + plan.length[:-1] == plan.dst_start[1:])
                 & (plan.src_tile[:-1] == plan.src_tile[1:])
                 & (plan.dst_tile[:-1] == plan.dst_tile[1:]))
    assert not mergeable.any()
    # running it copies every element, reading everything before writing
    rng = np.random.default_rng(n)
    a = rng.standard_normal(arena_size).astype(np.float32)
    b = a.copy() if same_arena else np.zeros(arena_size, np.float32)
    expected = b.copy()
    expected[dst] = a[src]
    plan.run(b if same_arena else a, b)
    np.testing.assert_array_equal(b, expected)
    # cost: ceil(max(bytes in, bytes out) / 4) + 16 on every tile that sends or receives
    moved = tile_of[src] != tile_of[dst]
    in_b = np.bincount(tile_of[dst][moved], minlength=8) * 4
    all_out = np.bincount(tile_of[src][moved], minlength=8) * 4
    # an element sent to several places may be multicast: it counts at least once
    once = np.unique(src[moved])
    min_out = np.bincount(tile_of[once], minlength=8) * 4
    ex = plan.cycles["exchange"]
    np.testing.assert_array_equal(ex > 0, (in_b > 0) | (all_out > 0))
    lo = np.where(ex > 0, -(-np.maximum(in_b, min_out) // 4) + 16, 0)
    hi = np.where(ex > 0, -(-np.maximum(in_b, all_out) // 4) + 16, 0)
    assert (lo <= ex).all() and (ex <= hi).all()
    if distinct:
        np.testing.assert_array_equal(ex, hi)


def test_copy_plan_multicast_counts_a_source_run_once():
    """The exchange multicasts: a tile sends a region once however many tiles listen."""
    src = a64([0, 1, 2, 3, 0, 1, 2, 3])
    dst = a64(range(10, 18))
    plan = CopyPlan(T4, src, dst, np.zeros(8, np.int64), a64([1] * 4 + [2] * 4), 4)
    assert plan.cycles["exchange"].tolist() == [4 + 16, 4 + 16, 4 + 16, 0]


# --- TileMemory --------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 50), max_size=40), spread=st.sampled_from([1, 1000, 10**9]))
def test_first_repeat_is_the_lowest_address_seen_twice(ids, spread):
    """Marks over a narrow span, a sort over a wide one (spread): the same answer."""
    a = np.asarray(ids, np.int64) * spread
    values, counts = np.unique(a, return_counts=True)
    twice = values[counts > 1]
    assert first_repeat(a) == (int(twice[0]) if twice.size else -1)


def _writable_signatures(kernel) -> set:
    return {sig for sig in kernel.signatures if any(t.mutable for t in sig)}


def test_build_kernels_take_one_signature_whatever_arrays_they_are_given():
    """first_duplicate and CopyPlan hand their kernels read-only views: a kernel compiled for
    writable and for read-only arrays would be loaded twice by each fresh process."""
    ids = a64([3, 1, 3])
    read_only = ids.copy()
    read_only.flags.writeable = False
    before = _writable_signatures(first_repeat), _writable_signatures(element_runs)
    assert first_duplicate(ids) == 3 and first_duplicate(read_only) == 3
    z = np.zeros(3, np.int64)
    assert CopyPlan(T4, ids, read_only, z, z, 4).length.tolist() == [1, 1, 1]
    assert (_writable_signatures(first_repeat), _writable_signatures(element_runs)) == before
    assert ids.flags.writeable and not frozen(ids).flags.writeable and frozen(ids).base is ids

def test_tile_memory_layout():
    names = ["a", "b", "c", "d"]
    mem = TileMemory(3, 1000, 8,
                     tiles=[0, 0, 1, 0, 2], sizes=[10, 4, 7, 0, 24],
                     categories=[CATEGORY["variables"], CATEGORY["code"], CATEGORY["constants"],
                                 CATEGORY["variables"], CATEGORY["exchange_buffers"]],
                     owners=[0, 1, 2, 3, 0], owner_names=names)
    # code comes first on a tile, then the rest by category; every address aligned to 8
    assert mem.allocations_on(0) == [(0, 4, "code", "b"), (8, 10, "variables", "a")]
    assert mem.allocations_on(1) == [(0, 7, "constants", "c")]
    assert mem.allocations_on(2) == [(0, 24, "exchange_buffers", "a")]
    d = mem.as_dict()
    assert list(d) == list(CATEGORIES)
    assert d["code"].tolist() == [8, 0, 0] and d["variables"].tolist() == [16, 0, 0]
    assert d["constants"].tolist() == [0, 8, 0]
    assert mem.total.tolist() == [24, 8, 24]
    assert mem.largest_on(0) == [("a", 16), ("b", 8)]        # aligned, as they count
    mem.check()


def test_tile_memory_overflow():
    mem = TileMemory(4, 100, 8, tiles=[1, 1, 3, 2], sizes=[60, 50, 136, 100],
                     categories=[2, 2, 2, 1], owners=[0, 1, 2, 3],
                     owner_names=["x", "y", "z", "w"])
    with pytest.raises(TileMemoryError) as ei:
        mem.check()
    err = ei.value
    assert (err.tile, err.needed, err.available) == (3, 136, 100)   # the most over budget
    assert err.largest == [("z", 136)]
    assert "tile 3" in str(err) and "z (136 B)" in str(err)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 100), st.integers(0, 4),
                          st.integers(0, 5)), max_size=40))
def test_tile_memory_property(allocs):
    tiles = [a[0] for a in allocs]
    sizes = [a[1] for a in allocs]
    cats = [a[2] for a in allocs]
    owners = [a[3] for a in allocs]
    mem = TileMemory(5, 10_000, 8, tiles, sizes, cats, owners, [f"o{i}" for i in range(6)])
    for tile in range(5):
        got = mem.allocations_on(tile)
        mine = [a for a in allocs if a[0] == tile and a[1] > 0]
        assert len(got) == len(mine)
        assert sorted((s, CATEGORIES[c], f"o{o}") for _, s, c, o in mine) == \
            sorted((s, c, o) for _, s, c, o in got)
        addr = [g[0] for g in got]
        assert addr == sorted(addr) and all(x % 8 == 0 for x in addr)
        assert all(a0 + s0 <= a1 for (a0, s0, *_), (a1, *_) in zip(got, got[1:]))   # disjoint
        assert [CATEGORY[g[2]] for g in got] == sorted(CATEGORY[g[2]] for g in got)
        for c, name in enumerate(CATEGORIES):
            assert mem.as_dict()[name][tile] == sum(-(-s // 8) * 8 for t, s, cc, _ in allocs
                                                    if t == tile and cc == c)
        end = got[-1][0] + -(-got[-1][1] // 8) * 8 if got else 0
        assert mem.total[tile] == end


# --- compute and exchange cost ------------------------------------------------------------------
def test_compute_cost_dealing():
    tiles = a64([0] * 7 + [2] * 3)
    est = a64([10, 30, 10, 50, 20, 40, 10, 5, 5, 5])
    multi = np.zeros(10, bool)
    cycles, excl = compute_cost(T4, tiles, est, multi)
    assert cycles.tolist() == [300, 0, 30, 0]
    assert excl.tolist() == [170, 0, 15, 0]


def test_compute_cost_twelve_equal_vertices_fill_two_rounds():
    cycles, excl = compute_cost(T4, a64([1] * 12), a64([20] * 12), np.zeros(12, bool))
    assert cycles[1] == 6 * 40 and excl[1] == 240


def test_compute_cost_multivertex_first():
    # a MultiVertex of 10 loads every worker by 10; then 25 goes to worker 0 -> 35
    cycles, excl = compute_cost(T4, a64([3, 3]), a64([25, 10]), np.array([False, True]))
    assert cycles.tolist() == [0, 0, 0, 6 * 35]
    assert excl.tolist() == [0, 0, 0, 60 + 25]


def test_compute_cost_of_nothing():
    cycles, excl = compute_cost(T4, a64([]), a64([]), np.zeros(0, bool))
    assert cycles.tolist() == [0] * 4 and excl.tolist() == [0] * 4


def test_default_vertex_estimate():
    assert default_vertex_estimate(T4, a64([0, 5, 100])).tolist() == [10, 15, 110]


def test_exchange_cost():
    c = exchange_cost(T4, a64([0, 0, 2]), a64([1, 1, 2]), a64([400, 2, 64]))
    assert c["exchange"].tolist() == [101 + 16, 101 + 16, 0, 0]
    assert c["on_tile_copy"].tolist() == [0, 0, 8, 0]
    assert c["inter_ipu_exchange"].sum() == 0


def test_exchange_cost_between_ipus():
    t = ipulab.devices.m2000(tiles_per_ipu=4).target
    c = exchange_cost(t, a64([0, 1]), a64([4, 13]), a64([1000, 1000]))
    assert c["exchange"].sum() == 0
    assert c["inter_ipu_exchange"][0] == t.link_cycles(1000, 0, 1) > 0
    assert c["inter_ipu_exchange"][4] == c["inter_ipu_exchange"][0]
    assert c["inter_ipu_exchange"][13] == t.link_cycles(1000, 0, 3) > 0
    assert c["inter_ipu_exchange"][1] == c["inter_ipu_exchange"][13]
    assert c["inter_ipu_exchange"][[2, 3, 5]].sum() == 0
