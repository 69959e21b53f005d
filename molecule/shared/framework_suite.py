"""The tests every framework role's scenario runs (pytorch_rocm, tensorflow_rocm, jax_rocm), one
suite for all: the venv and its rights, the GPU override on activation, the system Python left
alone, check mode, bad input and a Python without wheels refused before any change, and a CPU
build refused where a ROCm build is required.

A scenario's test module says what its framework is (FRAMEWORK, a Framework; BAD_INPUT, its
refused settings) and takes the suite's tests with `from framework_suite import *`; pytest then
runs them there, for that FRAMEWORK (fixture `framework`)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import playbook_runs
import pytest
import testinfra
from playbook_runs import changed, said

__all__ = [
    "Framework",
    "framework",
    "host",
    "play",
    "pytest_generate_tests",
    "test_a_cpu_build_is_refused_when_a_rocm_build_is_required",
    "test_a_python_without_wheels_is_refused_naming_versions_that_work",
    "test_activation_sources_the_gpu_override_when_it_exists",
    "test_bad_input_fails_clearly_before_any_change",
    "test_check_mode_on_the_converged_host_changes_nothing",
    "test_every_user_can_run_the_venv",
    "test_nothing_but_root_can_write_into_the_venv",
    "test_system_python_has_no_framework_and_pip_stayed_out_of_it",
    "test_venv_and_record_are_root_owned_and_readable_by_all",
    "test_venv_python_imports_the_requested_version",
]

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PLAYBOOK = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
GFX_PROFILE = "/etc/profile.d/rocmlab-gfx.sh"  # written by the gfx_override role on GPU hosts


@dataclass(frozen=True)
class Framework:
    """A framework role's scenario: its host, venv, record, and what the framework answers."""

    role: str  # pytorch_rocm
    host: str  # the scenario's host this suite tests
    module: str  # the import name (torch)
    version: str  # what module.__version__ says in the venv
    # Python that prints 2.0 with the framework (a sum of ones), and the shell's prefix for it.
    sum_script: str
    quiet: str = ""
    # A Python without wheels: the version a stand-in interpreter reports, and what the refusal
    # says ({path}: the stand-in's path).
    fake_python: str = "3.9.2"
    python_refusal: tuple[str, ...] = ()
    # What the refusal of the CPU build says, and the changed count of that run (None: the role
    # reinstalls first, so some).
    cpu_refusal: tuple[str, ...] = ()
    cpu_refusal_changes: int | None = None

    @property
    def venv(self) -> str:
        return f"/opt/rocmlab/venvs/{'pytorch' if self.module == 'torch' else self.module}"

    @property
    def result(self) -> str:
        return f"/etc/rocmlab/{'pytorch' if self.module == 'torch' else self.module}.json"

    @property
    def imports(self) -> str:
        code = f"import {self.module}; print({self.module}.__version__)"
        return f"{self.quiet} {self.venv}/bin/python -c '{code}'".strip()

    @property
    def snapshot(self) -> str:
        """What a refused run must not touch: the venvs' tree, the record, packages, groups."""
        return (
            "find /opt/rocmlab /etc/rocmlab -printf '%p %u %g %m %s %T@\\n' | sort | sha256sum;"
            f" cat {self.result}; cat /etc/group; dpkg-query -W -f '${{Package}} ${{Version}}\\n'"
        )


@pytest.fixture(scope="module")
def framework(request) -> Framework:
    return request.module.FRAMEWORK


@pytest.fixture(scope="module")
def host(framework):
    return testinfra.get_host(f"ansible://{framework.host}?ansible_inventory={INVENTORY}")


def play(framework: Framework, extra_vars: dict, *args: str) -> subprocess.CompletedProcess:
    """The scenario's converge playbook on the framework's host, with EXTRA_VARS: the framework's
    role only (its tag), where the scenario's host has other roles too."""
    limit = ("--limit", framework.host, "--tags", framework.role)
    return playbook_runs.play(PLAYBOOK, extra_vars, *limit, *args)


def pytest_generate_tests(metafunc):
    """The bad input of the module's framework (its BAD_INPUT) for the test that takes it."""
    if {"extra_vars", "expected"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("extra_vars", "expected"), metafunc.module.BAD_INPUT)


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        ("/opt/rocmlab/venvs", "root", "root", 0o755),
        ("{venv}", "root", "render", 0o755),
        ("{venv}/bin", "root", "root", 0o755),
        ("{venv}/bin/activate", "root", "root", 0o644),
        ("{result}", "root", "root", 0o644),
    ],
)
def test_venv_and_record_are_root_owned_and_readable_by_all(
    host, framework, path, user, group, mode
):
    f = host.file(path.format(venv=framework.venv, result=framework.result))
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_venv_python_imports_the_requested_version(host, framework):
    assert host.check_output(framework.imports).strip() == framework.version


def test_every_user_can_run_the_venv(host, framework):
    # nobody is in no group at all: "usable by the render group" holds a fortiori.
    python = f"{framework.quiet} {framework.venv}/bin/python".strip()
    out = host.check_output(f"su -s /bin/sh nobody -c \"{python} -c '{framework.sum_script}'\"")
    assert out.strip().splitlines()[-1] == "2.0"


def test_nothing_but_root_can_write_into_the_venv(host, framework):
    assert host.check_output(f"find {framework.venv} -perm /022 ! -type l | head -5") == ""


def test_system_python_has_no_framework_and_pip_stayed_out_of_it(host, framework):
    assert host.run(f"python3 -c 'import {framework.module}'").rc != 0
    local = host.run(
        f"ls /usr/local/lib/python3*/dist-packages/ 2>/dev/null | grep -i {framework.module}"
    )
    assert local.stdout == ""
    assert host.package("python3-venv").is_installed


def test_activation_sources_the_gpu_override_when_it_exists(host, framework):
    venv = framework.venv
    activate = host.file(f"{venv}/bin/activate").content_string
    assert "# BEGIN rocmlab: GPU override (gfx_override)" in activate
    assert ". /etc/profile.d/rocmlab-gfx.sh" in activate
    # Without the file activation still works; with it the override reaches the shell.
    assert host.check_output(f"bash -c '. {venv}/bin/activate && echo $VIRTUAL_ENV'") == venv
    host.check_output("echo 'export HSA_OVERRIDE_GFX_VERSION=10.3.0' > %s", GFX_PROFILE)
    try:
        out = host.check_output(
            f"bash -c '. {venv}/bin/activate && echo $HSA_OVERRIDE_GFX_VERSION'"
        )
    finally:
        host.check_output("rm -f %s", GFX_PROFILE)
    assert out == "10.3.0"


def test_check_mode_on_the_converged_host_changes_nothing(framework):
    run = play(framework, {}, "--check")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert changed(run) == 0, run.stdout[-3000:]


def test_bad_input_fails_clearly_before_any_change(host, framework, extra_vars, expected):
    failure = playbook_runs.refused_without_change(
        host, framework.snapshot, lambda: play(framework, extra_vars)
    )
    for fragment in expected:
        assert fragment in failure, (fragment, failure[-3000:])


def test_a_python_without_wheels_is_refused_naming_versions_that_work(host, framework):
    fake = f"/tmp/python{framework.fake_python}"
    # A stand-in interpreter that reports a Python version the framework has no wheels for.
    script = f"printf '#!/bin/sh\\necho {framework.fake_python}\\n' > %s && chmod 755 %s"
    host.check_output(script, fake, fake)
    before = host.check_output(framework.snapshot)
    run = play(framework, {f"{framework.role}_python": fake})
    host.check_output("rm -f %s", fake)
    assert run.returncode != 0
    out = said(run)
    assert framework.python_refusal, "the framework says what its refusal says"
    for fragment in framework.python_refusal:
        assert fragment.format(path=fake) in out, (fragment, out[-3000:])
    assert host.check_output(framework.snapshot) == before


def test_a_cpu_build_is_refused_when_a_rocm_build_is_required(host, framework):
    record = host.file(framework.result).content_string
    run = play(framework, {f"{framework.role}_require_rocm_build": True})
    assert run.returncode != 0
    out = said(run)
    assert framework.cpu_refusal, "the framework says what its refusal says"
    for fragment in (*framework.cpu_refusal, "It cannot use an AMD GPU"):
        assert fragment in out, (fragment, out[-3000:])
    assert f"{framework.role}_require_rocm_build: false" in out
    if framework.cpu_refusal_changes is not None:
        assert changed(run) == framework.cpu_refusal_changes
    # The record still says what is there, and the venv still works.
    assert host.file(framework.result).content_string == record
    assert host.check_output(framework.imports).strip() == framework.version
