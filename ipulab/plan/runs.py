"""A simulated run as the planner sees it, and the one description of a run.

    m = plan.mapping_from_config(trainer.config)      # the Mapping of that very step
    plan.describe_run(m)          # 't 1 · p 1 · r 4 · batch 16 · fp16 · sgd · state on-chip'
    plan.describe_run(trainer.config, "words")        # '4 replicas x batch 16, fp16'
    plan.describe_run(trainer.config, "marker")       # '4×16 fp16'

Every table, status line and plot marker that names a run (the planner's tables and widget,
the cross-check, the training dashboard) calls describe_run, so a mapping and a TrainConfig
are described in the same words: t, p (and its layers), r, the batch (micro_batches of
micro_batch_size samples), precision, optimizer, recompute, rts, phases, where the optimizer
state lives.
"""
from __future__ import annotations

from ..errors import PlanError
from .mapping import EVERY_LAYER, Mapping, make_mapping


def mapping_from_config(config) -> Mapping:
    """The Mapping of a resolved nn.TrainConfig (trainer.config): its t, stages (its
    boundaries, or a number of stages nn balances), replicas, micro-batches, precision,
    optimizer (SGD's momentum), recompute, RTS, optimizer state and phases. Not strict: a
    simulated run may leave IPUs idle and need not use powers of two."""
    if not all(hasattr(config, k) for k in ("replicas", "batch_size", "tensor_parallel")):
        raise PlanError(f"mapping_from_config takes an nn.TrainConfig (trainer.config), not "
                        f"{type(config).__name__}")
    if config.replicas is None:
        raise PlanError("mapping_from_config: replicas=None is decided by a target; give a "
                        "resolved config (trainer.config, or config.resolve(target))")
    starts = None if config.pipeline is None or isinstance(config.pipeline, int) else \
        tuple(config.pipeline)
    phases = config.phases if config.phases > 1 else \
        EVERY_LAYER if config.phased else 1
    return make_mapping(tensor_parallel=config.tensor_parallel_grid,
                        pipeline=config.num_stages, replicas=config.replicas, stage_starts=starts,
                        micro_batch_size=config.micro_batch_size,
                        micro_batches=config.micro_batches,
                        precision=config.precision, optimizer=config.optimizer,
                        momentum=config.momentum > 0, recompute=config.recompute,
                        rts=config.rts, optimizer_state=config.optimizer_state, phases=phases,
                        strict=False)


def _as_mapping(run) -> Mapping:
    return run if isinstance(run, Mapping) else mapping_from_config(run)


def _optimizer(m: Mapping) -> str:
    return "sgd+momentum" if m.optimizer == "sgd" and m.momentum else m.optimizer


def _scale_out(m: Mapping) -> list[str]:
    """The choices beyond data parallelism, in words."""
    t1, t2 = m.tensor_parallel
    parts = [f"t {t1}" + (f"x{t2}" if t2 > 1 else "")] if m.t > 1 else []
    if m.pipeline > 1:
        parts.append(f"{m.pipeline} stages, {m.micro_batches} micro-batches")
    parts += ["recompute"] * m.recompute + ["rts"] * m.rts
    parts += [f"state {m.optimizer_state}"] * (m.optimizer_state == "off-chip" and not m.phased)
    parts += [f"phases {m.phases or 'per layer'}"] * m.phased
    return parts


def describe_run(run, style: str = "plan") -> str:
    """A run (a Mapping or an nn.TrainConfig) described in one of four lengths:
    "plan" — every choice: 't 8x8 · p 1 · r 4 · 32 micro-batches of 1 · fp16 · adam ·
    recompute · rts · phases 96 · state off-chip', layers per stage as [3,7,7,7] or, before
    they are resolved, where nn cuts (cut at 3,6) (the cross-check, the planner widget);
    "table" — the same without the batch, precision and optimizer, which `ipulab plan`'s
    table shows in a column and its heading, and the state only where it is off-chip by
    choice (phases always stream it);
    "words" — replicas and batch, then what differs from plain data parallelism:
    '4 replicas x batch 16, fp32, t 2, recompute' (the training dashboard);
    "marker" — '4×16 fp32' and the same differences, short (a plot's marker)."""
    m = _as_mapping(run)
    size, count = m.micro_batch_size, m.micro_batches
    batch = size * count if size and count else size
    if style in ("plan", "table"):
        t1, t2 = m.tensor_parallel
        stages = (f" [{','.join(map(str, m.layers_per_stage))}]" if m.layers_per_stage else
                  f" (cut at {','.join(map(str, m.stage_starts))})" if m.stage_starts else "")
        parts = [f"t {t1}" + (f"x{t2}" if t2 > 1 else ""),
                 f"p {m.pipeline}" + (stages if m.pipeline > 1 else ""), f"r {m.replicas}"]
        if style == "plan":
            parts += [_batch(size, count)] * bool(size) + [m.precision, _optimizer(m)]
        parts += ["recompute"] * m.recompute + ["rts"] * m.rts
        parts += [f"phases {m.phases or 'per layer'}"] * m.phased
        state = "off-chip" if m.phased else m.optimizer_state     # it streams with the phases
        if style == "table":       # off-chip where it is a choice; phases always stream it
            return " · ".join(parts + ["state off-chip"] * (state == "off-chip" and not m.phased))
        return " · ".join(parts + [f"state {state}"])
    replicas = f"{m.replicas} replica" + "s" * (m.replicas != 1)
    if style == "words":
        return ", ".join([f"{replicas} x batch {batch}", m.precision, *_scale_out(m)])
    if style == "marker":
        return " ".join([f"{m.replicas}×{batch} {m.precision}", *_scale_out(m)])
    raise PlanError(f"describe_run: style is plan, table, words or marker, not {style!r}")


def _batch(size: int, count: int | None) -> str:
    """A replica's batch: 'batch 16', or '32 micro-batches of 1'."""
    return f"batch {size}" if count in (None, 1) else f"{count} micro-batches of {size}"


def crosscheck_row(trainer, name: str = "model") -> dict:
    """What the planner says of a trainer's step against what its profile says (the trainer
    has run a step): the bytes of the fullest IPU (the largest per-IPU sum of memory_total)
    and the cycles, with the errors. The planner is given what the simulator was: the model,
    the device, trainer.config's mapping and the global batch."""
    from .estimate import estimate
    from .spec import spec_from_model
    profile = trainer.profile()
    per_ipu = profile.memory_total.reshape(profile.num_ipus, -1).sum(axis=1)
    e = estimate(spec_from_model(trainer.model, trainer.input_shape, name), trainer.device,
                 mapping_from_config(trainer.config), trainer.global_batch_size)
    cycles = round(e.step_seconds * profile.clock_hz)
    sim_cycles, sim_bytes = int(profile.total_cycles), int(per_ipu.max())
    return {"model": name, "mapping": describe_run(trainer.config),
            "plan_cycles": cycles, "sim_cycles": sim_cycles,
            "cycles_error": cycles / sim_cycles - 1,
            "plan_bytes": e.peak_bytes_per_ipu, "sim_bytes": sim_bytes,
            "bytes_error": e.peak_bytes_per_ipu / sim_bytes - 1,
            "plan_seconds": e.step_seconds, "sim_seconds": float(profile.total_seconds)}


__all__ = ["mapping_from_config", "describe_run", "crosscheck_row", "EVERY_LAYER"]
