"""A plain numpy reference of ipulab.nn: the same layers, forward, backward and SGD, written
independently of the library, to check the simulated training step against (in float64) and to
time it against (benchmarks/training.py, in float32: the same math at the simulator's precision)."""
import numpy as np

from ipulab import nn


def _im2col(x, kh, kw, stride, padding):
    """(n, ho, wo, c*kh*kw) patches of x (NCHW), zero padded, in x's dtype."""
    (sh, sw), (ph, pw) = stride, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, c, h, w = xp.shape
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    cols = np.empty((n, ho, wo, c, kh, kw), x.dtype)
    for dy in range(kh):
        for dx in range(kw):
            cols[:, :, :, :, dy, dx] = xp[:, :, dy:dy + sh * (ho - 1) + 1:sh,
                                          dx:dx + sw * (wo - 1) + 1:sw].transpose(0, 2, 3, 1)
    return cols.reshape(n, ho, wo, c * kh * kw)


def _col2im(dcols, x_shape, kh, kw, stride, padding):
    (sh, sw), (ph, pw) = stride, padding
    n, c, h, w = x_shape
    dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dcols.dtype)
    _, ho, wo, _ = dcols.shape
    d = dcols.reshape(n, ho, wo, c, kh, kw)
    for dy in range(kh):
        for dx in range(kw):
            dxp[:, :, dy:dy + sh * (ho - 1) + 1:sh, dx:dx + sw * (wo - 1) + 1:sw] += \
                d[:, :, :, :, dy, dx].transpose(0, 3, 1, 2)
    return dxp[:, :, ph:ph + h, pw:pw + w]


def _windows(x, k, s, p, fill):
    """(n, c, ho, wo, kh*kw) pooling windows, padded with fill."""
    (kh, kw), (sh, sw), (ph, pw) = k, s, p
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    n, c, h, w = xp.shape
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    win = np.empty((n, c, ho, wo, kh * kw), x.dtype)
    for dy in range(kh):
        for dx in range(kw):
            win[..., dy * kw + dx] = xp[:, :, dy:dy + sh * (ho - 1) + 1:sh,
                                        dx:dx + sw * (wo - 1) + 1:sw]
    return win


def _unwindow(dwin, x_shape, k, s, p):
    (kh, kw), (sh, sw), (ph, pw) = k, s, p
    n, c, h, w = x_shape
    dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dwin.dtype)
    _, _, ho, wo, _ = dwin.shape
    for dy in range(kh):
        for dx in range(kw):
            dxp[:, :, dy:dy + sh * (ho - 1) + 1:sh, dx:dx + sw * (wo - 1) + 1:sw] += \
                dwin[..., dy * kw + dx]
    return dxp[:, :, ph:ph + h, pw:pw + w]


class Reference:
    """Forward, backward and SGD (with momentum) of an nn.Sequential in numpy, computed in
    dtype (float64 by default)."""

    def __init__(self, model, weights, lr, momentum=0.0, dtype=np.float64):
        self.model, self.lr, self.momentum, self.dtype = model, lr, momentum, dtype
        self.w = {k: np.asarray(v, dtype).copy() for k, v in weights.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.w.items()}

    def forward(self, x, train=True):
        x = np.asarray(x, self.dtype)
        caches = []
        for i, layer in enumerate(self.model):
            cache = {"x": x}
            if isinstance(layer, nn.Conv2d):
                kh, kw = layer.kernel_size
                cols = _im2col(x, kh, kw, layer.stride, layer.padding)
                wmat = self.w[f"{i}.weight"].reshape(layer.out_channels, -1)
                y = cols @ wmat.T                                    # (n, ho, wo, o)
                if layer.bias:
                    y = y + self.w[f"{i}.bias"]
                cache["cols"] = cols
                y = y.transpose(0, 3, 1, 2)
            elif isinstance(layer, nn.Linear):
                y = x @ self.w[f"{i}.weight"].T
                if layer.bias:
                    y = y + self.w[f"{i}.bias"]
            elif isinstance(layer, nn.ReLU):
                y = np.maximum(x, 0)
            elif isinstance(layer, nn.MaxPool2d):
                win = _windows(x, layer.kernel_size, layer.stride, layer.padding, -np.inf)
                cache["arg"] = win.argmax(-1)                   # first maximum
                cache["win_shape"] = win.shape
                y = win.max(-1)
            elif isinstance(layer, nn.AvgPool2d):
                win = _windows(x, layer.kernel_size, layer.stride, layer.padding, 0.0)
                cache["win_shape"] = win.shape
                y = win.mean(-1)
            elif isinstance(layer, nn.Flatten):
                y = x.reshape(len(x), -1)
            elif isinstance(layer, nn.Dropout):
                assert not train or layer.p == 0, "the reference has no dropout masks"
                y = x
            else:
                raise TypeError(layer)
            cache["y"] = y
            caches.append(cache)
            x = y
        return x, caches

    @staticmethod
    def loss(logits, labels):
        """(mean softmax cross-entropy, its gradient w.r.t. logits, number correct)."""
        z = logits - logits.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        n = len(labels)
        loss = -np.log(p[np.arange(n), labels]).mean()
        grad = p.copy()
        grad[np.arange(n), labels] -= 1
        return loss, grad / n, int((logits.argmax(1) == labels).sum())

    def backward(self, caches, dy):
        grads = {}
        for i in range(len(self.model) - 1, -1, -1):
            layer, c = self.model[i], caches[i]
            x = c["x"]
            if isinstance(layer, nn.Conv2d):
                kh, kw = layer.kernel_size
                d = dy.transpose(0, 2, 3, 1)                              # (n, ho, wo, o)
                grads[f"{i}.weight"] = np.einsum("nhwo,nhwk->ok", d, c["cols"]).reshape(
                    self.w[f"{i}.weight"].shape)
                if layer.bias:
                    grads[f"{i}.bias"] = d.sum((0, 1, 2))
                wmat = self.w[f"{i}.weight"].reshape(layer.out_channels, -1)
                dy = _col2im(d @ wmat, x.shape, kh, kw, layer.stride, layer.padding)
            elif isinstance(layer, nn.Linear):
                grads[f"{i}.weight"] = dy.T @ x
                if layer.bias:
                    grads[f"{i}.bias"] = dy.sum(0)
                dy = dy @ self.w[f"{i}.weight"]
            elif isinstance(layer, nn.ReLU):
                dy = np.where(c["y"] > 0, dy, 0.0)
            elif isinstance(layer, nn.MaxPool2d):
                dwin = np.zeros(c["win_shape"], dy.dtype)
                np.put_along_axis(dwin, c["arg"][..., None], dy[..., None], -1)
                dy = _unwindow(dwin, x.shape, layer.kernel_size, layer.stride, layer.padding)
            elif isinstance(layer, nn.AvgPool2d):
                k = c["win_shape"][-1]
                dwin = np.repeat(dy[..., None] / k, k, -1)
                dy = _unwindow(dwin, x.shape, layer.kernel_size, layer.stride, layer.padding)
            elif isinstance(layer, nn.Flatten):
                dy = dy.reshape(x.shape)
        return grads

    def step(self, x, labels):
        """One SGD step on a batch; returns (loss, correct) before the update."""
        logits, caches = self.forward(x)
        loss, dlogits, correct = self.loss(logits, labels)
        grads = self.backward(caches, dlogits)
        for k, g in grads.items():
            if self.momentum:
                self.v[k] = self.momentum * self.v[k] + g
                g = self.v[k]
            self.w[k] -= self.lr * g
        return loss, correct
