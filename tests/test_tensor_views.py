"""Tensor views: every view agrees with numpy on element addresses (t.ids) and, run on a device,
on the values a Copy of the view moves. Misuse raises GraphError."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import poplar
from ipulab.errors import GraphError
from ipulab.poplar import program as prog


@pytest.fixture
def m34(g4):
    """A 3x4 FLOAT variable and the numpy array of its element addresses."""
    t = g4.add_variable(poplar.FLOAT, [3, 4], "m")
    return t, np.arange(12).reshape(3, 4) + int(t.ids.flat[0])


def same(t, ref):
    assert t.shape == ref.shape
    np.testing.assert_array_equal(t.ids, ref)


# --- what a variable is ----------------------------------------------------------------------
def test_variable_attributes(g4):
    a = g4.add_variable(poplar.FLOAT, [2, 3, 4], "a")
    assert a.shape == (2, 3, 4) and a.rank == 3 and a.num_elements() == 24
    assert a.dtype is poplar.FLOAT and a.name == "a"
    assert len(a) == 2
    b = g4.add_variable(np.int32, [5], "b")      # numpy dtypes map to poplar types
    assert b.dtype is poplar.INT
    # a second variable of the same type occupies fresh addresses
    c = g4.add_variable(poplar.FLOAT, [4], "c")
    assert not set(a.ids.ravel()) & set(c.ids.ravel())
    assert sorted(a.ids.ravel()) == list(range(a.ids.min(), a.ids.min() + 24))


def test_views_are_read_only_addresses(m34):
    t, ref = m34
    with pytest.raises(ValueError):
        t.ids[0, 0] = 99
    same(t, ref)


# --- indexing --------------------------------------------------------------------------------
def test_integer_indexing(m34):
    t, ref = m34
    same(t[1], ref[1])
    same(t[-1], ref[-1])
    same(t[2, 3], ref[2, 3])
    assert t[2, 3].rank == 0 and t[2, 3].num_elements() == 1
    same(t[1][2], ref[1][2])


def test_basic_slicing(m34):
    t, ref = m34
    same(t[1:2, 1:4], ref[1:2, 1:4])
    same(t[:, ::2], ref[:, ::2])
    same(t[::-1, 1:], ref[::-1, 1:])
    same(t[..., 1], ref[..., 1])
    same(t[None, 1], ref[None, 1])
    same(t[:, None, :], ref[:, None, :])
    same(t[np.int64(2)], ref[2])


def test_slice_method(m34):
    t, ref = m34
    same(t.slice(1, 3), ref[1:3])
    same(t.slice(1, 3, dim=1), ref[:, 1:3])
    same(t.slice(0, 0, dim=1), ref[:, 0:0])
    same(t.slice(1, 4, -1), ref[:, 1:4])


def test_slice_with_begin_end_lists(m34):
    t, ref = m34
    same(t.slice([1, 1], [2, 4]), ref[1:2, 1:4])     # Poplar tutorial 1: v3.slice({1,1},{2,4})
    same(t.slice((0, 2), (3, 3)), ref[0:3, 2:3])


@pytest.mark.parametrize("begin,end,dim", [(3, 2, 0), (0, 4, 0), (-1, 2, 0), (0, 5, 1), (0, 1, 2)])
def test_bad_slice(m34, begin, end, dim):
    t, _ = m34
    with pytest.raises(GraphError, match="'m'"):
        t.slice(begin, end, dim)


def test_bad_slice_lists(m34):
    t, _ = m34
    with pytest.raises(GraphError):
        t.slice([0], [1])                 # one begin for a rank-2 tensor
    with pytest.raises(GraphError):
        t.slice([0, 0], [4, 1])           # 4 > 3 rows


@pytest.mark.parametrize("key", [np.array([0, 2]), [0, 1], (slice(None), [1, 2]), True,
                                 np.array([True, False, True]), 1.0])
def test_advanced_indexing_rejected(m34, key):
    t, _ = m34
    with pytest.raises(GraphError, match="basic indexing"):
        t[key]


def test_index_out_of_range(m34):
    t, _ = m34
    with pytest.raises(GraphError, match="'m'"):
        t[3]
    with pytest.raises(GraphError):
        t[0, 4]
    with pytest.raises(GraphError):
        t[0, 0, 0]


# --- reshape, flatten, transpose, dim_shuffle -------------------------------------------------
def test_reshape(m34):
    t, ref = m34
    same(t.reshape([2, 6]), ref.reshape(2, 6))
    same(t.reshape((12,)), ref.reshape(12))
    same(t.reshape(12), ref.reshape(12))
    same(t.transpose().reshape([4, 3]), ref.T.reshape(4, 3))   # row-major order of the view
    same(t.reshape([1, 12, 1]), ref.reshape(1, 12, 1))


@pytest.mark.parametrize("shape", [[5], [2, 5], [13], [-1], [3, 4, 2]])
def test_bad_reshape(m34, shape):
    t, _ = m34
    with pytest.raises(GraphError, match="reshape"):
        t.reshape(shape)


def test_flatten(g4):
    a = g4.add_variable(poplar.FLOAT, [2, 3, 4], "a")
    ref = a.ids.copy()
    same(a.flatten(), ref.reshape(-1))
    same(a.flatten(1, 3), ref.reshape(2, 12))
    same(a.flatten(0, 2), ref.reshape(6, 4))
    same(a.transpose().flatten(), ref.T.reshape(-1))
    with pytest.raises(GraphError):
        a.flatten(2, 1)
    with pytest.raises(GraphError):
        a.flatten(0, 4)


def test_transpose(m34):
    t, ref = m34
    same(t.transpose(), ref.T)
    same(t.transpose().transpose(), ref)


def test_dim_shuffle(g4):
    a = g4.add_variable(poplar.FLOAT, [2, 3, 4], "a")
    ref = a.ids.copy()
    same(a.dim_shuffle([2, 0, 1]), ref.transpose(2, 0, 1))
    same(a.dim_shuffle([0, 1, 2]), ref)
    with pytest.raises(GraphError, match="permutation"):
        a.dim_shuffle([0, 0, 1])
    with pytest.raises(GraphError):
        a.dim_shuffle([0, 1])


# --- broadcast, reverse, expand, squeeze --------------------------------------------------------
def test_broadcast_is_n_copies_concatenated(m34):
    t, ref = m34
    # Poplar's broadcast(n, dim): the whole tensor repeated n times along dim (tile semantics,
    # not numpy's element-wise repeat)
    same(t.broadcast(3, 0), np.concatenate([ref] * 3, axis=0))
    same(t.broadcast(2, 1), np.concatenate([ref] * 2, axis=1))
    same(t.broadcast(1, 1), ref)
    v = t[0]                                # [a b c d] -> [a b c d a b c d], not [a a b b ...]
    same(v.broadcast(2, 0), np.r_[ref[0], ref[0]])
    with pytest.raises(GraphError):
        t.broadcast(0, 0)
    with pytest.raises(GraphError):
        t.broadcast(2, 2)


def test_reverse(m34):
    t, ref = m34
    same(t.reverse(0), ref[::-1])
    same(t.reverse(1), ref[:, ::-1])
    same(t.reverse(-1), ref[:, ::-1])
    with pytest.raises(GraphError):
        t.reverse(2)


def test_expand_and_squeeze(m34):
    t, ref = m34
    same(t.expand([0]), ref[None])
    same(t.expand([2]), ref[:, :, None])
    same(t.expand([0, 2]), np.expand_dims(ref, (0, 2)))
    e = t.expand([1])
    assert e.shape == (3, 1, 4)
    same(e.squeeze(), ref)
    same(e.squeeze([1]), ref)
    same(t[0:1].squeeze(), ref[0])
    with pytest.raises(GraphError):
        t.squeeze([0])                      # dimension 0 has size 3


# --- concat --------------------------------------------------------------------------------------
def test_concat(g4):
    a = g4.add_variable(poplar.FLOAT, [2, 3], "a")
    b = g4.add_variable(poplar.FLOAT, [1, 3], "b")
    c = g4.add_variable(poplar.FLOAT, [2, 2], "c")
    same(poplar.concat([a, b]), np.concatenate([a.ids, b.ids]))
    same(poplar.concat([a, c], dim=1), np.concatenate([a.ids, c.ids], axis=1))
    same(poplar.concat([a, a.reverse(0)], 0), np.concatenate([a.ids, a.ids[::-1]]))
    assert poplar.concat([a, b]).dtype is poplar.FLOAT
    with pytest.raises(GraphError):
        poplar.concat([a, c])               # 3 columns vs 2
    with pytest.raises(GraphError):
        poplar.concat([])


def test_concat_of_different_dtypes(g4):
    a = g4.add_variable(poplar.FLOAT, [2], "a")
    i = g4.add_variable(poplar.INT, [2], "i")
    with pytest.raises(GraphError, match="'i'.*INT|INT.*'i'"):
        poplar.concat([a, i])
    h = g4.add_variable(poplar.HALF, [2], "h")   # HALF shares FLOAT's storage but is another type
    with pytest.raises(GraphError):
        poplar.concat([a, h])


def test_concat_of_different_graphs(dev4):
    a = poplar.Graph(dev4.target).add_variable(poplar.FLOAT, [2], "a")
    b = poplar.Graph(dev4.target).add_variable(poplar.FLOAT, [2], "b")
    with pytest.raises(GraphError):
        poplar.concat([a, b])


# --- misuse on scalars (rank 0) ----------------------------------------------------------------
def test_rank0_views_raise_graph_error(m34):
    """Views that need a dimension raise GraphError on a scalar, not a raw IndexError."""
    t, _ = m34
    s = t[0, 0]
    with pytest.raises(GraphError):
        s.broadcast(2, 0)
    with pytest.raises(GraphError):
        s.reverse(0)
    with pytest.raises(GraphError):
        len(s)


def test_expand_out_of_range_raises_graph_error(m34):
    t, _ = m34
    with pytest.raises(GraphError):
        t.expand([5])


# --- property: random chains of views behave like numpy ------------------------------------------
def _factorizations(n):
    """Some shapes with n elements (up to rank 3)."""
    out = [(n,)]
    for a in range(1, n + 1):
        if n % a == 0:
            out.append((a, n // a))
            for b in range(1, n // a + 1):
                if (n // a) % b == 0:
                    out.append((a, b, n // a // b))
    return out


KINDS = ["broadcast", "index", "getslice", "slice", "slice_lists", "reverse", "dim_shuffle",
         "concat", "transpose", "squeeze", "reshape", "flatten", "expand"]
NEED_RANK = {"index", "getslice", "slice", "reverse", "dim_shuffle", "broadcast", "concat",
             "squeeze"}


@st.composite
def view_chains(draw):
    """A base shape and a list of view operations, each valid for the shape it is applied to."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    cur = np.empty(shape)
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        r = cur.ndim
        kind = draw(st.sampled_from(KINDS))
        if (r == 0 and kind in NEED_RANK) or (kind == "transpose" and r != 2) or (
                kind == "slice_lists" and r < 2):
            continue
        if kind in ("index", "getslice", "slice", "reverse", "broadcast", "concat"):
            dim = draw(st.integers(0, r - 1))
            size = cur.shape[dim]
        if kind == "index":
            if size == 0:
                continue
            op = (kind, dim, draw(st.integers(-size, size - 1)))
        elif kind == "getslice":
            start = draw(st.none() | st.integers(-size - 1, size + 1))
            stop = draw(st.none() | st.integers(-size - 1, size + 1))
            step = draw(st.sampled_from([None, 1, 2, -1, -2, 3]))
            op = (kind, dim, slice(start, stop, step))
        elif kind == "slice":
            b = draw(st.integers(0, size))
            op = (kind, dim, b, draw(st.integers(b, size)))
        elif kind == "slice_lists":
            bs = [draw(st.integers(0, s)) for s in cur.shape]
            op = (kind, bs, [draw(st.integers(b, s)) for b, s in zip(bs, cur.shape)])
        elif kind == "reshape":
            op = (kind, draw(st.sampled_from(_factorizations(cur.size))) if cur.size else (0,))
        elif kind == "dim_shuffle":
            op = (kind, draw(st.permutations(range(r))))
        elif kind == "broadcast":
            if cur.size * 3 > 200:
                continue
            op = (kind, draw(st.integers(1, 3)), dim)
        elif kind == "reverse":
            op = (kind, dim)
        elif kind == "expand":
            op = (kind, draw(st.integers(0, r)))
        elif kind == "concat":
            if cur.size * 2 > 200:
                continue
            op = (kind, dim)
        else:
            op = (kind,)
        cur = apply_numpy(cur, op)
        ops.append(op)
    return shape, ops


def apply_numpy(a, op):
    kind = op[0]
    if kind == "index":
        return a[(slice(None),) * op[1] + (op[2],)]
    if kind == "getslice":
        return a[(slice(None),) * op[1] + (op[2],)]
    if kind == "slice":
        return a[(slice(None),) * op[1] + (slice(op[2], op[3]),)]
    if kind == "slice_lists":
        return a[tuple(slice(b, e) for b, e in zip(op[1], op[2]))]
    if kind == "reshape":
        return a.reshape(op[1])
    if kind == "flatten":
        return a.reshape(-1)
    if kind == "transpose":
        return a.T
    if kind == "dim_shuffle":
        return a.transpose(op[1])
    if kind == "broadcast":
        return np.concatenate([a] * op[1], axis=op[2])
    if kind == "reverse":
        return np.flip(a, op[1])
    if kind == "expand":
        return np.expand_dims(a, op[1])
    if kind == "squeeze":
        return np.squeeze(a)
    if kind == "concat":
        return np.concatenate([a, np.flip(a, op[1])], axis=op[1])
    raise AssertionError(kind)


def apply_tensor(t, op):
    kind = op[0]
    if kind in ("index", "getslice"):
        return t[(slice(None),) * op[1] + (op[2],)]
    if kind == "slice":
        return t.slice(op[2], op[3], op[1])
    if kind == "slice_lists":
        return t.slice(op[1], op[2])
    if kind == "reshape":
        return t.reshape(list(op[1]))
    if kind == "flatten":
        return t.flatten()
    if kind == "transpose":
        return t.transpose()
    if kind == "dim_shuffle":
        return t.dim_shuffle(op[1])
    if kind == "broadcast":
        return t.broadcast(op[1], op[2])
    if kind == "reverse":
        return t.reverse(op[1])
    if kind == "expand":
        return t.expand([op[1]])
    if kind == "squeeze":
        return t.squeeze()
    if kind == "concat":
        return poplar.concat([t, t.reverse(op[1])], dim=op[1])
    raise AssertionError(kind)


DEV8 = ipulab.devices.ipu("ipu2", tiles_per_ipu=8)


@settings(max_examples=50, deadline=None)
@given(chain=view_chains(), data=st.data())
def test_view_chains_match_numpy(chain, data):
    shape, ops = chain
    g = poplar.Graph(DEV8.target)
    pad = g.add_variable(poplar.FLOAT, [3], "pad")   # so addresses do not start at 0
    g.set_tile_mapping(pad, 0)
    v = g.add_variable(poplar.FLOAT, list(shape), "v")
    n = v.num_elements()
    addresses = np.arange(n).reshape(shape) + int(v.ids.flat[0])
    np.testing.assert_array_equal(v.ids, addresses)

    t, ref = v, addresses
    for op in ops:
        t, ref = apply_tensor(t, op), apply_numpy(ref, op)
        assert t.shape == ref.shape, op
        np.testing.assert_array_equal(t.ids, ref, err_msg=str(op))
        assert t.dtype is poplar.FLOAT and t.num_elements() == ref.size

    # The same view, run: Copy it into a fresh variable and compare values with numpy.
    if t.num_elements() == 0:
        return
    tiles = data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n), label="v tiles")
    for i, tile in enumerate(tiles):
        g.set_tile_mapping(v.flatten()[i], tile)
    out = g.add_variable(poplar.FLOAT, list(t.shape), "out")
    g.set_tile_mapping(out, data.draw(st.integers(0, 7), label="out tile"))
    g.create_host_write("v", v)
    g.create_host_read("out", out)
    e = poplar.Engine(g, prog.Copy(t, out))
    e.load(DEV8)
    host = np.random.default_rng(n).standard_normal(shape).astype(np.float32)
    e.write_tensor("v", host)
    e.run()
    expected = host
    for op in ops:
        expected = apply_numpy(expected, op)
    got = e.read_tensor("out")
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)

