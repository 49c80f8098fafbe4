"""nn.Sequential: layers in order, and their weights on the host in PyTorch's state_dict form.

    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    model.state_dict()      # {"0.weight": (8, 1, 3, 3), "0.bias": (8,), "4.weight": ..., ...}

Keys are exactly torch.nn.Sequential(...).state_dict()'s: the layer's index, a dot, the
weight's name. The weights are drawn (PyTorch's default initialisation) the first time they
are needed, from seed 0 unless reset_parameters(seed) or a Trainer's seed chose another.
"""
from __future__ import annotations

import numpy as np

from ..errors import DataError, GraphError
from .layers import Conv2d, Flatten, Layer, Linear, MaxPool2d, ReLU
from .transformer import Embedding, LayerNorm, PositionalEmbedding, TransformerEncoderLayer


class Sequential:
    """torch.nn.Sequential for ipulab's layers."""

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise GraphError(f"Sequential: item {i} is a {type(layer).__name__}, not an "
                                 "ipulab.nn layer (Conv2d, ReLU, MaxPool2d, AvgPool2d, Flatten, "
                                 "Linear, Dropout, Embedding, PositionalEmbedding, LayerNorm, "
                                 "GELU, MultiheadAttention, TransformerEncoderLayer)")
        if not layers:
            raise GraphError("Sequential needs at least one layer")
        self.layers = list(layers)
        self.prefixes = [str(i) for i in range(len(self.layers))]    # of state_dict keys
        self._weights: dict | None = None

    # --- a list of layers ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i) -> Layer:
        return self.layers[i]

    def __iter__(self):
        return iter(self.layers)

    def __repr__(self) -> str:
        inner = "\n".join(f"  ({i}): {layer!r}" for i, layer in enumerate(self.layers))
        return f"Sequential(\n{inner}\n)"

    @property
    def takes_tokens(self) -> bool:
        """Whether the model's input is integer token ids (it starts with an nn.Embedding)."""
        return self.layers[0].takes_tokens

    # --- shapes -------------------------------------------------------------------------------
    def param_shapes(self) -> dict:
        """{key: shape} in state_dict order ("0.weight", "0.bias", ...)."""
        return {f"{i}.{name}": tuple(shape) for i, layer in enumerate(self.layers)
                for name, shape in layer.param_shapes().items()}

    def buffer_shapes(self) -> dict:
        """{key: shape} of the buffers (no gradients, no optimizer): "1.running_mean", ..."""
        return {f"{i}.{name}": tuple(shape) for i, layer in enumerate(self.layers)
                for name, shape in layer.buffer_shapes().items()}

    def state_shapes(self) -> dict:
        """{key: shape} of weights and buffers, in torch's state_dict order."""
        return {f"{i}.{name}": tuple(shape) for i, layer in enumerate(self.layers)
                for name, shape in layer.state_shapes().items()}

    def key(self, key: str) -> str:
        """The state_dict key of a graph key "<index>.<name>" (its layer's prefix, e.g.
        "layer1.0.conv1.weight" in a ResNet; the index itself in a plain Sequential)."""
        index, name = key.split(".", 1)
        return f"{self.prefixes[int(index)]}.{name}"

    def external(self, weights: dict) -> dict:
        """weights keyed by graph keys -> keyed by state_dict keys."""
        return {self.key(k): v for k, v in weights.items()}

    def shapes(self, input_shape) -> list[tuple]:
        """One sample's shape before the first layer and after each layer (GraphError naming
        the layer whose input does not fit)."""
        shape = tuple(int(s) for s in input_shape)
        out = [shape]
        for i, layer in enumerate(self.layers):
            try:
                shape = tuple(layer.output_shape(shape))
            except GraphError as e:
                raise GraphError(f"layer {i}: {e}") from None
            out.append(shape)
        return out

    def output_shape(self, input_shape) -> tuple:
        return self.shapes(input_shape)[-1]

    def num_parameters(self) -> int:
        return int(sum(np.prod(s) for s in self.param_shapes().values()))

    # --- weights ------------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self._weights is not None

    def reset_parameters(self, seed: int = 0) -> None:
        """Draw fresh weights (PyTorch's default initialisation) from a seeded generator."""
        rng = np.random.default_rng(seed)
        weights = {}
        for i, layer in enumerate(self.layers):
            for name, value in {**layer.init_params(rng), **layer.init_buffers()}.items():
                weights[f"{i}.{name}"] = value
        self._weights = {k: weights[k] for k in self.state_shapes()}

    def state(self) -> dict:
        """A copy of the weights and buffers keyed by graph keys ("<index>.<name>")."""
        if self._weights is None:
            self.reset_parameters(0)
        return {k: v.copy() for k, v in self._weights.items()}

    def state_dict(self) -> dict:
        """A copy of the weights and buffers, keyed like the torch model's state_dict()."""
        return self.external(self.state())

    def load_state_dict(self, weights: dict) -> None:
        """Replace the weights: exactly the keys of state_dict(), each of its shape."""
        checked = check_weights(self.external(self.state_shapes()), weights)
        self._weights = dict(zip(self.state_shapes(), checked.values()))


def check_weights(shapes: dict, weights) -> dict:
    """weights as float32 copies, checked against {key: shape}; DataError on any mismatch."""
    if not isinstance(weights, dict):
        raise DataError(f"weights must be a dict like state_dict(), not {type(weights).__name__}")
    missing = [k for k in shapes if k not in weights]
    extra = [k for k in weights if k not in shapes]
    if missing or extra:
        raise DataError("weights do not match the model: "
                        + (f"missing {missing}" if missing else "")
                        + ("; " if missing and extra else "")
                        + (f"unexpected {extra}" if extra else "")
                        + f" (the model has {list(shapes)})")
    out = {}
    for key, shape in shapes.items():
        value = weights[key]
        try:
            a = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(f"weight {key!r} is not an array of numbers") from None
        if a.shape != tuple(shape):
            raise DataError(f"weight {key!r} has shape {list(a.shape)} but the model needs "
                            f"{list(shape)} (PyTorch layout)")
        if not np.isfinite(a).all():
            raise DataError(f"weight {key!r} holds inf or nan")
        out[key] = a.copy()
    return out


def default_cnn(input_shape=(1, 8, 8), classes: int = 10) -> Sequential:
    """The course's CNN: two 3x3 convolutions (16 and 32 channels, padding 1) each followed by
    ReLU and 2x2 max pooling, then a Linear layer to the classes. For digits (1, 8, 8):

        Conv2d(1, 16, 3, padding=1), ReLU, MaxPool2d(2), Conv2d(16, 32, 3, padding=1), ReLU,
        MaxPool2d(2), Flatten, Linear(32 * 2 * 2, 10)
    """
    c, h, w = (int(s) for s in input_shape)
    if h < 4 or w < 4:
        raise GraphError(f"default_cnn pools twice by 2: samples of {h}x{w} are too small")
    return Sequential(Conv2d(c, 16, 3, padding=1), ReLU(), MaxPool2d(2),
                      Conv2d(16, 32, 3, padding=1), ReLU(), MaxPool2d(2), Flatten(),
                      Linear(32 * (h // 2 // 2) * (w // 2 // 2), classes))


def small_gpt(vocab: int = 64, seq_len: int = 32, d_model: int = 64, nhead: int = 4,
              dim_feedforward: int = 256, num_layers: int = 2) -> Sequential:
    """The course's small GPT: token and position embeddings, num_layers pre-norm causal
    blocks with GELU and no dropout, a final LayerNorm and a Linear to the vocabulary:

        Embedding(64, 64), PositionalEmbedding(32, 64),
        TransformerEncoderLayer(64, 4, 256, dropout=0, activation="gelu", norm_first=True,
                                causal=True) x 2, LayerNorm(64), Linear(64, 64)

    Samples are token ids (seq_len,); the output is a score per vocabulary entry per position.
    """
    blocks = [TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0,
                                      activation="gelu", norm_first=True, causal=True)
              for _ in range(num_layers)]
    return Sequential(Embedding(vocab, d_model), PositionalEmbedding(seq_len, d_model), *blocks,
                      LayerNorm(d_model), Linear(d_model, vocab))
