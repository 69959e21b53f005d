"""Host trees of both ROCm release lines for the tests of the installed-release probe and its
users, assembled from what dpkg and update-alternatives really wrote
(tests/fixtures/rocm_installed/README.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

from rocmlab_testutil import REPO

FIXTURE = REPO / "tests" / "fixtures" / "rocm_installed"
LEGACY_INFO = "6.4.2-120"  # what AMD's rocm-core 6.4.2 writes in .info/version


def stanzas(file: str, *names: str) -> str:
    """The named packages' stanzas of a captured status file, verbatim."""
    text = (FIXTURE / "status" / file).read_text()
    kept = [s for s in text.split("\n\n") if s.split("\n", 1)[0].removeprefix("Package: ") in names]
    assert len(kept) == len(names), (file, names)
    return "".join(s + "\n\n" for s in kept)


def tree(
    tmp: Path,
    status: str = "",
    cores: tuple[str, ...] = (),
    alternatives: str | None = None,
    legacy: bool = False,
    root: Path | None = None,
) -> Path:
    """A host's root: dpkg's status, the core directories, update-alternatives' state as
    captured (ALTERNATIVES: one, auto or manual), and the legacy tree with AMD's link chain
    /opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.4.2. ROOT: an existing tree to put them
    in (its dpkg status replaced), else TMP/root."""
    root = root or tmp / "root"
    (root / "var/lib/dpkg").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text(status)
    (root / "etc/alternatives").mkdir(parents=True, exist_ok=True)
    if cores or alternatives:
        (root / "opt/rocm").mkdir(parents=True, exist_ok=True)
    for series in cores:
        (root / f"opt/rocm/core-{series}/bin").mkdir(parents=True)
    if alternatives:
        captured = FIXTURE / "alternatives" / alternatives
        (root / "var/lib/dpkg/alternatives").mkdir(exist_ok=True)
        shutil.copy(captured / "core", root / "var/lib/dpkg/alternatives/core")
        target = (captured / "etc-alternatives-core.link").read_text().strip()
        (root / "etc/alternatives/core").symlink_to(target)
        (root / "opt/rocm/core").symlink_to("/etc/alternatives/core")
    if legacy:
        (root / "opt/rocm-6.4.2/.info").mkdir(parents=True)
        (root / "opt/rocm-6.4.2/.info/version").write_text(LEGACY_INFO + "\n")
        if not (root / "opt/rocm").exists():
            (root / "etc/alternatives/rocm").symlink_to("/opt/rocm-6.4.2")
            (root / "opt/rocm").symlink_to("/etc/alternatives/rocm")
    return root


TWO = stanzas("cores", "amdrocm-core7.14", "amdrocm-core10.0", "amdrocm-runtime10.0")
LEGACY = stanzas("legacy", "rocm-core")
