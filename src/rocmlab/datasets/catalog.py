"""The datasets the smoke job knows: file names, shapes, SHA-256 and normalisation constants.

Hashes are of the *uncompressed* IDX content, so a gzipped copy and a plain copy of the same file
verify against the same value.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IdxFileSpec:
    """One IDX file of a dataset."""

    role: str  # train_images, train_labels, test_images, test_labels
    stem: str  # canonical name without compression suffix, e.g. "train-images-idx3-ubyte"
    shape: tuple[int, ...]
    sha256: str

    @property
    def size(self) -> int:
        """Uncompressed size in bytes: the IDX header plus one byte per uint8 element."""
        count = 1
        for dim in self.shape:
            count *= dim
        return 4 + 4 * len(self.shape) + count

    @property
    def names(self) -> tuple[str, ...]:
        """File names accepted for this file, in lookup order.

        The canonical name and the dotted variant some redistributions use
        (``train-images.idx3-ubyte``), each plain or gzipped.
        """
        dotted = self.stem.replace("-idx", ".idx")
        return (self.stem, f"{self.stem}.gz", dotted, f"{dotted}.gz")


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset in MNIST's IDX layout."""

    name: str
    torchvision_dir: str  # torchvision keeps the files in <root>/<torchvision_dir>/raw/
    files: tuple[IdxFileSpec, ...]
    mean: float
    std: float
    num_classes: int = 10

    def file(self, role: str) -> IdxFileSpec:
        """The file with the given role."""
        for spec in self.files:
            if spec.role == role:
                return spec
        raise KeyError(role)


ROLES = ("train_images", "train_labels", "test_images", "test_labels")

MNIST = DatasetSpec(
    name="mnist",
    torchvision_dir="MNIST",
    files=(
        IdxFileSpec(
            "train_images",
            "train-images-idx3-ubyte",
            (60000, 28, 28),
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        ),
        IdxFileSpec(
            "train_labels",
            "train-labels-idx1-ubyte",
            (60000,),
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        ),
        IdxFileSpec(
            "test_images",
            "t10k-images-idx3-ubyte",
            (10000, 28, 28),
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        ),
        IdxFileSpec(
            "test_labels",
            "t10k-labels-idx1-ubyte",
            (10000,),
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        ),
    ),
    mean=0.1307,
    std=0.3081,
)

# Computed once from the files in Debian's package dataset-fashion-mnist
# 0.0~git20200523.55506a9-1 (/usr/share/datasets/fashion-mnist/*.gz), SHA-256 of the gunzipped
# content. Mean/std of the training images computed from the same files.
FASHION_MNIST = DatasetSpec(
    name="fashion-mnist",
    torchvision_dir="FashionMNIST",
    files=(
        IdxFileSpec(
            "train_images",
            "train-images-idx3-ubyte",
            (60000, 28, 28),
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        ),
        IdxFileSpec(
            "train_labels",
            "train-labels-idx1-ubyte",
            (60000,),
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        ),
        IdxFileSpec(
            "test_images",
            "t10k-images-idx3-ubyte",
            (10000, 28, 28),
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        ),
        IdxFileSpec(
            "test_labels",
            "t10k-labels-idx1-ubyte",
            (10000,),
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        ),
    ),
    mean=0.2860,
    std=0.3530,
)

# Their names are the CLI's contract's datasets (rocmlab/data/cli_contract.json; a test ties them).
DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (MNIST, FASHION_MNIST)}
