"""torchvision's ResNet with Bottleneck blocks (v1.5: the stride in the 3x3 convolution), with
torchvision's state_dict keys and shapes:

    model = nn.resnet50(num_classes=1000)   # conv1, bn1, layer1..layer4 (3/4/6/3 blocks), fc
    model.state_dict()["layer1.0.downsample.1.running_var"]
    nn.resnet(layers=(1, 1, 1, 1), num_classes=10, base_width=8)   # the same shape, small

A Bottleneck is one layer of the Sequential built from parts (LayerBuild.part, as a
TransformerEncoderLayer): conv1 1x1, bn1, relu, conv2 3x3 (stride), bn2, relu, conv3 1x1 (4x
the planes), bn3, plus the identity or downsample (1x1 conv with the stride, BatchNorm2d),
then relu. The residual add is a popops map forward; backward the gradient fans in: the
main path's and the shortcut's input gradients are added. Convolutions have no bias.
Weights start as torch's layer defaults (not torchvision's kaiming normal).
"""
from __future__ import annotations

from .. import popops
from ..errors import GraphError
from ..popops.expr import _1, _2
from .batchnorm import AdaptiveAvgPool2d, BatchNorm2d
from .layers import Conv2d, Flatten, Layer, Linear, MaxPool2d, ReLU, _positive
from .model import Sequential
from .transformer import _Part


def _part(scope: str, layer: Layer) -> _Part:
    """A part whose keys cover its buffers too ("bn1.running_mean", ...)."""
    return _Part(scope, layer, keys={n: f"{scope}.{n}" for n in layer.state_shapes()})


def _downsample(downsample, inplanes: int, out: int, stride: int):
    """downsample's two parts, checked: nn.Sequential(Conv2d 1x1, BatchNorm2d) or None."""
    if downsample is None:
        if stride != 1 or inplanes != out:
            raise GraphError(f"Bottleneck({inplanes}, {out // 4}, stride={stride}) changes the "
                             "shape: it needs downsample=nn.Sequential(nn.Conv2d(inplanes, "
                             "planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes "
                             "* 4))")
        return ()
    layers = list(downsample) if isinstance(downsample, Sequential) else None
    if not layers or len(layers) != 2 or not isinstance(layers[0], Conv2d) or \
            not isinstance(layers[1], BatchNorm2d):
        raise GraphError(f"Bottleneck: downsample must be nn.Sequential(nn.Conv2d(...), "
                         f"nn.BatchNorm2d(...)) or None, not {downsample!r}")
    return _part("downsample.0", layers[0]), _part("downsample.1", layers[1])


class Bottleneck(Layer):
    """torchvision.models.resnet.Bottleneck(inplanes, planes, stride=1, downsample=None):
    (inplanes, h, w) -> (planes * 4, h / stride, w / stride)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None):
        self.inplanes = _positive(inplanes, "inplanes", "Bottleneck")
        self.planes = p = _positive(planes, "planes", "Bottleneck")
        self.stride = _positive(stride, "stride", "Bottleneck")
        self.conv1 = _part("conv1", Conv2d(inplanes, p, 1, bias=False))
        self.bn1 = _part("bn1", BatchNorm2d(p))
        self.conv2 = _part("conv2", Conv2d(p, p, 3, stride=stride, padding=1, bias=False))
        self.bn2 = _part("bn2", BatchNorm2d(p))
        self.conv3 = _part("conv3", Conv2d(p, p * 4, 1, bias=False))
        self.bn3 = _part("bn3", BatchNorm2d(p * 4))
        self.relu1, self.relu2, self.relu3 = (_Part(f"relu{k}", ReLU()) for k in (1, 2, 3))
        self.downsample = _downsample(downsample, self.inplanes, p * 4, self.stride)
        self.param_names = tuple(part.keys[n] for part in self._parts
                                 for n in part.layer.param_names)
        self.buffer_names = tuple(part.keys[n] for part in self._parts
                                  for n in part.layer.buffer_names)

    @property
    def _parts(self):
        """The parts with state, in torch's state_dict order."""
        return (self.conv1, self.bn1, self.conv2, self.bn2, self.conv3, self.bn3,
                *self.downsample)

    def _shapes(self, what: str) -> dict:
        return {part.keys[n]: tuple(s) for part in self._parts
                for n, s in getattr(part.layer, what)().items()}

    def param_shapes(self) -> dict:
        return self._shapes("param_shapes")

    def buffer_shapes(self) -> dict:
        return self._shapes("buffer_shapes")

    def state_shapes(self) -> dict:
        return self._shapes("state_shapes")

    def init_params(self, rng) -> dict:
        return {part.keys[n]: v for part in self._parts
                for n, v in part.layer.init_params(rng).items()}

    def init_buffers(self) -> dict:
        return {part.keys[n]: v for part in self._parts
                for n, v in part.layer.init_buffers().items()}

    def output_shape(self, shape):
        if len(shape) != 3 or shape[0] != self.inplanes:
            raise GraphError(f"{self!r} takes samples of shape (channels={self.inplanes}, "
                             f"height, width), not {tuple(shape)}")
        out = shape
        for part in (self.conv1, self.conv2, self.conv3):
            out = part.layer.output_shape(out)
        if self.downsample:
            short = self.downsample[1].layer.output_shape(
                self.downsample[0].layer.output_shape(shape))
            if short != out:
                raise GraphError(f"{self!r}: its downsample gives {short} but the block gives "
                                 f"{out}")
        return out

    def _add(self, b, x, y, what: str):
        return popops.map(b.graph, _1 + _2, [x, y], b.seq, b.name(what))

    def forward(self, b, x):
        out = self.relu1.forward(b, self.bn1.forward(b, self.conv1.forward(b, x)))
        out = self.relu2.forward(b, self.bn2.forward(b, self.conv2.forward(b, out)))
        out = self.bn3.forward(b, self.conv3.forward(b, out))
        identity = x
        if self.downsample:
            conv, bn = self.downsample
            identity = bn.forward(b, conv.forward(b, x))
        return self.relu3.forward(b, self._add(b, out, identity, "residual"))

    def backward(self, b, dy):
        dy = self.relu3.backward(b, dy)
        d = self.conv3.backward(b, self.bn3.backward(b, dy))
        d = self.conv2.backward(b, self.bn2.backward(b, self.relu2.backward(b, d)))
        d = self.conv1.backward(b, self.bn1.backward(b, self.relu1.backward(b, d)), b.need_dx)
        short = dy
        if self.downsample:
            conv, bn = self.downsample
            short = conv.backward(b, bn.backward(b, dy), b.need_dx)
        return self._add(b, d, short, "residual_grad") if b.need_dx else None

    def __repr__(self) -> str:
        extra = "" if self.stride == 1 else f", stride={self.stride}"
        extra += ", downsample" if self.downsample else ""
        return f"Bottleneck({self.inplanes}, {self.planes}{extra})"


def resnet(layers=(3, 4, 6, 3), num_classes: int = 1000, base_width: int = 64,
           in_channels: int = 3) -> Sequential:
    """torchvision's ResNet(Bottleneck, layers) with base_width in place of its 64 (planes
    base_width, 2x, 4x, 8x per stage): keys conv1, bn1, layer<k>.<i>.*, fc."""
    w = _positive(base_width, "base_width", "resnet")
    if not isinstance(layers, (tuple, list)) or len(layers) != 4:
        raise GraphError(f"resnet: layers must be 4 block counts, not {layers!r}")
    mods = [Conv2d(in_channels, w, 7, stride=2, padding=3, bias=False), BatchNorm2d(w), ReLU(),
            MaxPool2d(3, stride=2, padding=1)]
    names = ["conv1", "bn1", "relu", "maxpool"]
    inplanes = w
    for stage, count in enumerate(layers):
        planes, stride = w * 2 ** stage, 1 if stage == 0 else 2
        for i in range(_positive(count, f"layers[{stage}]", "resnet")):
            s = stride if i == 0 else 1
            down = None if s == 1 and inplanes == planes * 4 else Sequential(
                Conv2d(inplanes, planes * 4, 1, stride=s, bias=False), BatchNorm2d(planes * 4))
            mods.append(Bottleneck(inplanes, planes, s, down))
            names.append(f"layer{stage + 1}.{i}")
            inplanes = planes * 4
    mods += [AdaptiveAvgPool2d(1), Flatten(), Linear(inplanes, num_classes)]
    model = Sequential(*mods)
    model.prefixes = names + ["avgpool", "flatten", "fc"]
    return model


def resnet50(num_classes: int = 1000) -> Sequential:
    """torchvision.models.resnet50(num_classes=...): its state_dict keys and shapes exactly."""
    return resnet((3, 4, 6, 3), num_classes)


__all__ = ["Bottleneck", "resnet", "resnet50"]
