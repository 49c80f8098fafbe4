"""ipulab.nn: PyTorch-like layers and a Trainer that builds ONE graph for a training step.

    from ipulab import nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    trainer = nn.Trainer(model, ipulab.devices.ipu("bow"), batch_size=16, lr=0.05)
    trainer.fit(x_train, y_train, epochs=5)
    trainer.evaluate(x_test, y_test)      # Evaluation(accuracy, loss)
    nn.Trainer(model, config=nn.TrainConfig.default_run())   # the course's run, on a Bow-2000

    gpt = nn.Sequential(nn.Embedding(64, 64), nn.PositionalEmbedding(32, 64),
                        nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, activation="gelu",
                                                   norm_first=True, causal=True),
                        nn.LayerNorm(64), nn.Linear(64, 64))       # or nn.small_gpt()
    nn.Trainer(gpt, device).fit(token_ids, targets)       # both int [N, S]: loss per token

Every number (activations, loss, gradients, updates) is computed by codelets on simulated
tiles through poplin, popops, popnn and poprand; weights are numpy arrays in PyTorch layout.
"""
from .batchnorm import AdaptiveAvgPool2d, BatchNorm2d
from .build import all_reduce_gradients
from .config import OPTIMIZERS, PRECISIONS, TrainConfig
from .layers import AvgPool2d, Conv2d, Dropout, Flatten, Layer, Linear, MaxPool2d, ReLU
from .model import Sequential, default_cnn, small_gpt
from .resnet import Bottleneck, resnet, resnet50
from .optim import LAMB, SGD, Adam, AdamW
from .trainer import Evaluation, Trainer
from .transformer import (GELU, Embedding, LayerNorm, MultiheadAttention, PositionalEmbedding,
                          TransformerEncoderLayer)

__all__ = ["AdaptiveAvgPool2d", "BatchNorm2d", "Bottleneck", "resnet", "resnet50", "AvgPool2d", "Conv2d", "Dropout", "Flatten", "Layer", "Linear", "MaxPool2d", "ReLU",
           "Embedding", "PositionalEmbedding", "LayerNorm", "GELU", "MultiheadAttention",
           "TransformerEncoderLayer", "Sequential", "default_cnn", "small_gpt", "SGD", "Adam",
           "AdamW", "LAMB", "Trainer", "TrainConfig", "PRECISIONS", "OPTIMIZERS", "Evaluation",
           "all_reduce_gradients"]
