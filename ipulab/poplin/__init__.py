"""PopLibs' poplin: matrix products and convolutions, planned over tiles."""
from . import codelets
from .conv import (conv2d, conv2d_backward_input, conv2d_backward_weights, conv2d_output_shape,
                   conv_patches, plan_conv2d, weights_transpose_chans_flip_xy)
from .matmul import (create_mat_mul_input_lhs, create_mat_mul_input_rhs, mat_mul, mat_mul_acc,
                     mat_mul_grouped)
from .plan import MatMulPlan, Split, plan_mat_mul

__all__ = ["codelets", "MatMulPlan", "Split", "plan_mat_mul", "mat_mul", "mat_mul_acc",
           "mat_mul_grouped", "create_mat_mul_input_lhs", "create_mat_mul_input_rhs",
           "conv2d", "conv_patches", "conv2d_backward_input", "conv2d_backward_weights",
           "conv2d_output_shape", "plan_conv2d", "weights_transpose_chans_flip_xy"]
