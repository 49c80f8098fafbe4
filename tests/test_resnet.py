"""nn.Bottleneck and nn.resnet50 against torchvision's structure, written here in plain torch
(torchvision does not install beside this torch): state_dict keys and shapes, and a small
ResNet of the same structure trained 5 SGD-with-momentum steps equal to torch, BatchNorm
running statistics included; the misuse errors."""
import numpy as np
import pytest
import torch
from torch import nn as tnn

import ipulab
from ipulab import nn
from ipulab.errors import DataError, GraphError


class RefBottleneck(tnn.Module):
    """torchvision.models.resnet.Bottleneck (v1.5), groups=1, base_width=64."""

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.conv2 = tnn.Conv2d(planes, planes, 3, stride, padding=1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.conv3 = tnn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = tnn.BatchNorm2d(planes * 4)
        self.relu = tnn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class RefResNet(tnn.Module):
    """torchvision.models.resnet.ResNet(Bottleneck, layers) with `width` for its 64."""

    def __init__(self, layers, num_classes=1000, width=64):
        super().__init__()
        self.inplanes = width
        self.conv1 = tnn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = tnn.BatchNorm2d(width)
        self.relu = tnn.ReLU(inplace=True)
        self.maxpool = tnn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], 2)
        self.layer3 = self._make_layer(width * 4, layers[2], 2)
        self.layer4 = self._make_layer(width * 8, layers[3], 2)
        self.avgpool = tnn.AdaptiveAvgPool2d((1, 1))
        self.fc = tnn.Linear(width * 8 * 4, num_classes)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = tnn.Sequential(tnn.Conv2d(self.inplanes, planes * 4, 1, stride,
                                                   bias=False), tnn.BatchNorm2d(planes * 4))
        out = [RefBottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        out += [RefBottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return tnn.Sequential(*out)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _shapes(torch_model):
    return {k: tuple(v.shape) for k, v in torch_model.state_dict().items()}


def test_resnet50_state_dict_keys_and_shapes_are_torchvisions():
    ours = nn.resnet50()
    want = _shapes(RefResNet((3, 4, 6, 3)))
    got = ours.external(ours.state_shapes())
    assert list(got) == list(want) and got == want
    assert len(want) == 320 and ours.num_parameters() == 25_557_032
    assert "layer1.0.downsample.1.running_var" in got and "layer1.1.downsample.0.weight" not in got
    assert nn.resnet50(num_classes=10).state_shapes()[f"{len(ours) - 1}.weight"] == (10, 2048)


def test_bottleneck_keys_shapes_and_output_like_torchvision():
    down = nn.Sequential(nn.Conv2d(16, 32, 1, stride=2, bias=False), nn.BatchNorm2d(32))
    block = nn.Bottleneck(16, 8, stride=2, downsample=down)
    ref = RefBottleneck(16, 8, 2, tnn.Sequential(tnn.Conv2d(16, 32, 1, 2, bias=False),
                                                  tnn.BatchNorm2d(32)))
    assert block.state_shapes() == _shapes(ref)
    assert list(block.state_shapes()) == list(_shapes(ref))
    assert block.output_shape((16, 9, 9)) == (32, 5, 5)
    assert nn.Bottleneck(32, 8).output_shape((32, 4, 4)) == (32, 4, 4)


@pytest.fixture(scope="module")
def dev():
    return ipulab.devices.ipu("bow", tiles_per_ipu=16)


def test_small_resnet_trains_equal_to_torch(dev):
    rng = np.random.default_rng(7)
    B, steps = 8, 5      # 8 values per channel even at 1x1: BatchNorm stays well conditioned
    x = rng.standard_normal((B * steps, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, B * steps).astype(np.int32)
    ours = nn.resnet((1, 2, 1, 1), num_classes=10, base_width=4)
    theirs = RefResNet((1, 2, 1, 1), num_classes=10, width=4)
    ours.reset_parameters(1)
    weights = ours.state_dict()
    for k, v in weights.items():           # BatchNorm's gamma and beta not just ones and zeros
        if k.endswith(("bn1.weight", "bn2.weight", "bn3.weight", "1.weight")) and v.ndim == 1:
            weights[k] = rng.uniform(0.5, 1.5, v.shape).astype(np.float32)
        elif k.endswith("bias") and "bn" in k:
            weights[k] = rng.uniform(-0.2, 0.2, v.shape).astype(np.float32)
    theirs.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    tr = nn.Trainer(ours, dev, batch_size=B, lr=0.002, momentum=0.9)
    tr.set_weights(theirs.state_dict())          # torch's tensors load as they are
    history = tr.fit(x, y, shuffle=False)
    opt = torch.optim.SGD(theirs.parameters(), lr=0.002, momentum=0.9)
    losses = []
    for s in range(steps):
        opt.zero_grad()
        loss = tnn.functional.cross_entropy(theirs(torch.tensor(x[s * B:(s + 1) * B])),
                                            torch.tensor(y[s * B:(s + 1) * B]).long())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(history["loss"], losses, rtol=1e-5)
    got = tr.get_weights()
    assert list(got) == list(theirs.state_dict())
    for key, want in theirs.state_dict().items():
        want = want.numpy()
        start = weights[key]          # within 1e-3 of how far the step moved it, or 1e-6
        tol = 1e-3 * np.abs(want - start).max() + 1e-6 * max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got[key], want, rtol=0, atol=tol, err_msg=key)


def test_resnet_misuse_names_the_layer(dev):
    small = nn.resnet((1, 1, 1, 1), 10, base_width=2)
    state = small.state_dict()
    del state["layer2.0.bn1.num_batches_tracked"]
    with pytest.raises(DataError, match=r"missing \['layer2.0.bn1.num_batches_tracked'\]"):
        small.load_state_dict(state)
    state = small.state_dict()
    state["bn1.running_var"] = np.ones(3, np.float32)
    with pytest.raises(DataError, match=r"'bn1.running_var' has shape \[3\].*\[2\]"):
        small.load_state_dict(state)
    with pytest.raises(GraphError, match=r"Bottleneck\(16, 8, stride=2\) changes the shape"):
        nn.Bottleneck(16, 8, stride=2)
    with pytest.raises(GraphError, match="downsample must be nn.Sequential"):
        nn.Bottleneck(16, 8, downsample=nn.Sequential(nn.ReLU()))
    with pytest.raises(GraphError, match=r"layer 4: Bottleneck\(32, 8\) takes samples of shape "
                                         r"\(channels=32"):
        nn.Sequential(nn.Conv2d(3, 16, 1), nn.ReLU(), nn.Conv2d(16, 16, 1), nn.ReLU(),
                      nn.Bottleneck(32, 8)).shapes((3, 4, 4))
    with pytest.raises(GraphError, match=r"layer 1: MaxPool2d\(kernel_size=2\).*does not fit a "
                                         r"1x1 input"):
        nn.Sequential(nn.Conv2d(3, 4, 1), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)).shapes(
            (3, 1, 1))
    one = nn.resnet((1, 1, 1, 1), 10, base_width=2)      # 1x1 images, one per replica
    with pytest.raises(GraphError, match=r"layer 1 \(BatchNorm2d\(2.*more than 1 value"):
        nn.Trainer(one, dev, batch_size=1).fit(np.zeros((2, 3, 1, 1), np.float32),
                                               np.zeros(2, np.int32))
