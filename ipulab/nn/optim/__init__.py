"""The Trainer's optimizers, built into the training step and run by codelets on the tiles:
SGD (with momentum), Adam and AdamW as torch.optim's, and LAMB as You et al. and Graphcore's
BERT (one class per kind, on a shared base: base.py).

    nn.Trainer(model, device, optimizer="adamw", lr=1e-3, weight_decay=0.01)
    nn.optim.create(config)          # the optimizer a TrainConfig names
    nn.optim.KINDS["lamb"].state_per_parameter      # 2 float32 values per weight

Their state (SGD's velocity, the moments, the step count) lives on chip, off chip in
Streaming Memory (TrainConfig(optimizer_state="off-chip")), or sharded over the replicas
(rts=True), and streams with its weights when phased.
"""
from .adam import Adam, AdamW
from .base import Optimizer
from .lamb import LAMB
from .sgd import SGD

KINDS = {cls.kind: cls for cls in (SGD, Adam, AdamW, LAMB)}


def create(config) -> Optimizer:
    """The optimizer a TrainConfig asks for, with its hyperparameters (None: the kind's
    default, as torch.optim's)."""
    if config.optimizer == "sgd":
        return SGD(config.lr, config.momentum, config.weight_decay or 0.0)
    return KINDS[config.optimizer](config.lr, config.betas, config.eps, config.weight_decay)


__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LAMB", "KINDS", "create"]
