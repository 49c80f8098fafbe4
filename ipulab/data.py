"""Datasets for training: scikit-learn's bundled digits, MNIST from local files, and a
generated token task for the small GPT.

    x_train, y_train, x_test, y_test = ipulab.data.digits()
    x_train, y_train, x_test, y_test = ipulab.data.mnist("~/data/mnist")   # IDX files (or .gz)
    x_train, y_train, x_test, y_test = ipulab.data.mnist("~/data/mnist.npz")
    x_train, y_train, x_test, y_test = ipulab.data.sort_tokens()          # token ids [n, 32]

Images are NCHW float32 in [0, 1]; labels are int64 class indices. Nothing is downloaded:
digits ship with scikit-learn, MNIST must already be on disk, sort_tokens is generated. A
missing or malformed file raises ipulab.errors.DataError naming the file and what is wrong
with it.
"""
from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import numpy as np

from .errors import DataError

DIGITS_SEED = 0          # the fixed seed of the 80/20 split of digits()
DIGITS_TEST_FRACTION = 0.2

__all__ = ["digits", "mnist", "read_idx", "sort_tokens", "DIGITS_SEED", "DIGITS_TEST_FRACTION"]


def digits():
    """scikit-learn's 1,797 handwritten digits (8x8, bundled with scikit-learn, no download).

    Returns (x_train, y_train, x_test, y_test): images as NCHW float32 of shape (n, 1, 8, 8)
    in [0, 1] (pixel / 16), labels as int64 in 0..9. The split is 80/20 (1,437 / 360), a
    permutation with the fixed seed DIGITS_SEED, so every call gives the same arrays."""
    table = _bundled_digits()
    x = (table[:, :-1].reshape(-1, 8, 8).astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = table[:, -1].astype(np.int64)
    n = len(y)
    n_test = math.ceil(DIGITS_TEST_FRACTION * n)
    order = np.random.default_rng(DIGITS_SEED).permutation(n)
    test, train = order[:n_test], order[n_test:]
    return (np.ascontiguousarray(x[train]), y[train], np.ascontiguousarray(x[test]), y[test])


def _bundled_digits() -> np.ndarray:
    """scikit-learn's digits.csv.gz as load_digits() parses it (1,797 rows: 64 pixels, then
    the label), read in place: importing sklearn.datasets takes a second (it imports most of
    scikit-learn and scipy), which every kernel and test process that trains would pay."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")          # finds the package, runs none of it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, mode="rt", encoding="utf-8") as f:
                return np.loadtxt(f, delimiter=",")
    from sklearn.datasets import load_digits            # another layout: ask scikit-learn

    d = load_digits()
    return np.column_stack([d.data, d.target])


# --- MNIST ----------------------------------------------------------------------------------------
# IDX element types (the third byte of the magic number), stored big-endian
_IDX_TYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
              0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_ROLES = {"x_train": ("train", "images", 3), "y_train": ("train", "labels", 1),
          "x_test": ("t10k", "images", 3), "y_test": ("t10k", "labels", 1)}
_ROLE_NAMES = {"x_train": "train images", "y_train": "train labels", "x_test": "test images",
               "y_test": "test labels"}


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":                # gzip magic, whatever the file is called
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DataError(f"{path} looks gzipped but does not decompress: {e}") from None
    return raw


def read_idx(path) -> np.ndarray:
    """An IDX file (Yann LeCun's MNIST format, gzipped or not) as a numpy array."""
    path = Path(path).expanduser()
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataError(f"{path} is not an IDX file: it should start with two zero bytes, a "
                        f"type code ({', '.join(hex(k) for k in _IDX_TYPES)}) and a rank, "
                        f"but starts with {raw[:4].hex(' ') or 'nothing'}")
    dtype, rank = _IDX_TYPES[raw[2]], raw[3]
    header = 4 + 4 * rank
    if len(raw) < header:
        raise DataError(f"{path}: IDX header promises {rank} dimensions but the file ends "
                        f"after {len(raw)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", rank, 4))
    need = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != need:
        raise DataError(f"{path}: IDX header says shape {list(shape)} of {dtype.name} "
                        f"({need:,} bytes with the header) but the file has {len(raw):,} bytes "
                        "(truncated or corrupt?)")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _idx_file(folder: Path, key: str) -> Path:
    prefix, what, rank = _ROLES[key]
    names = [f"{prefix}-{what}-idx{rank}-ubyte", f"{prefix}-{what}.idx{rank}-ubyte"]
    candidates = [folder / (n + ext) for n in names for ext in ("", ".gz")]
    for c in candidates:
        if c.is_file():
            return c
    raise DataError(f"MNIST {_ROLE_NAMES[key]} not found in {folder}: looked for "
                    + ", ".join(c.name for c in candidates)
                    + ". ipulab never downloads data; put the four IDX files (or an .npz with "
                    "x_train, y_train, x_test, y_test) there first")


def _load_npz(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in _ROLES if k not in z.files]
            if missing:
                raise DataError(f"{path} has arrays {z.files} but MNIST needs x_train, "
                                f"y_train, x_test and y_test (missing: {', '.join(missing)})")
            return {k: z[k] for k in _ROLES}
    except DataError:
        raise
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path} as an .npz archive: {e}") from None


def _images(a: np.ndarray, where: str) -> np.ndarray:
    if a.ndim == 4 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 3 or min(a.shape) < 1:
        raise DataError(f"{where}: images must be (n, height, width) or (n, 1, height, width), "
                        f"not shape {list(a.shape)}")
    if a.dtype.kind in "ui":
        x = a.astype(np.float32) / np.float32(255.0)
    elif a.dtype.kind == "f":
        x = a.astype(np.float32)
    else:
        raise DataError(f"{where}: images must be numbers, not {a.dtype}")
    if x.size and not (np.isfinite(x).all() and x.min() >= 0.0 and x.max() <= 1.0):
        raise DataError(f"{where}: image values must be bytes (0..255) or floats in [0, 1]; "
                        f"found the range [{x.min()}, {x.max()}]")
    return np.ascontiguousarray(x[:, None])


def _labels(a: np.ndarray, n: int, where: str) -> np.ndarray:
    if a.ndim != 1 or a.dtype.kind not in "ui":
        raise DataError(f"{where}: labels must be a 1-D integer array, not {a.dtype} of shape "
                        f"{list(a.shape)}")
    if a.size != n:
        raise DataError(f"{where}: {a.size:,} labels for {n:,} images")
    if a.size and (a.min() < 0 or a.max() > 9):
        raise DataError(f"{where}: labels must be digits 0..9, found {a.min()}..{a.max()}")
    return a.astype(np.int64)


def mnist(path):
    """MNIST from local files: a folder holding the four IDX files (train-images-idx3-ubyte,
    train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each optionally
    .gz), or an .npz archive with x_train, y_train, x_test and y_test (as Keras' mnist.npz).

    Returns (x_train, y_train, x_test, y_test): NCHW float32 images in [0, 1] (bytes / 255)
    and int64 labels. Raises DataError when a file is missing or malformed."""
    path = Path(os.fspath(path)).expanduser()
    if path.is_dir():
        files = {k: _idx_file(path, k) for k in _ROLES}
        arrays = {k: read_idx(f) for k, f in files.items()}
        where = {k: str(f) for k, f in files.items()}
    elif path.is_file():
        arrays = _load_npz(path)
        where = {k: f"{path}[{k}]" for k in _ROLES}
    else:
        raise DataError(f"MNIST not found: {path} is neither a folder of IDX files nor an "
                        ".npz file. ipulab never downloads data; copy MNIST there first")
    out = []
    for x_key, y_key in (("x_train", "y_train"), ("x_test", "y_test")):
        x = _images(arrays[x_key], where[x_key])
        out += [x, _labels(arrays[y_key], len(x), where[y_key])]
    return tuple(out)


# --- a generated token task -------------------------------------------------------------------
def _count(v, what: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise DataError(f"sort_tokens: {what} must be an int >= {lo}, not {v!r}")
    return int(v)


def sort_tokens(n_train: int = 4096, n_test: int = 512, length: int = 16, values: int = 10,
                vocab: int = 64, seed: int = 0):
    """Sorting as next-token prediction, after minGPT's demo, generated (no download):
    a question of `length` random tokens in 0..values-1, then the separator (token
    vocab - 1), then the answer -- the question sorted -- one position late, so that a causal
    model predicts each answer token from the question and the answer so far:

        x = [q_1 .. q_L, SEP, a_1 .. a_{L-1}]        (2L token ids)
        y = [q_1 .. q_L, a_1 .. a_L]                 a = sorted(q)

    The question's positions ask the model to repeat their own token (what a token-level
    loss needs there; they are learnt first, so token accuracy starts near 50 %); the answer's
    L positions are the task: each is right only if the model has sorted. Returns (x_train,
    y_train, x_test, y_test) as int64 [n, 2L], the same arrays for the same arguments."""
    n_train, n_test = _count(n_train, "n_train", 1), _count(n_test, "n_test", 1)
    length, values = _count(length, "length", 1), _count(values, "values", 1)
    vocab = _count(vocab, "vocab", values + 1)
    rng = np.random.default_rng(_count(seed, "seed", 0))
    q = rng.integers(0, values, (n_train + n_test, length))
    a = np.sort(q, 1)
    sep = np.full((len(q), 1), vocab - 1)
    x = np.concatenate([q, sep, a[:, :-1]], 1).astype(np.int64)
    y = np.concatenate([q, a], 1).astype(np.int64)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]
