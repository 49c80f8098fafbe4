"""PyTorch twins of ipulab's transformer models, and a graph that runs one forward and
backward pass of an ipulab model on the device, for the tests that compare the two."""
import numpy as np
import torch

from ipulab import nn, poplar, popnn, poputil
from ipulab.nn.build import build_backward, build_forward
from ipulab.poplar import program as prog


class Positional(torch.nn.Module):
    """nn.PositionalEmbedding's twin: x + weight[:S], the weight keyed "weight"."""

    def __init__(self, max_len, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(max_len, dim))

    def forward(self, x):
        return x + self.weight[:x.shape[1]]


class EncoderLayer(torch.nn.TransformerEncoderLayer):
    """torch.nn.TransformerEncoderLayer (batch_first) that applies its causal mask itself, so
    that it fits a torch.nn.Sequential with unchanged state_dict keys."""

    def __init__(self, *args, causal=False, **kw):
        super().__init__(*args, batch_first=True, **kw)
        self.causal = causal

    def forward(self, src):
        if not self.causal:
            return super().forward(src)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(src.shape[1])
        return super().forward(src, src_mask=mask, is_causal=True)


def gpt(V, S, d, h, f, layers=2, norm_first=True, activation="gelu", causal=True,
        dropout=0.0):
    """(ipulab model, torch twin) of the same architecture, untrained."""
    ours = nn.Sequential(nn.Embedding(V, d), nn.PositionalEmbedding(S, d), *[
        nn.TransformerEncoderLayer(d, h, f, dropout=dropout, activation=activation,
                                   norm_first=norm_first, causal=causal)
        for _ in range(layers)], nn.LayerNorm(d), nn.Linear(d, V))
    theirs = torch.nn.Sequential(torch.nn.Embedding(V, d), Positional(S, d), *[
        EncoderLayer(d, h, f, dropout=dropout, activation=activation, norm_first=norm_first,
                     causal=causal) for _ in range(layers)],
        torch.nn.LayerNorm(d), torch.nn.Linear(d, V))
    return ours, theirs


def torch_weights(model) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def torch_step(model, x, y):
    """(logits, mean token loss, {key: gradient}) of one forward and backward pass."""
    model.zero_grad()
    logits = model(torch.as_tensor(x, dtype=torch.long))
    V = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                             torch.as_tensor(y, dtype=torch.long).reshape(-1))
    loss.backward()
    return (logits.detach().numpy(), loss.item(),
            {k: p.grad.numpy().copy() for k, p in model.named_parameters()})


def device_step(model, weights, x, y, device, dtype=poplar.FLOAT):
    """The same on the device: ipulab's forward, calc_loss and backward in one graph, with
    the weights as variables (fp16: HALF copies of them). Returns (logits, loss, grads)."""
    g = poplar.Graph(device.target)
    seq = prog.Sequence()
    params, handles = {}, {}
    for key, shape in model.param_shapes().items():
        w = g.add_variable(dtype, list(shape), key)
        poputil.map_tensor_linearly(g, w)
        g.create_host_write(key, w)
        index, name = key.split(".", 1)
        params.setdefault(int(index), {})[name] = w
    tx = g.add_variable(poplar.INT, list(x.shape), "x")
    labels = g.add_variable(poplar.INT, list(y.shape), "y")
    for t in (tx, labels):
        poputil.map_tensor_linearly(g, t)
        g.create_host_write(t.name, t)
    logits, builds = build_forward(g, model, tx, params, seq, train=True)
    loss = popnn.calc_loss(g, logits, labels, seq)
    grads, _ = build_backward(g, builds, loss.grad, seq)
    for name, t in {"logits": logits, "loss": loss.loss, **grads}.items():
        handles[name] = t
        g.create_host_read(f"read/{name}", t)
    e = poplar.Engine(g, seq)
    e.load(device)
    for key, value in weights.items():
        e.write_tensor(key, np.asarray(value, np.float32).astype(dtype.host))
    e.write_tensor("x", np.asarray(x, np.int32))
    e.write_tensor("y", np.asarray(y, np.int32))
    e.run()
    out = {name: e.read_tensor(f"read/{name}").astype(np.float64) for name in handles}
    return out.pop("logits"), float(out.pop("loss")), out
