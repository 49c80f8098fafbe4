"""ipulab.data: digits() as DESIGN section 7 states it, MNIST from local IDX or npz files, and
a clear DataError for every missing or malformed file."""
import gzip
import struct
import subprocess
import sys

import numpy as np
import pytest

import ipulab
from ipulab import data
from ipulab.errors import DataError, IpuLabError


# --- digits -------------------------------------------------------------------------------------
def test_digits_contract():
    x_train, y_train, x_test, y_test = ipulab.data.digits()
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    assert x_train.dtype == np.float32 and x_test.dtype == np.float32
    assert y_train.shape == (1437,) and y_test.shape == (360,)
    assert y_train.dtype.kind == "i" and y_test.dtype.kind == "i"
    assert x_train.flags.c_contiguous
    for x in (x_train, x_test):
        assert x.min() == 0.0 and x.max() == 1.0
        assert np.all(np.isin(x * 16, np.arange(17)))           # pixel / 16 exactly
    assert set(np.unique(y_train)) == set(range(10)) == set(np.unique(y_test))


def test_digits_is_the_bundled_set_split_80_20_with_a_fixed_seed():
    from sklearn.datasets import load_digits
    d = load_digits()
    a, b = data.digits(), data.digits()
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    x_train, y_train, x_test, y_test = a
    # every sample exactly once, labels kept with their images
    x_all = np.concatenate([x_train, x_test]).reshape(-1, 64) * 16
    y_all = np.concatenate([y_train, y_test])
    ref = {(row.tobytes(), int(t)) for row, t in zip(d.data.astype(np.float32), d.target)}
    got = {(row.tobytes(), int(t)) for row, t in zip(x_all.astype(np.float32), y_all)}
    assert got == ref and len(y_all) == 1797
    # shuffled, not the first 1,437
    assert not np.array_equal(y_train[:50], d.target[:50])


def test_digits_are_read_in_place_as_load_digits_gives_them_without_importing_it(monkeypatch):
    from sklearn.datasets import load_digits
    d = load_digits()
    table = data._bundled_digits()
    np.testing.assert_array_equal(table, np.column_stack([d.data, d.target]))
    # where scikit-learn keeps its data elsewhere, load_digits() is asked: the same arrays
    in_place = data.digits()
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    np.testing.assert_array_equal(data._bundled_digits(), table)
    for u, v in zip(data.digits(), in_place):
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_array_equal(u, v)


def test_reading_digits_does_not_import_scikit_learns_datasets():
    code = ("import sys, ipulab.data as d; d.digits(); "
            "print('sklearn.datasets' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out


# --- MNIST files --------------------------------------------------------------------------------
def _idx(array: np.ndarray, code: int = 0x08) -> bytes:
    head = struct.pack(">BBBB", 0, 0, code, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape)
    return head + array.astype(array.dtype.newbyteorder(">")).tobytes()


def _fake_mnist(rng, n_train=12, n_test=5, size=28):
    return (rng.integers(0, 256, (n_train, size, size), dtype=np.uint8),
            rng.integers(0, 10, n_train, dtype=np.uint8),
            rng.integers(0, 256, (n_test, size, size), dtype=np.uint8),
            rng.integers(0, 10, n_test, dtype=np.uint8))


NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")


def _write_idx_folder(folder, arrays, gz):
    for name, a in zip(NAMES, arrays):
        raw = _idx(a)
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)


def _check(out, arrays):
    x_train, y_train, x_test, y_test = out
    assert x_train.shape == (12, 1, 28, 28) and x_test.shape == (5, 1, 28, 28)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int64
    np.testing.assert_array_equal(x_train[:, 0] * 255, arrays[0].astype(np.float32))
    np.testing.assert_allclose(x_test[:, 0], arrays[2] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y_train, arrays[1])
    np.testing.assert_array_equal(y_test, arrays[3])


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_from_idx_files(tmp_path, gz):
    arrays = _fake_mnist(np.random.default_rng(1))
    _write_idx_folder(tmp_path, arrays, gz)
    _check(data.mnist(tmp_path), arrays)
    _check(data.mnist(str(tmp_path)), arrays)


def test_mnist_from_npz(tmp_path):
    arrays = _fake_mnist(np.random.default_rng(2))
    f = tmp_path / "mnist.npz"
    np.savez(f, **dict(zip(("x_train", "y_train", "x_test", "y_test"), arrays)))
    _check(data.mnist(f), arrays)


def test_read_idx_types(tmp_path):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 7
    (tmp_path / "a").write_bytes(_idx(a, 0x0C))
    np.testing.assert_array_equal(data.read_idx(tmp_path / "a"), a)
    f = np.linspace(0, 1, 6, dtype=np.float32)
    (tmp_path / "f").write_bytes(_idx(f, 0x0D))
    np.testing.assert_array_equal(data.read_idx(tmp_path / "f"), f)


def test_mnist_missing(tmp_path):
    with pytest.raises(DataError, match="never downloads"):
        data.mnist(tmp_path / "nowhere")
    with pytest.raises(DataError, match="train images not found .*train-images-idx3-ubyte"):
        data.mnist(tmp_path)
    arrays = _fake_mnist(np.random.default_rng(3))
    _write_idx_folder(tmp_path, arrays, gz=False)
    (tmp_path / NAMES[3]).unlink()
    with pytest.raises(DataError, match="test labels not found"):
        data.mnist(tmp_path)


def test_mnist_malformed(tmp_path):
    arrays = _fake_mnist(np.random.default_rng(4))
    _write_idx_folder(tmp_path, arrays, gz=False)
    images = tmp_path / NAMES[0]
    good = images.read_bytes()
    images.write_bytes(good[:-10])
    with pytest.raises(DataError, match="truncated or corrupt"):
        data.mnist(tmp_path)
    images.write_bytes(b"\x89PNG not an idx file")
    with pytest.raises(DataError, match="is not an IDX file"):
        data.mnist(tmp_path)
    images.write_bytes(b"\x1f\x8b broken gzip")
    with pytest.raises(DataError, match="does not decompress"):
        data.mnist(tmp_path)
    images.write_bytes(good)
    (tmp_path / NAMES[1]).write_bytes(_idx(arrays[1][:-1]))
    with pytest.raises(DataError, match="11 labels for 12 images"):
        data.mnist(tmp_path)
    (tmp_path / NAMES[1]).write_bytes(_idx(arrays[1] + 10))
    with pytest.raises(DataError, match="digits 0..9"):
        data.mnist(tmp_path)


def test_mnist_bad_npz(tmp_path):
    f = tmp_path / "m.npz"
    np.savez(f, x_train=np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(DataError, match="missing: y_train, x_test, y_test"):
        data.mnist(f)
    f.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="cannot read .* as an .npz"):
        data.mnist(f)
    x = np.full((2, 28, 28), 3.0, np.float32)
    np.savez(f, x_train=x, y_train=np.zeros(2, np.int64), x_test=x, y_test=np.zeros(2, np.int64))
    with pytest.raises(DataError, match=r"floats in \[0, 1\]"):
        data.mnist(f)


def test_data_error_is_an_ipulab_error_and_a_value_error():
    assert issubclass(DataError, IpuLabError) and issubclass(DataError, ValueError)
