"""jax_rocm on the framework engine, on the host that shows an MI210 (sysfs fixture) and has no
ROCm package: jax and jaxlib 0.10.2 (PyPI's CPU wheels, from the wheelhouse), the jax_rocm7 plugin
and PJRT stand-ins and ROCm with the gfx90a device code (the ROCm wheels fixture index), said
openly in molecule.yml. The framework suite (molecule/shared/framework_suite.py) for JAX, and
what only JAX has."""

from __future__ import annotations

import json
import os

import pytest
from framework_suite import *  # noqa: F403 - the framework suite's tests, run for FRAMEWORK
from framework_suite import Framework

JAX = "0.10.2"
DISTS = (
    "/opt/rocmlab/venvs/jax/bin/python -c 'import json, importlib.metadata as m;"
    ' print(json.dumps({d.metadata["Name"]: d.version for d in m.distributions()}))\''
)

FRAMEWORK = Framework(
    role="jax_rocm",
    host="rocmlab-pytorch-wheels-debian12",
    module="jax",
    version=JAX,
    sum_script="import jax.numpy as jnp; print(float(jnp.ones(2).sum()))",
    # Ubuntu 22.04's Python: jax 0.10 needs 3.11.
    fake_python="3.10.12",
    python_refusal=(
        "jax_rocm_version: jax 0.10.2 has no wheels for Python 3.10.12 ({path})",
        "its wheels are for Python 3.11, 3.12, 3.13, 3.14",
    ),
)

# pip installs jax, the plugin and its PJRT pinned together, and fails where the index lacks the
# plugin: the role cannot leave a jax without its ROCm plugin to refuse (the record's refusal of
# one is tested in tests/python/test_jax_plan.py).
del test_a_cpu_build_is_refused_when_a_rocm_build_is_required  # noqa: F821

BAD_INPUT = [
    pytest.param(
        {"jax_rocm_gfx_targets": ["gfx90z"]},
        ["jax_rocm_gfx_targets", "gfx90z", "[gfx1100, gfx942], or [all]"],
        id="gfx-target-format",
    ),
    pytest.param(
        {"jax_rocm_version": "0.10.3"},
        ["jax 0.10.3 is not in the table", "Known releases: 0.10.1, 0.10.2, 0.11.0, 0.11.1"],
        id="unknown-release",
    ),
    pytest.param(
        # ROCm's index alone (here the fixture standing in for it): jax is PyPI's.
        {
            "jax_rocm_find_links": "",
            "jax_rocm_wheels_index_url": os.environ["ROCMLAB_ROCM_WHEELS_URL"],
        },
        ["jax_rocm_find_links is empty: jax and jaxlib are not on that index", "jax==0.10.2"],
        id="rocm-index-alone",
    ),
]


def test_the_venv_has_jax_its_rocm7_plugin_and_the_gpus_device_code(host):
    dists = json.loads(host.check_output(DISTS))
    got = {n: dists.get(n) for n in ("jax", "jaxlib", "jax_rocm7_plugin", "jax_rocm7_pjrt")}
    assert got == dict.fromkeys(got, JAX)
    assert dists["rocm"] == dists["rocm-sdk-core"] == dists["rocm-sdk-libraries"] == "7.14.0"
    assert sorted(n for n in dists if "-device-" in n) == ["rocm-sdk-device-gfx90a"]
    tested = host.run("/opt/rocmlab/venvs/jax/bin/rocm-sdk test")
    assert (tested.rc, tested.stdout.split()[-1:]) == (0, ["OK"]), tested.stdout + tested.stderr


def test_the_record_says_what_jax_has(host):
    record = json.loads(host.file(FRAMEWORK.result).content_string)
    assert {
        k: record[k]
        for k in ("source", "jax_version", "jax_requested", "plugin_version", "build", "devices")
    } == {
        "source": "wheels",
        "jax_version": JAX,
        "jax_requested": JAX,
        "plugin_version": JAX,
        # The plugin is there (a stand-in: molecule.yml); the container has no /dev/kfd, so
        # jax lists its CPU only and nothing asks it for a ROCm device.
        "build": "rocm",
        "devices": ["cpu"],
    }
    assert (record["gfx_targets"], record["rocm_wheels_version"]) == (["gfx90a"], "7.14.0")
