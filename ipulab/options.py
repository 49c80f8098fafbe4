"""The names of the options a simulated run (nn.TrainConfig) and a plan (plan.Mapping) share,
defined once, below both: the number formats, the optimizers and where an optimizer's state
lives. Plain data: the `ipulab` command reads them without loading the simulator."""

PRECISIONS = ("fp32", "fp16")                # float32 throughout, or HALF with fp32 weights
OPTIMIZER_STATES = ("on-chip", "off-chip")   # In-Processor Memory, or Streaming Memory
OPTIMIZERS = ("sgd", "adam", "adamw", "lamb")   # torch.optim's SGD, Adam, AdamW; LAMB (You et al.)
