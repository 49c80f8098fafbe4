"""Eight float32 lanes, for numba kernels that LLVM would not vectorise (numba leaves LLVM's
SLP vectoriser off, so short fixed-width loops stay scalar). In njit code only:

    acc = f32x8_zero()
    acc = f32x8_axpy(acc, x, f32x8_load(b, i))    # acc + x * b[i:i + 8], lane by lane
    f32x8_store(c, j, acc)                        # c[j:j + 8] = acc

Every lane is rounded as scalar code rounds it (a float32 multiply, then a float32 add: no
fused multiply-add, no reassociation), so a loop over lanes gives the same bits as the scalar
loop it replaces. Loads and stores are not bounds checked: callers keep i + 8 <= len(array).
u(i) makes an index unsigned (see its docstring).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, models, register_model

LANES = 8


class F32x8(types.Type):
    def __init__(self):
        super().__init__("f32x8")


f32x8 = F32x8()
_VEC = ir.VectorType(ir.FloatType(), LANES)


@register_model(F32x8)
class _F32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VEC)


def _f32_array(a) -> bool:
    return (isinstance(a, types.Array) and a.dtype == types.float32 and a.ndim == 1
            and a.layout == "C")


def _lane_ptr(context, builder, arrty, arr, i):
    data = context.make_array(arrty)(context, builder, value=arr).data
    return builder.bitcast(builder.gep(data, [i]), _VEC.as_pointer())


@intrinsic
def f32x8_zero(typingctx):
    """Eight lanes of +0.0."""
    return f32x8(), lambda context, builder, sig, args: ir.Constant(_VEC, None)


@intrinsic
def f32x8_load(typingctx, a, i):
    """a[i:i + 8] (a: a 1-D float32 array)."""
    if _f32_array(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            i64 = context.cast(builder, args[1], sig.args[1], types.int64)
            return builder.load(_lane_ptr(context, builder, sig.args[0], args[0], i64), align=4)
        return f32x8(a, i), codegen


@intrinsic
def f32x8_store(typingctx, a, i, v):
    """a[i:i + 8] = v."""
    if _f32_array(a) and a.mutable and isinstance(i, types.Integer) and v == f32x8:
        def codegen(context, builder, sig, args):
            i64 = context.cast(builder, args[1], sig.args[1], types.int64)
            builder.store(args[2], _lane_ptr(context, builder, sig.args[0], args[0], i64),
                          align=4)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen


@intrinsic
def f32x8_axpy(typingctx, acc, x, v):
    """acc + x * v per lane (x: a float32 scalar): x times v rounded, then added and rounded."""
    if acc == f32x8 and v == f32x8 and x == types.float32:
        def codegen(context, builder, sig, args):
            splat = builder.insert_element(ir.Constant(_VEC, None), args[1],
                                           ir.Constant(ir.IntType(32), 0))
            splat = builder.shuffle_vector(splat, ir.Constant(_VEC, None),
                                           ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                                       [0] * LANES))
            return builder.fadd(args[0], builder.fmul(splat, args[2]))
        return f32x8(acc, x, v), codegen


@njit(inline="always")
def u(i):
    """i as an unsigned index (0 <= i): numba indexes with it without first checking for a
    negative value (and wrapping it around), a check that can cost as much as the work in a
    short inner loop."""
    return np.uint64(i)
