"""torch.nn.BatchNorm2d and AdaptiveAvgPool2d(1): the layers a torchvision ResNet adds to a
plain CNN.

BatchNorm2d keeps buffers beside its weights, as torch's state_dict does: running_mean
(zeros), running_var (ones) and num_batches_tracked (0). In training it normalises with the
batch's statistics (each replica with its own batch's) and updates the running ones on the
tiles; in evaluation it uses the running ones. The buffers get no gradient and no update
from the optimizer; Trainer.get_weights() and set_weights() carry them.
"""
from __future__ import annotations

import numpy as np

from .. import popnn, popops
from ..errors import GraphError
from ..popops.expr import _1
from .layers import AvgPool2d, Layer, _positive

BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


class BatchNorm2d(Layer):
    """torch.nn.BatchNorm2d(num_features, eps=1e-5, momentum=0.1): per channel over the batch
    and positions; weight (gamma) ones, bias (beta) zeros; the running variance is updated
    with the unbiased batch variance, the batch is normalised with the biased one."""

    param_names = ("weight", "bias")
    buffer_names = BUFFERS

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        self.num_features = _positive(num_features, "num_features", "BatchNorm2d")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise GraphError(f"BatchNorm2d: eps must be a positive number, not {eps!r}")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or \
                not 0.0 <= momentum <= 1.0:
            raise GraphError(f"BatchNorm2d: momentum must be a number in [0, 1], not "
                             f"{momentum!r}")
        self.eps, self.momentum = float(eps), float(momentum)

    def param_shapes(self) -> dict:
        c = self.num_features
        return {"weight": (c,), "bias": (c,)}

    def buffer_shapes(self) -> dict:
        c = self.num_features
        return {"running_mean": (c,), "running_var": (c,), "num_batches_tracked": ()}

    def init_params(self, rng) -> dict:
        c = self.num_features
        return {"weight": np.ones(c, np.float32), "bias": np.zeros(c, np.float32)}

    def init_buffers(self) -> dict:
        c = self.num_features
        return {"running_mean": np.zeros(c, np.float32), "running_var": np.ones(c, np.float32),
                "num_batches_tracked": np.zeros((), np.float32)}

    def output_shape(self, shape):
        if len(shape) != 3 or shape[0] != self.num_features:
            raise GraphError(f"{self!r} takes samples of shape (channels={self.num_features}, "
                             f"height, width), not {tuple(shape)}")
        return tuple(shape)

    def forward(self, b, x):
        g, seq = b.graph, b.seq
        if b.train:
            n = popnn.bn.count(x)
            if n < 2:
                raise GraphError(f"{self!r} in training needs more than 1 value per channel "
                                 f"(batch x height x width per replica), not {n} "
                                 f"(input {list(x.shape)}), as torch")
            mean, var = popnn.bn.batch_norm_statistics(g, x, seq, b.name("stats"))
            if b.has("running_mean") and not b.prefix.startswith("recompute/"):
                self._update_running(b, mean, var, n)
        else:
            mean, var = b.param("running_mean"), b.param("running_var")
        y, inv_std = popnn.batch_norm(g, x, b.param("weight"), b.param("bias"), mean, var, seq,
                                      self.eps, b.name("batch_norm"))
        b.save(x=x, mean=mean, inv_std=inv_std)
        return y

    def _update_running(self, b, mean, var, n: int) -> None:
        """torch's update of the buffers, once per forward pass (not again when recomputed)."""
        popnn.batch_norm_running_update(b.graph, b.param("running_mean"),
                                        b.param("running_var"), mean, var, n, self.momentum,
                                        b.seq, b.name("running"))
        popops.map_in_place(b.graph, _1 + 1, [b.param("num_batches_tracked")], b.seq,
                            b.name("num_batches_tracked"))

    def backward(self, b, dy):
        dx, dw, db = popnn.batch_norm_gradients(
            b.graph, b.saved("x"), dy, b.saved("mean"), b.saved("inv_std"), b.param("weight"),
            b.seq, b.name("batch_norm_grad"), input_gradient=b.need_dx)
        b.grad("weight", dw)
        b.grad("bias", db)
        return dx

    def __repr__(self) -> str:
        return f"BatchNorm2d({self.num_features}, eps={self.eps}, momentum={self.momentum})"


class AdaptiveAvgPool2d(AvgPool2d):
    """torch.nn.AdaptiveAvgPool2d(1): the mean of each channel over its positions, (c, h, w)
    -> (c, 1, 1); an average pool whose kernel is the whole image."""

    def __init__(self, output_size=1):
        if output_size not in (1, (1, 1)):
            raise GraphError(f"AdaptiveAvgPool2d: only output_size=1 (a global average, as a "
                             f"ResNet's) is supported, not {output_size!r}")
        super().__init__(1)

    def output_shape(self, shape):
        if len(shape) != 3 or min(shape) < 1:
            raise GraphError(f"{self!r} takes samples of shape (channels, height, width) of at "
                             f"least 1x1, not {tuple(shape)}")
        return (shape[0], 1, 1)

    def forward(self, b, x):
        self.kernel_size = self.stride = tuple(x.shape[2:])
        return super().forward(b, x)

    def backward(self, b, dy):
        self.kernel_size = self.stride = tuple(b.saved("x").shape[2:])
        return super().backward(b, dy)

    def __repr__(self) -> str:
        return "AdaptiveAvgPool2d(output_size=1)"
