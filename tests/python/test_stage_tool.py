"""tools/stage-test-data: idempotent, and repairs a damaged cache from the kept downloads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from rocmlab_testutil import STAGE_TOOL

from rocmlab.datasets.datadir import load_dataset


def stage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(STAGE_TOOL), *args], capture_output=True, text=True, timeout=900
    )


def test_second_run_is_a_verified_no_op(real_data: dict[str, Path]) -> None:
    result = stage()
    assert result.returncode == 0, result.stderr
    assert "mnist: already staged" in result.stdout
    assert "fashion-mnist: already staged" in result.stdout
    assert "downloading" not in result.stdout
    assert json.loads(result.stdout.splitlines()[-1]) == {k: str(v) for k, v in real_data.items()}


def test_damaged_cache_is_restaged_from_the_kept_downloads(
    real_data: dict[str, Path], tmp_path: Path
) -> None:
    downloads = real_data["mnist"].parent.parent / "downloads"
    cache = tmp_path / "cache"
    shutil.copytree(downloads, cache / "downloads")  # no network: the archive is there
    staged = cache / "data" / "mnist"
    shutil.copytree(real_data["mnist"], staged)
    victim = staged / "t10k-labels-idx1-ubyte"
    victim.write_bytes(victim.read_bytes()[:5000])

    result = stage("--only", "mnist", "--cache", str(cache))

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"re-staging: {victim}: truncated" in result.stdout
    assert "downloading" not in result.stdout
    load_dataset(staged, "mnist")
