"""Helpers for the popnn and poprand tests: a graph with host feeds and fetches, tensor
placements, and float64 numpy references (pooling, softmax cross-entropy, numerical gradients)."""
import numpy as np

from ipulab import poplar, poputil
from ipulab.poplar import program as prog
from ipulab.poplar.types import as_type

# how a test input is laid out over the tiles
LAYOUTS = ("poplar", "spread", "tile", "chunks")


def lay_out(g, t, how, seed=0):
    """Map t: Poplar's linear default, element by element over every tile, all on one tile,
    or in random chunks on random tiles."""
    n, tiles = t.num_elements(), g.target.num_tiles
    if how == "poplar":
        poputil.map_tensor_linearly(g, t)
    elif how == "spread":
        poputil.map_tensor_linearly(g, t, 1, 1)
    elif how == "tile":
        g.set_tile_mapping(t, (seed * 5 + 3) % tiles)
    else:
        rng = np.random.default_rng(seed)
        cuts = np.unique(np.r_[0, np.sort(rng.integers(0, n + 1, 4)), n])
        mapping = [[] for _ in range(tiles)]
        for b, e in zip(cuts[:-1], cuts[1:]):
            mapping[int(rng.integers(tiles))].append((int(b), int(e)))
        g.set_tile_mapping(t, mapping)


class Lab:
    """One graph on a device: feed host arrays in, fetch tensors out, run once."""

    def __init__(self, dev):
        self.dev = dev
        self.g = poplar.Graph(dev.target)
        self.seq = prog.Sequence()
        self.feeds, self.fetches = {}, {}

    def feed(self, array, how="poplar", seed=0, dtype=None):
        array = np.asarray(array)
        dtype = as_type(dtype or array.dtype)
        name = f"feed{len(self.feeds)}"
        t = self.g.add_variable(dtype, list(array.shape), name)
        lay_out(self.g, t, how, seed)
        self.g.create_host_write(name, t)
        self.feeds[name] = array.astype(dtype.host)
        return t

    def fetch(self, **tensors):
        for name, t in tensors.items():
            self.g.create_host_read(name, t)
            self.fetches[name] = t

    def run(self, options=None):
        self.engine = poplar.Engine(self.g, self.seq, options or {})
        self.engine.load(self.dev)
        for name, array in self.feeds.items():
            self.engine.write_tensor(name, array)
        self.engine.run()
        return {name: self.engine.read_tensor(name) for name in self.fetches}


# --- float64 references -------------------------------------------------------------------------
def numerical_gradient(f, x, eps=1e-6):
    """d f / d x by central differences (f: float64 array -> float)."""
    x = np.asarray(x, np.float64)
    grad = np.zeros_like(x)
    flat = grad.reshape(-1)
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = eps
        step = step.reshape(x.shape)
        flat[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def windows(shape, kernel, stride, padding):
    """For pooling: (ho, wo, [(oy, ox, [(iy, ix) valid taps in window order], taps)])."""
    _, _, h, w = shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = []
    for oy in range(ho):
        for ox in range(wo):
            taps = [(oy * sh - ph + dy, ox * sw - pw + dx) for dy in range(kh) for dx in range(kw)]
            out.append((oy, ox, [(iy, ix) for iy, ix in taps if 0 <= iy < h and 0 <= ix < w]))
    return ho, wo, out


def pool_reference(x, kind, kernel, stride, padding, include_pad=True):
    """(pooled, argmax positions) in float64; ties go to the first tap in window order."""
    x = np.asarray(x, np.float64)
    n, c = x.shape[:2]
    ho, wo, wins = windows(x.shape, kernel, stride, padding)
    y = np.zeros((n, c, ho, wo))
    first = {}
    for oy, ox, taps in wins:
        vals = np.stack([x[:, :, iy, ix] for iy, ix in taps], -1)
        if kind == "max":
            y[:, :, oy, ox] = vals.max(-1)
            first[oy, ox] = (taps, vals.argmax(-1))
        else:
            div = kernel[0] * kernel[1] if include_pad else len(taps)
            y[:, :, oy, ox] = vals.sum(-1) / div
    return y, first


def pool_grad_reference(x, dy, kind, kernel, stride, padding, include_pad=True):
    """dL/dx of pooling for upstream dy, in float64 (max: to the first max of each window)."""
    x = np.asarray(x, np.float64)
    _, first = pool_reference(x, kind, kernel, stride, padding, include_pad)
    n, c = x.shape[:2]
    dx = np.zeros_like(x)
    _, _, wins = windows(x.shape, kernel, stride, padding)
    for oy, ox, taps in wins:
        if kind == "max":
            _, arg = first[oy, ox]
            for b in range(n):
                for ch in range(c):
                    iy, ix = taps[arg[b, ch]]
                    dx[b, ch, iy, ix] += dy[b, ch, oy, ox]
        else:
            div = kernel[0] * kernel[1] if include_pad else len(taps)
            for iy, ix in taps:
                dx[:, :, iy, ix] += dy[:, :, oy, ox] / div
    return dx


def cross_entropy_reference(logits, labels):
    """Per-sample softmax cross-entropy in float64, stable (log-sum-exp)."""
    z = np.asarray(logits, np.float64)
    m = z.max(1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(1))
    return lse - z[np.arange(z.shape[0]), labels]
