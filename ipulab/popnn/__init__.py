"""PopLibs' popnn: non-linearities, pooling and losses, built only from poplar vertices,
compute sets and exchanges (directly, or through popops).

    from ipulab import popnn
    y = popnn.non_linearity(g, "relu", x, seq)
    dx = popnn.non_linearity_input_gradient(g, "relu", y, dy, seq)      # from the OUTPUT y
    p = popnn.pooling.pool(g, "max", x, 2, 2, 0, seq)                   # or popnn.max_pool2d
    loss, dlogits = popnn.calc_loss(g, logits, labels, seq)             # softmax cross-entropy
    pred = popnn.arg_max(g, logits, seq)                                  # class of each row
    y, mean, inv_std = popnn.layer_norm(g, x, gamma, beta, seq)           # over the last dim
    probs = popnn.softmax(g, scores, seq, scale=0.25, causal=True)        # attention's softmax
    mean, var = popnn.bn.batch_norm_statistics(g, x, seq)                 # per channel
"""
from . import pooling
from . import batchnorm as bn
from .argmax import ArgMaxRows, arg_max
from .batchnorm import (batch_norm, batch_norm_gradients, batch_norm_running_update,
                        batch_norm_statistics)
from .layernorm import layer_norm, layer_norm_gradients, layer_norm_param_gradients
from .loss import LossResult, calc_loss
from .nonlinearity import (NonLinearityType, non_linearity, non_linearity_in_place,
                           non_linearity_input_gradient)
from .pooling import (avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward, pool,
                      pool_input_gradient)
from .softmax import softmax, softmax_input_gradient

__all__ = ["pooling", "ArgMaxRows", "arg_max", "LossResult", "calc_loss", "NonLinearityType", "non_linearity",
           "non_linearity_in_place", "non_linearity_input_gradient", "avg_pool2d",
           "avg_pool2d_backward", "max_pool2d", "max_pool2d_backward", "pool",
           "pool_input_gradient", "layer_norm", "layer_norm_gradients",
           "layer_norm_param_gradients", "softmax", "softmax_input_gradient", "bn",
           "batch_norm_statistics", "batch_norm", "batch_norm_gradients",
           "batch_norm_running_update"]
