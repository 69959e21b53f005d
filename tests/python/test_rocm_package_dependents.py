"""Unit tests for plugins/modules/rocm_package_dependents.py.

The graph function is tested on real dpkg status stanzas (tests/fixtures/dpkg_status, see its
PROVENANCE.md). The module itself needs python3-apt, which the system Python has and the
project's virtual environment does not: it is run the way Ansible runs it on a host
(ansible-playbook, local connection, /usr/bin/python3), first on the fixture through an
APT_CONFIG of the test's own, then on this machine's real apt cache. Both are compared with the
shell pipeline that roles/rocm_packages/tasks/absent.yml used before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_modules import apt_env, needs_apt, run_on_localhost

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "plugins" / "modules"
FIXTURE = REPO / "tests" / "fixtures" / "dpkg_status"

_spec = importlib.util.spec_from_file_location(
    "rocm_package_dependents", LIBRARY / "rocm_package_dependents.py"
)
assert _spec is not None and _spec.loader is not None
rocm_package_dependents = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rocm_package_dependents)
dependents = rocm_package_dependents.dependents


def parse_status(text: str) -> dict[str, set[str]]:
    """Installed packages of a dpkg status file -> the names they Depend or Pre-Depend on.

    Alternatives count for each member; version constraints and ":any" are dropped. Only
    native-architecture stanzas are expected (the fixture has no others).
    """
    depends: dict[str, set[str]] = {}
    for stanza in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields["Status"] != "install ok installed":
            continue
        relations = ", ".join(filter(None, (fields.get("Depends"), fields.get("Pre-Depends"))))
        names = re.split(r"\s*[,|]\s*", relations) if relations else []
        depends[fields["Package"]] = {
            re.sub(r"\s*\(.*\)$", "", name).removesuffix(":any") for name in names
        }
    return depends


STATUS = parse_status((FIXTURE / "status").read_text())

GNUPG_TOOLS = ["dirmngr", "gnupg", "gpg", "gpg-agent", "gpg-wks-client", "gpg-wks-server", "gpgsm"]
SOFTWARE_PROPERTIES = ["python3-software-properties", "software-properties-common"]


# ---------------------------------------------------------------- the graph, on real stanzas


def test_the_fixture_is_what_provenance_says():
    assert len(STATUS) == 21
    assert STATUS["libxmlb2"] == {"libc6", "libglib2.0-0", "liblzma5"}
    assert STATUS["python3-jwt"] == {"python3"}  # Depends: python3:any


def test_dependents_are_found_through_each_other():
    # gpgconf <- gpg <- python3-software-properties <- software-properties-common, and so on.
    assert dependents(STATUS, "gpgconf") == sorted(GNUPG_TOOLS + SOFTWARE_PROPERTIES)


def test_recommends_and_suggests_do_not_count():
    # gpg, gpg-agent, gpgsm, dirmngr ... Recommend gnupg, gpgv Suggests it: nothing Depends on it.
    assert dependents(STATUS, "gnupg") == []


def test_each_member_of_an_alternative_counts():
    # gpg-agent: Depends: pinentry-curses | pinentry
    expected = ["gnupg", "gpg-agent", "gpg-wks-client", "gpg-wks-server"]
    assert dependents(STATUS, "pinentry-curses") == expected
    assert dependents(STATUS, "pinentry") == expected


def test_pre_depends_count():
    # python3 Pre-Depends on python3-minimal, which Pre-Depends on python3.11-minimal.
    found = dependents(STATUS, "python3.11-minimal")
    assert {"python3-minimal", "python3", "python3-apt", "python3-jwt"} <= set(found)


def test_an_unknown_package_has_no_dependents():
    assert dependents(STATUS, "rocm-core") == []


def test_a_dependency_cycle_ends_and_leaves_the_package_out():
    # Debian allows cycles (e.g. Depends both ways between a library and its data package).
    assert dependents({"a": {"b"}, "b": {"a"}, "c": {"b"}}, "a") == ["b", "c"]


# ---------------------------------------------------------------- the module, as Ansible runs it


def run_module(names: list[str], env: dict[str, str], workdir: Path) -> dict[str, dict]:
    """rocm_package_dependents for each of NAMES, via ansible-playbook on localhost."""
    arg_sets = [{"name": name} for name in names]
    results = run_on_localhost("rocm_package_dependents", arg_sets, env, workdir)
    return dict(zip(names, results, strict=True))


def apt_cache_rdepends(name: str, env: dict[str, str]) -> list[str]:
    """What roles/rocm_packages/tasks/absent.yml listed before, without NAME itself."""
    pipeline = (
        "set -o pipefail; { apt-cache rdepends --installed --recurse --no-suggests"
        " --no-recommends --no-enhances --no-conflicts --no-breaks --no-replaces"
        ' "$1" 2>/dev/null || true; }'
        " | sed -n 's/^ *|\\{0,1\\}\\([a-z0-9][a-z0-9+.-]*\\)$/\\1/p' | sort -u"
    )
    out = subprocess.run(
        ["bash", "-c", pipeline, "rdepends", name],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return [line for line in out.split() if line != name]


@pytest.fixture(scope="module")
def fixture_apt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose APT_CONFIG shows apt the fixture, and only the fixture."""
    root = tmp_path_factory.mktemp("apt")
    return apt_env(root, FIXTURE / "status", f"deb [trusted=yes] file:{FIXTURE} ./\n")


FIXTURE_NAMES = [
    "gpgconf",
    "pinentry-curses",
    "python3-apt",
    "python3",
    "python3.11-minimal",
    "libzstd1",
    "gnupg",
    "pinentry",
    "rocm-core",
]


@pytest.fixture(scope="module")
def on_fixture(fixture_apt, tmp_path_factory) -> dict[str, dict]:
    return run_module(FIXTURE_NAMES, fixture_apt, tmp_path_factory.mktemp("play"))


@needs_apt
def test_module_agrees_with_the_status_file(on_fixture):
    for name in FIXTURE_NAMES:
        assert on_fixture[name]["dependents"] == dependents(STATUS, name), name
        assert on_fixture[name]["changed"] is False


@needs_apt
def test_module_lists_what_absent_yml_listed(on_fixture, fixture_apt):
    for name in ("gpgconf", "pinentry-curses", "python3-apt", "gnupg"):
        assert on_fixture[name]["dependents"] == apt_cache_rdepends(name, fixture_apt), name


@needs_apt
def test_module_counts_any_qualified_dependencies_that_apt_cache_misses(on_fixture, fixture_apt):
    # python3-jwt and python3-blinker Depend on python3:any only; python3-oauthlib on them.
    missed = {"python3-jwt", "python3-blinker", "python3-oauthlib"}
    shell = set(apt_cache_rdepends("python3", fixture_apt))
    assert missed.isdisjoint(shell)
    assert set(on_fixture["python3"]["dependents"]) == shell | missed


@needs_apt
def test_module_ignores_what_only_a_version_not_installed_depends_on(on_fixture, fixture_apt):
    # libxmlb2 0.3.22-1~deb12u1 (offered, not installed) depends on libzstd1; 0.3.10-2 does not.
    assert apt_cache_rdepends("libzstd1", fixture_apt) == ["libxmlb2"]
    assert on_fixture["libzstd1"]["dependents"] == []


@needs_apt
def test_module_reports_known_and_installed(on_fixture):
    assert (on_fixture["gpgconf"]["known"], on_fixture["gpgconf"]["installed"]) == (True, True)
    # pinentry is only provided (by pinentry-curses): apt knows it, it is not installed.
    assert (on_fixture["pinentry"]["known"], on_fixture["pinentry"]["installed"]) == (True, False)
    unknown = on_fixture["rocm-core"]
    assert (unknown["known"], unknown["installed"], unknown["dependents"]) == (False, False, [])
    assert not unknown.get("failed")


def native_only() -> bool:
    """Whether this machine's dpkg knows no foreign architecture (parse_status assumes none)."""
    if not shutil.which("dpkg"):
        return False
    foreign = subprocess.run(["dpkg", "--print-foreign-architectures"], capture_output=True)
    return foreign.returncode == 0 and not foreign.stdout.strip()


@needs_apt
@pytest.mark.skipif(not native_only(), reason="dpkg has foreign architectures")
def test_module_on_this_machines_apt_cache(tmp_path):
    # The real cache against the real status file, for python3: many packages Depend on it as
    # python3:any, and python3-apt (which the module needs) among them.
    env = {key: value for key, value in os.environ.items() if key != "APT_CONFIG"}
    status = parse_status(Path("/var/lib/dpkg/status").read_text())
    found = run_module(["python3"], env, tmp_path)["python3"]
    assert found["installed"] is True
    assert "python3-apt" in found["dependents"]
    assert found["dependents"] == dependents(status, "python3")


def test_module_without_python3_apt_says_what_to_install(capsys, monkeypatch):
    # The project's virtual environment has no python3-apt (a Debian package, not on PyPI).
    if importlib.util.find_spec("apt_pkg") is not None:
        pytest.skip("this Python has python3-apt")
    args = {"ANSIBLE_MODULE_ARGS": {"name": "rocm-core"}}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(args).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        rocm_package_dependents.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True
    assert result["msg"] == (
        "rocm_package_dependents needs python3-apt on the host: apt-get install python3-apt"
    )
