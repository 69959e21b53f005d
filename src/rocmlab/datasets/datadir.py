"""Find, read and verify a dataset's IDX files in a directory.

Accepted layouts: the files directly in DIR, or torchvision's ``DIR/MNIST/raw/`` (``FashionMNIST``
for Fashion-MNIST), or ``DIR/raw/``; each file plain or gzipped, under its canonical name
(``train-images-idx3-ubyte``) or the dotted variant (``train-images.idx3-ubyte``).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

from rocmlab.common.errors import DataError
from rocmlab.datasets.catalog import DATASETS, ROLES, DatasetSpec, IdxFileSpec
from rocmlab.datasets.hashing import sha256_bytes
from rocmlab.datasets.idx import IdxArray, IdxFormatError, parse_idx

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class LoadedDataset:
    """A verified dataset: its spec, the file each role was read from, and the parsed arrays."""

    spec: DatasetSpec
    paths: dict[str, Path]
    arrays: dict[str, IdxArray]


def search_dirs(root: Path, spec: DatasetSpec) -> list[Path]:
    """Directories searched for the dataset's files, in order."""
    return [root, root / spec.torchvision_dir / "raw", root / "raw"]


def locate(root: Path, spec: DatasetSpec) -> dict[str, Path]:
    """Map each role of the dataset to an existing file; DataError names what is missing."""
    if not root.is_dir():
        raise DataError(
            f"--data {root}: not a directory (expected a directory of {spec.name} IDX files)"
        )
    found: dict[str, Path] = {}
    missing: list[str] = []
    for fspec in spec.files:
        path = next(
            (
                d / name
                for d in search_dirs(root, spec)
                for name in fspec.names
                if (d / name).is_file()
            ),
            None,
        )
        if path is None:
            missing.append(f"{fspec.stem}[.gz]")
        else:
            found[fspec.role] = path
    if missing:
        where = ", ".join(str(d) for d in search_dirs(root, spec))
        raise DataError(
            f"{spec.name} data incomplete: missing {', '.join(missing)} (searched {where}); "
            "stage the files with `rocmlab fetch-mnist`"
        )
    return found


def decompressed(path: Path, raw: bytes) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic number."""
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"{path}: truncated or corrupt gzip data ({exc})") from exc


def verify_content(path: Path, content: bytes, fspec: IdxFileSpec) -> IdxArray:
    """Check structure, shape and SHA-256 of an uncompressed IDX payload read from ``path``."""
    expected = f"expected {fspec.stem}: uint8 {'x'.join(map(str, fspec.shape))}, "
    expected += f"{fspec.size} bytes uncompressed, SHA-256 {fspec.sha256}"
    try:
        array = parse_idx(content)
    except IdxFormatError as exc:
        raise DataError(f"{path}: {exc}; {expected}") from exc
    if array.dtype != "uint8" or array.shape != fspec.shape:
        raise DataError(f"{path}: IDX {array.dtype} {'x'.join(map(str, array.shape))}; {expected}")
    digest = sha256_bytes(content)
    if digest != fspec.sha256:
        raise DataError(f"{path}: SHA-256 {digest} does not match (file altered?); {expected}")
    return array


def read_verified(path: Path, fspec: IdxFileSpec) -> IdxArray:
    """Read one file (plain or gzipped) and verify it against its spec."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from exc
    return verify_content(path, decompressed(path, raw), fspec)


def load_dataset(root: Path, name: str) -> LoadedDataset:
    """Locate and verify all four files of dataset ``name`` under ``root``."""
    spec = DATASETS[name]
    paths = locate(root, spec)
    arrays = {role: read_verified(paths[role], spec.file(role)) for role in ROLES}
    return LoadedDataset(spec=spec, paths=paths, arrays=arrays)
