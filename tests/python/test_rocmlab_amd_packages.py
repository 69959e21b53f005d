"""The modules that read apt's cache to tell AMD's packages (rocmlab_amd_packages, and
rocm_release_plan over the ledger it writes), run as Ansible runs them on a host: ansible-playbook
on localhost with /usr/bin/python3 and an APT_CONFIG of the test's own. The cache is real apt over
two flat repositories laid out as apt reads them (Packages and a Release whose Origin is AMD's,
repo.radeon.com, or Debian's) and a dpkg status file in dpkg's own format."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from ansible_modules import apt_env, needs_apt, run_on_localhost

pytestmark = needs_apt

R642 = {"rocm-core": "6.4.2.60402-1", "rocminfo": "1.0.0.60402-1"}
R710 = {"rocm-core": "7.1.0.70100-1", "rocminfo": "1.0.0.70100-1"}
# Installed, and AMD's by no source: Debian's (release-like versions) and a package of AMD's name
# that rocmlab never saw come from AMD's sources.
OTHERS = {"liberror-perl": "0.17029-2", "libjson-perl": "4.10000-1", "rocm-smi": "1.0.0.60302-1"}


def stanza(name: str, version: str, **extra: str) -> str:
    fields = {
        "Package": name,
        **extra,
        "Version": version,
        "Architecture": "amd64",
        "Maintainer": "rocmlab tests <rocmlab-tests@example.invalid>",
        "Installed-Size": "1",
        "Description": f"test fixture standing in for {name}",
    }
    return "".join(f"{key}: {value}\n" for key, value in fields.items()) + "\n"


def flat_repo(directory: Path, origin: str, packages: dict[str, str]) -> None:
    """A flat repository (deb file:DIR ./): Packages, and a Release naming its Origin and hashes."""
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(
        stanza(n, v, Filename=f"./{n}_{v}_amd64.deb", Size="1", SHA256="0" * 64)
        for n, v in sorted(packages.items())
    )
    (directory / "Packages").write_text(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    (directory / "Release").write_text(
        f"Origin: {origin}\nLabel: {origin}\nSuite: stable\nCodename: stable\n"
        f"Architectures: amd64\nSHA256:\n {digest} {len(text.encode())} Packages\n"
    )


@pytest.fixture
def host(tmp_path):
    installed = {**R642, **OTHERS}
    status = tmp_path / "status"
    status.write_text(
        "".join(
            stanza(n, v, Status="install ok installed", Priority="optional")
            for n, v in installed.items()
        )
    )
    flat_repo(tmp_path / "amd", "repo.radeon.com", R642)
    flat_repo(tmp_path / "debian", "Debian", {"liberror-perl": "0.17029-2"})
    sources = (
        f"deb [trusted=yes] file:{tmp_path / 'amd'} ./\n"
        f"deb [trusted=yes] file:{tmp_path / 'debian'} ./\n"
    )
    env = apt_env(tmp_path / "apt", status, sources)
    return tmp_path, env


def note(tmp_path, env, check: bool = False) -> dict:
    args = {"path": str(tmp_path / "amd-packages.json")}
    (result,) = run_on_localhost("rocmlab_amd_packages", [args], env, tmp_path, check)
    assert not result.get("failed"), result
    return result


def test_only_what_amds_sources_offer_is_written_down(host):
    tmp_path, env = host
    result = note(tmp_path, env)
    assert result["changed"] is True and result["packages"] == R642
    assert result["added"] == [f"{n}={v}" for n, v in sorted(R642.items())]
    ledger = json.loads((tmp_path / "amd-packages.json").read_text())
    assert ledger == {"format": 1, "packages": {n: [v] for n, v in R642.items()}}
    assert note(tmp_path, env)["changed"] is False
    # Check mode writes nothing.
    (tmp_path / "amd-packages.json").unlink()
    assert note(tmp_path, env, check=True)["changed"] is True
    assert not (tmp_path / "amd-packages.json").exists()


def test_once_the_sources_name_another_release_the_ledger_still_knows_amds_packages(host):
    tmp_path, env = host
    note(tmp_path, env)
    flat_repo(tmp_path / "amd", "repo.radeon.com", R710)  # rocm_repo moved the sources to 7.1
    env = apt_env(
        tmp_path / "apt",
        tmp_path / "status",
        f"deb [trusted=yes] file:{tmp_path / 'amd'} ./\n"
        f"deb [trusted=yes] file:{tmp_path / 'debian'} ./\n",
    )
    assert note(tmp_path, env)["packages"] == R642
    args = {
        "release": "7.1",
        "origin": "repo.radeon.com",
        "ledger": str(tmp_path / "amd-packages.json"),
    }
    (plan,) = run_on_localhost("rocm_release_plan", [args], env, tmp_path)
    assert not plan.get("failed"), plan
    assert sorted(plan["apt_names"]) == sorted(f"{n}={v}" for n, v in R710.items())
    assert plan["installed_releases"] == ["6.4.2"] and plan["stranded"] == []
    # Debian's Perl modules (read as releases 1.70.29 and 1.0.0 by their versions) and the
    # unseen rocm-smi are not moved.
    assert not {c["name"] for c in plan["changes"]} & set(OTHERS)
