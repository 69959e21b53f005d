"""The venv the tensorflow_rocm role built from the wheelhouse fixture (tensorflow-cpu 2.18.1, a CPU
build, said openly in molecule.yml), what it recorded, bad input refused before any change, and
nothing done when the role is not enabled: the framework suite (molecule/shared/framework_suite.py)
for TensorFlow, and what only TensorFlow has."""

from __future__ import annotations

import json
import os

import pytest
from framework_suite import *  # noqa: F403 - the framework suite's tests, run for FRAMEWORK
from framework_suite import Framework, play
from playbook_runs import changed, said

VENV = "/opt/rocmlab/venvs/tensorflow"
RESULT = "/etc/rocmlab/tensorflow.json"
TF = "2.18.1"

FRAMEWORK = Framework(
    role="tensorflow_rocm",
    host="rocmlab-tensorflow-debian12",
    module="tensorflow",
    version=TF,
    sum_script="import tensorflow as tf; print(float(tf.reduce_sum(tf.ones(2))))",
    quiet="TF_CPP_MIN_LOG_LEVEL=3",
    # Debian 13's Python, for TF 2.18 (3.9-3.12).
    fake_python="3.13.5",
    python_refusal=(
        "tensorflow-cpu 2.18.1 for ROCm 6.4 has no wheels for Python 3.13.5 ({path})",
        "upstream TensorFlow 2.18 has them for Python 3.9, 3.10, 3.11, 3.12.",
    ),
    cpu_refusal=(
        f"has tensorflow-cpu {TF}, which is not built with ROCm",
        "https://repo.radeon.com/rocm/manylinux/rocm-rel-6.4/",
    ),
    # Nothing is reinstalled: the record and the venv stay as they were.
    cpu_refusal_changes=0,
)
SNAPSHOT = FRAMEWORK.snapshot


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


def test_the_role_does_nothing_when_not_enabled(host):
    # Even settings that would be refused, and a venv path that does not exist, are left alone.
    before = host.check_output(SNAPSHOT)
    run = play(
        FRAMEWORK,
        {
            "tensorflow_rocm_enabled": False,
            "tensorflow_rocm_version": "2.x",
            "tensorflow_rocm_venv": "/opt/rocmlab/venvs/tf-off",
        },
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
    run = play(FRAMEWORK, {})
    assert run.returncode == 0, said(run)[-3000:]
    assert "Remove the other distributions that own the module tensorflow" in run.stdout
    assert "(item=tensorflow-intel)" in run.stdout
    assert changed(run) == 1, run.stdout[-3000:]
    assert not host.file(info).exists
    assert host.check_output(FRAMEWORK.imports) == TF
