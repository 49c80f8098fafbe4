"""The cycle model (docs/machine.md): per-tile cycles of compute, exchange and sync."""
from __future__ import annotations

import numpy as np

from .kernels import deal_to_workers, first_of_pairs


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -(-a // b)


def compute_cost(target, tiles: np.ndarray, estimates: np.ndarray, multi: np.ndarray):
    """Per-tile (cycles including idle threads, cycles excluding idle threads) of one compute set.

    Vertices are dealt to the worker contexts greedily, largest first; a tile takes
    num_worker_contexts x its busiest worker's total, because the barrel scheduler gives each
    worker one issue slot in every num_worker_contexts cycles.
    """
    tiles = np.asarray(tiles, np.int64)
    estimates = np.asarray(estimates, np.int64)
    multi = np.asarray(multi, np.bool_)
    order = np.lexsort((np.arange(tiles.size), -estimates, ~multi, tiles))
    busiest = np.zeros(target.num_tiles, np.int64)
    busy_sum = np.zeros(target.num_tiles, np.int64)
    deal_to_workers(tiles[order], estimates[order], multi[order], target.num_worker_contexts,
                    busiest, busy_sum)
    return busiest * target.num_worker_contexts, busy_sum


def exchange_cost(target, src_tile: np.ndarray, dst_tile: np.ndarray, nbytes: np.ndarray,
                  src_start: np.ndarray | None = None):
    """Per-tile cycles of the moves (src_tile -> dst_tile, nbytes) of one exchange.

    The exchange multicasts: a tile sends a region once and every tile that needs it listens,
    so a source run (src_start, bytes) counts once in its tile's bytes out however many tiles
    receive it. Returns a dict of per-tile arrays:
      exchange            on-chip: ceil(max(bytes in, bytes out) / bytes per cycle) + setup
      inter_ipu_exchange  over IPU-Links: each tile waits for the slowest IPU pair it uses,
                          and at least for its own exchange port to send (receive) its bytes
      on_tile_copy        moves within a tile, done by copy code at the SRAM write width
    """
    T = target.num_tiles
    same = src_tile == dst_tile
    src_ipu, dst_ipu = target.ipu_of(src_tile), target.ipu_of(dst_tile)
    cross = src_ipu != dst_ipu
    local = ~same & ~cross

    on_tile = np.bincount(src_tile[same], weights=nbytes[same], minlength=T).astype(np.int64)
    sent = local
    if src_start is not None and local.any():
        sent = np.zeros_like(local)
        sent[local] = first_of_pairs(np.ascontiguousarray(src_start[local], np.int64),
                                     np.ascontiguousarray(nbytes[local], np.int64))
    out_b = np.bincount(src_tile[sent], weights=nbytes[sent], minlength=T).astype(np.int64)
    in_b = np.bincount(dst_tile[local], weights=nbytes[local], minlength=T).astype(np.int64)
    busiest = np.maximum(in_b, out_b)
    exchange = np.where(busiest > 0, _ceil_div(busiest, target.exchange_bytes_per_cycle)
                        + target.cost.exchange_setup_cycles, 0)

    inter = np.zeros(T, np.int64)
    if cross.any():
        n = target.num_ipus
        pair = src_ipu[cross] * n + dst_ipu[cross]
        pair_bytes = np.bincount(pair, weights=nbytes[cross], minlength=n * n)
        pair_cycles = np.zeros(n * n, np.int64)
        for p in np.flatnonzero(pair_bytes):
            pair_cycles[p] = target.link_cycles(int(pair_bytes[p]), p // n, p % n)
        run_cycles = pair_cycles[pair]
        np.maximum.at(inter, src_tile[cross], run_cycles)
        np.maximum.at(inter, dst_tile[cross], run_cycles)
        # a tile's bytes to or from other IPUs still pass its own port, 4 bytes per cycle:
        # a big tensor on one tile cannot use a link's whole bandwidth
        port = np.maximum(
            np.bincount(src_tile[cross], weights=nbytes[cross], minlength=T),
            np.bincount(dst_tile[cross], weights=nbytes[cross], minlength=T)).astype(np.int64)
        inter = np.maximum(inter, _ceil_div(port, target.exchange_bytes_per_cycle)
                           + np.where(port > 0, target.cost.exchange_setup_cycles, 0))

    copy = _ceil_div(on_tile, target.cost.on_tile_copy_bytes_per_cycle)
    return {"exchange": exchange, "inter_ipu_exchange": inter, "on_tile_copy": copy}


def default_vertex_estimate(target, elements_touched: np.ndarray) -> np.ndarray:
    """Worker-issue cycles of a vertex with no estimate: fixed overhead + one per element."""
    c = target.cost
    return c.vertex_overhead_cycles + c.vertex_cycles_per_element * np.asarray(elements_touched)
