"""Tensors: views of variables. A view is an array of element addresses and creates no state."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import GraphError


def _fmt_key(key) -> str:
    def one(k):
        if isinstance(k, slice):
            parts = ["" if v is None else str(v) for v in (k.start, k.stop)]
            return ":".join(parts + ([str(k.step)] if k.step is not None else []))
        return "..." if k is Ellipsis else ("None" if k is None else str(k))
    return ", ".join(one(k) for k in (key if isinstance(key, tuple) else (key,)))


def _check_basic_key(key, tensor):
    for k in key if type(key) is tuple else (key,):
        kind = type(k)
        if kind is int or kind is slice:        # the common cases, without abc checks
            continue
        ok = k is None or k is Ellipsis or (isinstance(k, numbers.Integral) and kind is not bool)
        if not ok:
            raise GraphError(f"tensor '{tensor.name}': index {k!r} is not basic indexing; use "
                             "ints, slices, ... or None (Poplar tensors have no gather views)")


def _resolve(name) -> str:
    """A view's name, written out when first asked for: views are made by the thousand and
    most names are never read. A lazy name is (the parent's name, suffix maker, argument)."""
    suffixes = []
    while not isinstance(name, str):          # a loop: a view of a view of ... may be deep
        name, suffix, arg = name
        suffixes.append(suffix(arg))
    return name + "".join(reversed(suffixes))


def _index_suffix(key) -> str:
    return f"[{_fmt_key(key)}]"


def _slice_suffix(args) -> str:
    return ".slice({}, {}, {})".format(*args)


class Tensor:
    """A view of one or more variables of a graph: `ids` holds the element addresses."""

    __slots__ = ("_graph", "_ids", "_dtype", "_name")

    def __init__(self, graph, ids: np.ndarray, dtype, name: str):
        self._graph, self._ids, self._dtype, self._name = graph, ids, dtype, name

    def __getstate__(self):
        """Pickled with its name written out (a lazy name can nest deeper than pickle goes)."""
        return None, {"_graph": self._graph, "_ids": self._ids, "_dtype": self._dtype,
                      "_name": self.name}

    # --- what it is ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._ids.shape

    @property
    def rank(self) -> int:
        return self._ids.ndim

    @property
    def dtype(self):
        return self._dtype

    @property
    def name(self) -> str:
        if not isinstance(self._name, str):
            self._name = _resolve(self._name)
        return self._name

    @property
    def ids(self) -> np.ndarray:
        """Element addresses in the storage arena of this tensor's type (read-only view)."""
        return self._ids

    def num_elements(self) -> int:
        return int(self._ids.size)

    def __len__(self) -> int:
        if self.rank == 0:
            raise GraphError(f"tensor '{self.name}' is a scalar and has no length")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Tensor('{self.name}', {self._dtype}, shape={list(self.shape)})"

    def _view(self, ids: np.ndarray, name: str) -> "Tensor":
        return Tensor(self._graph, ids, self._dtype, name)

    def element_view(self, indices, name: str = "") -> "Tensor":
        """A view of this tensor's flattened elements in the order (and shape) of `indices`.

        For operation libraries that lay out a variable in blocks and hand out a view with the
        logical shape (poplin's matrix products); learners use slices and reshapes, as Poplar
        has no gather views."""
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            raise GraphError(f"tensor '{self.name}': element_view takes integer indices")
        flat = self._ids.ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
            raise GraphError(f"tensor '{self.name}': element_view index out of range for its "
                             f"{flat.size} elements")
        ids = np.ascontiguousarray(flat[idx])
        ids.flags.writeable = False
        return self._view(ids, name or f"{self.name}.element_view")

    def _dim(self, dim: int, rank: int | None = None) -> int:
        rank = self.rank if rank is None else rank
        if not -rank <= dim < rank:
            raise GraphError(f"tensor '{self.name}' of rank {self.rank} has no dimension {dim}")
        return dim % rank

    # --- views -----------------------------------------------------------------------------
    def __getitem__(self, key) -> "Tensor":
        _check_basic_key(key, self)
        try:
            ids = self._ids[key]
        except IndexError as e:
            raise GraphError(f"tensor '{self.name}' of shape {list(self.shape)}: {e}") from None
        return self._view(ids, (self._name, _index_suffix, key))

    def slice(self, begin, end, dim: int = 0) -> "Tensor":
        """Poplar's slice: [begin, end) along dim, or per dimension with sequences."""
        if isinstance(begin, (list, tuple)):
            if not len(begin) == len(end) == self.rank:
                raise GraphError(f"tensor '{self.name}': slice needs {self.rank} begins and ends")
            t = self
            for d, (b, e) in enumerate(zip(begin, end)):
                t = t.slice(b, e, d)
            return t
        dim = self._dim(dim)
        size = self.shape[dim]
        if not 0 <= begin <= end <= size:
            raise GraphError(f"tensor '{self.name}': slice [{begin}, {end}) out of range "
                             f"for dimension {dim} of size {size}")
        key = (slice(None),) * dim + (slice(begin, end),)
        return self._view(self._ids[key], (self._name, _slice_suffix, (begin, end, dim)))

    def reshape(self, shape) -> "Tensor":
        shape = tuple(int(s) for s in (shape if isinstance(shape, (list, tuple)) else [shape]))
        if int(np.prod(shape)) != self._ids.size:
            raise GraphError(f"cannot reshape tensor '{self.name}' of {self._ids.size} elements "
                             f"(shape {list(self.shape)}) to {list(shape)}")
        return self._view(self._ids.reshape(shape), f"{self.name}.reshape({list(shape)})")

    def flatten(self, start: int | None = None, end: int | None = None) -> "Tensor":
        """All dims into one, or Poplar's flatten(dimBegin, dimEnd) of dims [start, end)."""
        if start is None:
            return self._view(self._ids.reshape(-1), f"{self.name}.flatten()")
        if not 0 <= start < end <= self.rank:
            raise GraphError(f"tensor '{self.name}': cannot flatten dims [{start}, {end}) "
                             f"of rank {self.rank}")
        s = self.shape
        return self.reshape(s[:start] + (int(np.prod(s[start:end])),) + s[end:])

    def transpose(self) -> "Tensor":
        return self._view(self._ids.T, f"{self.name}.transpose()")

    def dim_shuffle(self, perm) -> "Tensor":
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(self.rank)):
            raise GraphError(f"tensor '{self.name}' of rank {self.rank}: {perm} is not a "
                             "permutation of its dimensions")
        return self._view(self._ids.transpose(perm), f"{self.name}.dim_shuffle({perm})")

    def dim_roll(self, dim: int, new_pos: int = 0) -> "Tensor":
        perm = list(range(self.rank))
        perm.insert(self._dim(new_pos), perm.pop(self._dim(dim)))
        return self.dim_shuffle(perm)

    def broadcast(self, n: int, dim: int) -> "Tensor":
        """Repeat the whole tensor n times along dim (as concat of n copies, like Poplar)."""
        if n < 1:
            raise GraphError(f"tensor '{self.name}': broadcast count must be >= 1, got {n}")
        reps = [1] * self.rank
        reps[self._dim(dim)] = n
        return self._view(np.tile(self._ids, reps), f"{self.name}.broadcast({n}, {dim})")

    def reverse(self, dim: int) -> "Tensor":
        key = (slice(None),) * self._dim(dim) + (slice(None, None, -1),)
        return self._view(self._ids[key], f"{self.name}.reverse({dim})")

    def expand(self, dims) -> "Tensor":
        """Insert singleton dimensions at the given positions."""
        ids = self._ids
        for d in sorted(dims):
            ids = np.expand_dims(ids, self._dim(d, ids.ndim + 1))
        return self._view(ids, f"{self.name}.expand({list(dims)})")

    def squeeze(self, dims=None) -> "Tensor":
        try:
            ids = np.squeeze(self._ids, axis=None if dims is None else tuple(dims))
        except ValueError as e:
            raise GraphError(f"tensor '{self.name}': {e}") from None
        return self._view(ids, f"{self.name}.squeeze()")


def concat(tensors, dim: int = 0) -> Tensor:
    """Join tensors of one graph and type along dim (Poplar's concat)."""
    tensors = list(tensors)
    if not tensors:
        raise GraphError("concat needs at least one tensor")
    first = tensors[0]
    for t in tensors[1:]:
        if t.dtype is not first.dtype:
            raise GraphError(f"concat: '{t.name}' is {t.dtype} but '{first.name}' is {first.dtype}")
        if t._graph is not first._graph:
            raise GraphError(f"concat: '{t.name}' and '{first.name}' belong to different graphs")
    try:
        ids = np.concatenate([t.ids for t in tensors], axis=first._dim(dim))
    except ValueError as e:
        shapes = ", ".join(f"{t.name}{list(t.shape)}" for t in tensors)
        raise GraphError(f"concat along dim {dim}: shapes do not fit ({shapes}): {e}") from None
    return first._view(ids, "concat(" + ", ".join(t.name for t in tensors) + ")")
