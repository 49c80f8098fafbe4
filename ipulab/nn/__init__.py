"""ipulab.nn: PyTorch-like layers and a Trainer that builds ONE graph for a training step.

    from ipulab import nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    trainer = nn.Trainer(model, ipulab.devices.ipu("bow"), batch_size=16, lr=0.05)
    trainer.fit(x_train, y_train, epochs=5)
    trainer.evaluate(x_test, y_test)      # Evaluation(accuracy, loss)
    nn.Trainer(model, config=nn.TrainConfig.default_run())   # the course's run, on a Bow-2000

Every number (activations, loss, gradients, updates) is computed by codelets on simulated
tiles through poplin, popops, popnn and poprand; weights are numpy arrays in PyTorch layout.
"""
from .build import all_reduce_gradients
from .config import OPTIMIZERS, PRECISIONS, TrainConfig
from .layers import AvgPool2d, Conv2d, Dropout, Flatten, Layer, Linear, MaxPool2d, ReLU
from .model import Sequential, default_cnn
from .optim import LAMB, SGD, Adam, AdamW
from .trainer import Evaluation, Trainer

__all__ = ["AvgPool2d", "Conv2d", "Dropout", "Flatten", "Layer", "Linear", "MaxPool2d", "ReLU",
           "Sequential", "default_cnn", "SGD", "Adam", "AdamW", "LAMB", "Trainer", "TrainConfig",
           "PRECISIONS", "OPTIMIZERS", "Evaluation", "all_reduce_gradients"]
