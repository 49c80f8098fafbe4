"""Field views for the batch drivers: what a compute receives, made without allocating or
reference counting.

A driver runs inside one call that holds the arenas, so the views it hands a compute can
borrow the arena's memory: `view(arena, start, n)` is arena[start:start + n] without the
slice's reference count (a slice increments and decrements the arena's count, an atomic
operation per field per vertex), and `regions(arena, off, ln, first, count)` is a VectorList
field: a list-like value of the vertex's regions, held by value (a numba typed List would be a
heap object per vertex and a C call per item). Both have exactly the types slicing gives, so a
compute compiles as it would on slices.

In a compute, a VectorList field f behaves as a list of 1-D views: len(f), f[i] (a negative i
counts from the end; out of range raises IndexError, as a list does) and `for region in f`.
"""
from __future__ import annotations

import operator

from numba import types
from numba.core import cgutils
from numba.core.imputils import RefType, impl_ret_borrowed, iternext_impl, lower_builtin
from numba.core.typing.templates import AbstractTemplate, infer_global, signature
from numba.extending import intrinsic, models, register_model
from numba.np.arrayobj import populate_array

_TABLE = types.Array(types.int64, 1, "C")


class RegionsIter(types.SimpleIteratorType):
    def __init__(self, regions):
        self.regions = regions
        super().__init__(f"iter({regions})", regions.item)


class Regions(types.IterableType):
    """The numba type of a VectorList field whose arena has type `arena`."""

    def __init__(self, arena: types.Array):
        self.arena = arena
        self.item = arena.copy(layout="C")      # the type of arena[lo:hi]
        super().__init__(f"Regions({arena})")

    @property
    def iterator_type(self):
        return RegionsIter(self)


@register_model(Regions)
class _RegionsModel(models.StructModel):
    """Raw pointers and ints only: nothing for numba to reference count."""

    def __init__(self, dmm, fe_type):
        members = [("data", types.voidptr), ("off", types.CPointer(types.int64)),
                   ("ln", types.CPointer(types.int64)), ("first", types.int64),
                   ("count", types.int64)]
        super().__init__(dmm, fe_type, members)


@register_model(RegionsIter)
class _RegionsIterModel(models.StructModel):
    def __init__(self, dmm, fe_type):
        members = [("regions", fe_type.regions), ("index", types.EphemeralPointer(types.int64))]
        super().__init__(dmm, fe_type, members)


def _borrowed_view(context, builder, arrty, data, start, n):
    """A 1-D array of type arrty over n items from data[start], with no meminfo: it borrows
    memory that its caller keeps alive."""
    ary = context.make_array(arrty)(context, builder)
    ptr = builder.bitcast(data, ary.data.type)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(
        context.get_data_type(arrty.dtype)))
    populate_array(ary, data=builder.gep(ptr, [start]), shape=[n], strides=[itemsize],
                   itemsize=itemsize, meminfo=None)
    return ary._getvalue()


def _is_arena(arena) -> bool:
    return isinstance(arena, types.Array) and arena.ndim == 1 and arena.layout == "C"


@intrinsic
def view(typingctx, arena, start, n):
    """arena[start:start + n] for 0 <= start <= start + n <= len(arena) (the plan's slots),
    borrowing the arena's memory."""
    if not (_is_arena(arena) and isinstance(start, types.Integer)
            and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        start_v, n_v = (context.cast(builder, v, t, types.int64)
                        for v, t in zip(args[1:], sig.args[1:]))
        return _borrowed_view(context, builder, sig.return_type, data, start_v, n_v)
    return arena.copy(layout="C")(arena, start, n), codegen


@intrinsic
def regions(typingctx, arena, off, ln, first, count):
    """The VectorList field of regions first .. first + count - 1 of the table (off, ln:
    int64 arrays of offsets into arena and lengths)."""
    if not (_is_arena(arena) and off == _TABLE and ln == _TABLE):
        return None
    sig = Regions(arena)(arena, off, ln, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        st = cgutils.create_struct_proxy(signature.return_type)(context, builder)
        st.data = builder.bitcast(context.make_array(signature.args[0])(
            context, builder, value=args[0]).data, st.data.type)
        st.off = context.make_array(_TABLE)(context, builder, value=args[1]).data
        st.ln = context.make_array(_TABLE)(context, builder, value=args[2]).data
        st.first, st.count = args[3], args[4]
        return st._getvalue()
    return sig, codegen


def _region(context, builder, regions_type, value, j):
    """Region j (0 <= j < count) of a Regions value."""
    st = cgutils.create_struct_proxy(regions_type)(context, builder, value=value)
    q = builder.add(st.first, j)
    start = builder.load(builder.gep(st.off, [q]))
    n = builder.load(builder.gep(st.ln, [q]))
    return _borrowed_view(context, builder, regions_type.item, st.data, start, n)


@infer_global(len)
class _Len(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 1 and isinstance(args[0], Regions):
            return signature(types.int64, *args)


@lower_builtin(len, Regions)
def _len(context, builder, sig, args):
    return cgutils.create_struct_proxy(sig.args[0])(context, builder, value=args[0]).count


@infer_global(operator.getitem)
class _GetItem(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 2 and isinstance(args[0], Regions) and \
                isinstance(args[1], types.Integer):
            return signature(args[0].item, args[0], types.int64)


@lower_builtin(operator.getitem, Regions, types.Integer)
def _getitem(context, builder, sig, args):
    """f[i]: a negative i counts from the end; out of range raises IndexError."""
    f, i = args
    i = context.cast(builder, i, sig.args[1], types.int64)
    count = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=f).count
    j = builder.select(builder.icmp_signed("<", i, i.type(0)), builder.add(i, count), i)
    outside = builder.or_(builder.icmp_signed("<", j, j.type(0)),
                          builder.icmp_signed(">=", j, count))
    with builder.if_then(outside, likely=False):
        context.call_conv.return_user_exc(builder, IndexError,
                                          ("VectorList index out of range",))
    return _region(context, builder, sig.args[0], f, j)


@lower_builtin("getiter", Regions)
def _getiter(context, builder, sig, args):
    it = context.make_helper(builder, sig.return_type)
    it.index = cgutils.alloca_once_value(builder, context.get_constant(types.int64, 0))
    it.regions = args[0]
    return impl_ret_borrowed(context, builder, sig.return_type, it._getvalue())


@lower_builtin("iternext", RegionsIter)
@iternext_impl(RefType.BORROWED)
def _iternext(context, builder, sig, args, result):
    it_type = sig.args[0]
    it = context.make_helper(builder, it_type, value=args[0])
    f = cgutils.create_struct_proxy(it_type.regions)(context, builder, value=it.regions)
    index = builder.load(it.index)
    valid = builder.icmp_signed("<", index, f.count)
    result.set_valid(valid)
    with builder.if_then(valid):
        result.yield_(_region(context, builder, it_type.regions, it.regions, index))
        builder.store(cgutils.increment_index(builder, index), it.index)
