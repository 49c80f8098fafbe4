"""The loss the Trainer adds after a model's last layer (popnn.calc_loss), as cost classes:
CrossEntropyLoss of a score per class (the CNN's, counted by tiles.py), TokenLoss of a score per
position (every token a sample, priced element by element: ops.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .layers import Block, later

reductions, types = later(".reductions"), later("..poplar.types")


@dataclass(frozen=True)
class CrossEntropyLoss(Block):
    """The loss the Trainer puts after the last layer (popnn.calc_loss): softmax
    cross-entropy of `classes` logits a sample, its gradient, the sums of the loss and of the
    correct answers, their mean."""

    classes: int = 0
    simulated: ClassVar[bool] = True

    @classmethod
    def of(cls, classes: int) -> "CrossEntropyLoss":
        return cls("loss", 0, 0, 0.0, classes, 2 * classes, 0, classes)

    def forward(self, ipu, run, logits, key=None):
        """Its ops on a micro-batch's logits (laid out as the last layer left them); the
        gradient of the logits is held as key (in training)."""
        ipu.softmax_cross_entropy("eval/loss" if key is None else "loss", run.n, self.classes,
                                  logits)
        if key is None:
            ipu.arg_max(run.n)
        else:
            ipu.hold(key, logits.elements * ipu.mc.E)


@dataclass(frozen=True)
class TokenLoss(CrossEntropyLoss):
    """popnn.calc_loss of a score per position: each of the micro-batch's n·S tokens a
    sample (ops.token_loss), the labels [B, S] INT mapped linearly where the last layer
    lives; the evaluation's predictions popnn.arg_max of every token."""

    positions: int = 1

    @classmethod
    def of(cls, classes: int, positions: int = 1) -> "TokenLoss":
        return cls("loss", 0, 0, 0.0, positions * classes, 2 * positions * classes, 0,
                   classes, positions=positions)

    def forward(self, ipu, run, logits, key=None, loss: bool = True):
        """The loss of a micro-batch's logits (its gradient held as key, and returned); an
        evaluation (key None): the predictions too, only they when it shares the training
        step's loss (loss=False)."""
        mc = ipu.mc
        n, S, V = run.n, self.positions, self.classes
        labels = mc.once("labels", lambda: mc.addr.linear((run.batch, S), types.INT,
                                                            mc.graph.num_tiles))
        mb = run.micro_batch
        rows = labels[mb * n:(mb + 1) * n] if run.pipelined else labels
        flat = logits.reshape((n * S, V))
        if not loss:
            reductions.arg_max(ipu, "predictions", flat)
            return None
        grad = reductions.token_loss(ipu, "eval/loss" if key is None else "loss", flat, rows)
        if key is None:
            reductions.arg_max(ipu, "predictions", flat)
            return None
        ipu.hold(key, grad)
        return grad.reshape(logits.shape)
