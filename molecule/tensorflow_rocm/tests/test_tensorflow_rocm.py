"""The venv the tensorflow_rocm role built from the wheelhouse fixture (tensorflow-cpu 2.18.1, a CPU
build, said openly in molecule.yml), what it recorded, bad input refused before any change, and
nothing done when the role is not enabled."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import playbook_runs
import pytest
import testinfra
from playbook_runs import changed, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
HOST_NAME = "rocmlab-tensorflow-debian12"
VENV = "/opt/rocmlab/venvs/tensorflow"
RESULT = "/etc/rocmlab/tensorflow.json"
TF = "2.18.1"
GFX_PROFILE = "/etc/profile.d/rocmlab-gfx.sh"  # written by the gfx_override role on GPU hosts
QUIET = "TF_CPP_MIN_LOG_LEVEL=3"
IMPORT_TF = f"{QUIET} {VENV}/bin/python -c 'import tensorflow as tf; print(tf.__version__)'"

# What a refused run must not have touched: the venvs' tree, the records, the packages, the groups.
SNAPSHOT = (
    "find /opt/rocmlab /etc/rocmlab -printf '%p %u %g %m %s %T@\\n' | sort | sha256sum;"
    " cat /etc/rocmlab/tensorflow.json; cat /etc/group; dpkg-query -W -f '${Package} ${Version}\\n'"
)


@pytest.fixture(scope="module")
def host():
    return testinfra.get_host(f"ansible://{HOST_NAME}?ansible_inventory={INVENTORY}")


def play(extra_vars: dict, *args: str) -> subprocess.CompletedProcess:
    return playbook_runs.play(PLAYBOOK, extra_vars, *args)


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        ("/opt/rocmlab/venvs", "root", "root", 0o755),
        (VENV, "root", "render", 0o755),
        (f"{VENV}/bin", "root", "root", 0o755),
        (f"{VENV}/bin/activate", "root", "root", 0o644),
        (RESULT, "root", "root", 0o644),
    ],
)
def test_venv_and_record_are_root_owned_and_readable_by_all(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_venv_python_imports_the_requested_tensorflow(host):
    assert host.check_output(IMPORT_TF).strip() == TF


def test_the_venv_has_only_the_requested_tensorflow_distribution(host):
    script = (
        "from importlib import metadata as m; "
        "print(sorted(d.metadata['Name'] for d in m.distributions() "
        "if d.metadata['Name'].lower().startswith('tensorflow')))"
    )
    out = host.check_output(f'{VENV}/bin/python -c "{script}"')
    # tensorflow-io-gcs-filesystem is a dependency of TF 2.18, not a second TensorFlow.
    assert out == "['tensorflow-io-gcs-filesystem', 'tensorflow_cpu']" or out == (
        "['tensorflow-io-gcs-filesystem', 'tensorflow-cpu']"
    )


def test_every_user_can_run_the_venv(host):
    # nobody is in no group at all: "usable by the render group" holds a fortiori.
    script = "import tensorflow as tf; print(float(tf.reduce_sum(tf.ones(2))))"
    out = host.check_output(f"su -s /bin/sh nobody -c \"{QUIET} {VENV}/bin/python -c '{script}'\"")
    assert out.strip().splitlines()[-1] == "2.0"


def test_nothing_but_root_can_write_into_the_venv(host):
    writable = host.check_output(f"find {VENV} -perm /022 ! -type l | head -5")
    assert writable == ""


def test_system_python_has_no_tensorflow_and_pip_stayed_out_of_it(host):
    assert host.run("python3 -c 'import tensorflow'").rc != 0
    local = host.run("ls /usr/local/lib/python3*/dist-packages/ 2>/dev/null | grep -i tensorflow")
    assert local.stdout == ""
    assert host.package("python3-venv").is_installed


def test_activation_sources_the_gpu_override_when_it_exists(host):
    activate = host.file(f"{VENV}/bin/activate").content_string
    assert "# BEGIN rocmlab: GPU override (gfx_override)" in activate
    assert ". /etc/profile.d/rocmlab-gfx.sh" in activate
    # Without the file activation still works; with it the override reaches the shell.
    assert host.check_output(f"bash -c '. {VENV}/bin/activate && echo $VIRTUAL_ENV'") == VENV
    host.check_output("echo 'export HSA_OVERRIDE_GFX_VERSION=10.3.0' > %s", GFX_PROFILE)
    try:
        out = host.check_output(
            f"bash -c '. {VENV}/bin/activate && echo $HSA_OVERRIDE_GFX_VERSION'"
        )
    finally:
        host.check_output("rm -f %s", GFX_PROFILE)
    assert out == "10.3.0"


def test_the_record_says_what_was_installed(host):
    record = json.loads(host.file(RESULT).content_string)
    assert record == {
        "venv": VENV,
        "python": f"{VENV}/bin/python",
        "python_version": host.check_output(
            "python3 -c 'import platform as p; print(p.python_version())'"
        ),
        "package": "tensorflow-cpu",
        "package_version": TF,
        "tf_version": TF,
        "built_with_rocm": False,
        "gpus": [],
        "gpu_present": False,
        "rocm_version": "6.4",
        "index_url": "",
        "find_links": os.environ["ROCMLAB_WHEELHOUSE_URL"],
        "no_index": True,
    }


def test_check_mode_on_the_converged_host_changes_nothing():
    run = play({}, "--check")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert changed(run) == 0, run.stdout[-3000:]


def test_the_role_does_nothing_when_not_enabled(host):
    # Even settings that would be refused, and a venv path that does not exist, are left alone.
    before = host.check_output(SNAPSHOT)
    run = play(
        {
            "tensorflow_rocm_enabled": False,
            "tensorflow_rocm_version": "2.x",
            "tensorflow_rocm_venv": "/opt/rocmlab/venvs/tf-off",
        }
    )
    assert run.returncode == 0, said(run)[-3000:]
    assert changed(run) == 0
    assert "tensorflow_rocm: off (tensorflow_rocm_enabled: false)" in said(run)
    assert not host.file("/opt/rocmlab/venvs/tf-off").exists
    assert host.check_output(SNAPSHOT) == before


BAD_INPUT = [
    pytest.param(
        {"tensorflow_rocm_version": "2.18"},
        ["tensorflow_rocm_version", '"2.18"', "X.Y.Z"],
        id="version-without-patch",
    ),
    pytest.param(
        {"tensorflow_rocm_version": "2.14.0.600"},
        ["tensorflow_rocm_version", '"2.14.0.600"', "without the ROCm suffix"],
        id="version-with-rocm-suffix",
    ),
    pytest.param(
        {"tensorflow_rocm_rocm_version": "6"},
        ["tensorflow_rocm_rocm_version", '"6"', "X.Y or X.Y.Z"],
        id="rocm-format",
    ),
    pytest.param(
        {"tensorflow_rocm_rocm_version": "5.7"},
        ["ROCm 5.7 is not in the table", "6.0, 6.1, 6.2"],
        id="rocm-not-in-table",
    ),
    pytest.param(
        {"tensorflow_rocm_version": "2.15.0"},
        [
            'tensorflow_rocm_version "2.15.0" does not fit tensorflow_rocm_rocm_version "6.4"',
            "ROCm 6.4 has TensorFlow 2.18.1, 2.17.1, 2.16.2",
            "ROCm releases with TensorFlow 2.15.0: 6.1",
            'Set tensorflow_rocm_version: "" to follow the ROCm release (TensorFlow 2.18.1)',
        ],
        id="pair-not-in-table",
    ),
    pytest.param(
        {"tensorflow_rocm_package": "tensorflow-rocm"},
        [
            "tensorflow-rocm 2.18.1 for ROCm 6.4 has no wheels for Python 3.11",
            "AMD's listing has them for Python 3.10, 3.12 (cp310: Ubuntu 22.04",
            "ROCm releases with tensorflow-rocm wheels for Python 3.11: 6.0.",
        ],
        id="python-without-amd-wheels",
    ),
    pytest.param(
        {"tensorflow_rocm_no_index": True, "tensorflow_rocm_find_links": ""},
        ["tensorflow_rocm_no_index True", "needs a wheelhouse and no index"],
        id="no-index-without-wheelhouse",
    ),
    pytest.param(
        {"tensorflow_rocm_pip_extra_args": ["--extra-index-url=http://pypi.example/simple"]},
        ["tensorflow_rocm_pip_extra_args", "found: --extra-index-url"],
        id="extra-index",
    ),
    pytest.param(
        {"tensorflow_rocm_venv": "opt/venv"},
        ["tensorflow_rocm_venv", '"opt/venv"', "not an absolute path"],
        id="venv-relative",
    ),
]


@pytest.mark.parametrize(("extra_vars", "expected"), BAD_INPUT)
def test_bad_input_fails_clearly_before_any_change(host, extra_vars, expected):
    failure = playbook_runs.refused_without_change(host, SNAPSHOT, lambda: play(extra_vars))
    for fragment in expected:
        assert fragment in failure, (fragment, failure[-3000:])


FAKE_PY = "/tmp/python3.13"


def test_a_python_without_wheels_is_refused_naming_versions_that_work(host):
    # A stand-in interpreter that reports Python 3.13.5 (Debian 13's), for TF 2.18 (3.9-3.12).
    host.check_output("printf '#!/bin/sh\\necho 3.13.5\\n' > %s && chmod 755 %s", FAKE_PY, FAKE_PY)
    before = host.check_output(SNAPSHOT)
    run = play({"tensorflow_rocm_python": FAKE_PY})
    host.check_output("rm -f %s", FAKE_PY)
    assert run.returncode != 0
    out = said(run)
    refusal = f"tensorflow-cpu 2.18.1 for ROCm 6.4 has no wheels for Python 3.13.5 ({FAKE_PY})"
    assert refusal in out, out[-3000:]
    assert "upstream TensorFlow 2.18 has them for Python 3.9, 3.10, 3.11, 3.12." in out
    assert host.check_output(SNAPSHOT) == before


def test_a_cpu_build_is_refused_when_a_rocm_build_is_required(host):
    record = host.file(RESULT).content_string
    run = play({"tensorflow_rocm_require_rocm_build": True})
    assert run.returncode != 0
    out = said(run)
    assert f"has tensorflow-cpu {TF}, which is not built with ROCm" in out, out[-3000:]
    assert "It cannot use an AMD GPU" in out
    assert "https://repo.radeon.com/rocm/manylinux/rocm-rel-6.4/" in out
    assert "tensorflow_rocm_require_rocm_build: false" in out
    # Nothing was reinstalled: the record and the venv are as they were.
    assert changed(run) == 0
    assert host.file(RESULT).content_string == record
    assert host.check_output(IMPORT_TF) == TF


def test_another_tensorflow_distribution_in_the_venv_is_removed(host):
    # A stand-in for tensorflow-intel left in the venv (metadata only): it would own the same
    # `tensorflow` module as tensorflow-cpu, so the role uninstalls it and keeps the wanted one.
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = host.check_output(f'{VENV}/bin/python -c "{purelib}"')
    name = "tensorflow_intel-2.18.1.dist-info"
    info = f"{site}/{name}"
    metadata = "Metadata-Version: 2.1\\nName: tensorflow-intel\\nVersion: 2.18.1\\n"
    record = f"{name}/METADATA,,\\n{name}/RECORD,,\\n"
    host.check_output(f"mkdir {info} && printf '{metadata}' > {info}/METADATA")
    host.check_output(f"printf '{record}' > {info}/RECORD")
    version = "from importlib import metadata; print(metadata.version('tensorflow-intel'))"
    assert host.check_output(f'{VENV}/bin/python -c "{version}"') == "2.18.1"
    run = play({})
    assert run.returncode == 0, said(run)[-3000:]
    assert "Remove the other distributions that own the tensorflow module" in run.stdout
    assert "(item=tensorflow-intel)" in run.stdout
    assert changed(run) == 1, run.stdout[-3000:]
    assert not host.file(info).exists
    assert host.check_output(IMPORT_TF) == TF
