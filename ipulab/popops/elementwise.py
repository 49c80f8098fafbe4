"""popops.map and popops.map_in_place: an expression over tensors, as one compute set.

Work is placed where the output lives. `map` creates its output mapped like its largest input
(the first input already of the output's shape), or linearly when every input is broadcast;
then, tile by tile, that tile's output elements are split into up to 6 contiguous pieces (one
vertex each, so each worker context gets one). Inputs are connected as broadcast views of the
same pieces: data already on the tile is read in place, anything else is brought in by the
exchange the compiler inserts. A one-element input is connected once per vertex and read as a
scalar. Identical inputs (the same view passed twice) are read through one field.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import Regions, Tensor
from ..poplar import program as prog
from . import expr as E
from .mapcodelet import map_codelet, result_dtype
from ..poputil import grain_of, new_like, require_mapped, tile_pieces
from .mapping import broadcast_shape, broadcast_to


def _check_args(graph, expression, tensors, seq, what):
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence to add the compute set to, "
                         f"not {type(seq).__name__}")
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if not tensors:
        raise GraphError(f"{what}: needs at least one tensor")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise GraphError(f"{what}: expected tensors, got {type(t).__name__}")
    expression = E.as_expr(expression)
    used = sorted(expression.placeholders())
    if used and used[-1] > len(tensors):
        raise GraphError(f"{what}: the expression {expression} uses _{used[-1]} but only "
                         f"{len(tensors)} tensor(s) were given")
    return expression, tensors, used


def _same_view(a: Tensor, b: Tensor) -> bool:
    return a.dtype is b.dtype and a.shape == b.shape and np.array_equal(a.ids, b.ids)


def _overlaps(a: Tensor, b: Tensor) -> bool:
    """Whether two views share an element (a mark per address over the common span)."""
    if a.dtype.storage != b.dtype.storage or not a.num_elements() or not b.num_elements():
        return False
    x, y = a.ids.ravel(), b.ids.ravel()
    lo, hi = max(x.min(), y.min()), min(x.max(), y.max())
    if lo > hi:
        return False
    marks = np.zeros(hi - lo + 1, bool)
    marks[x[(x >= lo) & (x <= hi)] - lo] = True
    return bool(marks[y[(y >= lo) & (y <= hi)] - lo].any())


def number_fields(tensors, used, out, in_place: bool, same=None):
    """Number the distinct input tensors as fields; return (renumbering, [(field n, tensor)]).

    In place, the output itself is field 1 (InOut); inputs are numbered from 2. same(a, b):
    whether two operands are one view (the planner's placed tensors bring their own)."""
    same = same or _same_view
    mapping, fields = {}, []
    for n in used:
        t = tensors[n - 1]
        if in_place and same(t, out):
            mapping[n] = E.placeholder(1)
            continue
        for k, other in fields:
            if same(t, other):
                mapping[n] = E.placeholder(k)
                break
        else:
            k = len(fields) + (2 if in_place else 1)
            fields.append((k, t))
            mapping[n] = E.placeholder(k)
    return mapping, fields


def _emit(graph, expression, tensors, used, out: Tensor, in_place: bool, seq, name: str):
    """Add the compute set computing expression into out (and Execute it in seq)."""
    mapping, fields = number_fields(tensors, used, out, in_place)
    body = E.substitute(expression, mapping)
    reads_out = in_place and 1 in body.placeholders()
    n_out = out.num_elements()
    inputs = {k: (t.dtype, t.num_elements() == 1 and n_out > 1) for k, t in fields}
    cls = map_codelet(body, inputs, out.dtype, reads_out, where=name)
    if n_out == 0:
        return
    graph.add_codelets(cls)
    views = {k: (t.flatten() if inputs[k][1] else broadcast_to(t, out.shape).flatten())
             for k, t in fields}
    work = tile_pieces(graph, out, graph.target.num_worker_contexts, grain_of(out.dtype))
    n = work.tile.size
    conns = {"out": Regions(out.flatten(), work.begins, work.ends, work.counts)}
    for k, v in views.items():
        conns[f"in{k}"] = Regions.whole(v, n) if inputs[k][1] else \
            Regions(v, work.begins, work.ends, work.counts)
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, cls.__name__, work.tile, conns)
    seq.add(prog.Execute(cs))


def _dtypes(tensors, used):
    return {n: tensors[n - 1].dtype for n in used}


def map(graph, expression, tensors, seq, name: str = "") -> Tensor:  # noqa: A001 - PopLibs
    """A new tensor: expression applied element by element to tensors (placeholders _1, _2,
    ... stand for tensors[0], tensors[1], ...), broadcasting NumPy-style."""
    name = name or "map"
    expression, tensors, used = _check_args(graph, expression, tensors, seq, f"map '{name}'")
    shape = broadcast_shape(tensors, f"map '{name}'")
    dtype = result_dtype(expression, _dtypes(tensors, used), f"map '{name}'")
    full = [t for t in tensors if t.shape == shape]
    like = max(full, key=lambda t: t.num_elements()) if full else None
    out = new_like(graph, dtype, shape, like, f"{name}/out")
    _emit(graph, expression, tensors, used, out, False, seq, name)
    return out


def map_in_place(graph, expression, tensors, seq, name: str = "") -> None:
    """tensors[0] = expression(tensors...), element by element, where tensors[0] lives.

    The result is converted to tensors[0]'s type. When another input overlaps tensors[0]
    without being the same view, the result goes through a new tensor and a Copy."""
    name = name or "map_in_place"
    what = f"map_in_place '{name}'"
    expression, tensors, used = _check_args(graph, expression, tensors, seq, what)
    target = tensors[0]
    shape = broadcast_shape(tensors, what)
    if shape != target.shape:
        raise GraphError(f"{what}: the result has shape {list(shape)} but the tensor written "
                         f"in place, '{target.name}', has shape {list(target.shape)}")
    require_mapped(graph, target, what)
    result_dtype(expression, _dtypes(tensors, used), what)   # type errors before any change
    clash = any(_overlaps(tensors[n - 1], target) and not _same_view(tensors[n - 1], target)
                for n in used)
    if clash:
        tmp = map(graph, E.cast(expression, target.dtype), tensors, seq, name)
        seq.add(prog.Copy(tmp, target, name=f"{name}/copy"))
        return
    _emit(graph, expression, tensors, used, target, True, seq, name)
