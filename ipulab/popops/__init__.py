"""PopLibs' popops: element-wise maps, reductions, fills and casts, built only from poplar
vertices, compute sets and exchanges (every result is computed by codelets on tiles).

    from ipulab import popops
    from ipulab.popops.expr import _1, _2
    y = popops.map(g, popops.expr.exp(_1) * _2, [x, w], seq)      # one codelet, one compute set
    s = popops.reduce(g, y, [1], popops.Operation.ADD, seq)       # partials on tiles, then across
    popops.scaled_add_to(g, w, grad, -0.1, seq)                   # w -= 0.1 * grad, in place
    rows = popops.multi_slice(g, table, ids, seq)                 # rows at run-time offsets
"""
from . import expr
from .elementwise import map, map_in_place
from .fill import cast, fill, scaled_add_to, scaled_subtract_from, zero
from .multislice import multi_slice, multi_update_add
from .operation import Operation
from .ops import (abs, abs_in_place, add, add_in_place, div, div_in_place, eq, equal, exp,
                  exp_in_place, gt, gteq, log, log_in_place, logical_and, logical_and_in_place,
                  logical_not, logical_not_in_place, logical_or, logical_or_in_place, lt, lteq,
                  max, max_in_place, min, min_in_place, mul, mul_in_place, neg, neg_in_place,
                  neq, not_equal, pow, pow_in_place, select, sigmoid, sigmoid_in_place, sqrt,
                  sqrt_in_place, square, square_in_place, sub, sub_in_place, tanh,
                  tanh_in_place)
from .ops import IN_PLACE, NAMES
from .reduce import reduce

__all__ = ["expr", "map", "map_in_place", "cast", "fill", "scaled_add_to",
           "scaled_subtract_from", "zero", "multi_slice", "multi_update_add", "Operation",
           "reduce", *NAMES, *IN_PLACE]
