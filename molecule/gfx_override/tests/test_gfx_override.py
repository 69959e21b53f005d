"""What gfx_override left on each fixture machine (molecule/gfx_override/molecule.yml).

Each container read one copied sysfs tree; the swap host's card was replaced by side_effect.yml.
"""

from __future__ import annotations

import json

import pytest

PROFILE = "/etc/profile.d/rocmlab-gfx.sh"
ENVIRONMENT_D = "/etc/environment.d/90-rocmlab-gfx.conf"
FACTS = "/root/gfx_override_facts.json"

# host -> (variables written, gfx targets detected, detection source, has a usable GPU)
EXPECTED = {
    "rocmlab-gfx-rx6700xt": ({"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, ["gfx1031"], "kfd", True),
    "rocmlab-gfx-rx6700xt-nokfd": (
        {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"},
        ["gfx1031"],
        "pci",
        True,
    ),
    "rocmlab-gfx-780m": ({"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}, ["gfx1103"], "kfd", True),
    "rocmlab-gfx-raphael": ({"ROCR_VISIBLE_DEVICES": "0"}, ["gfx1100", "gfx1036"], "kfd", True),
    "rocmlab-gfx-nogpu": ({}, [], "none", False),
    # The RX 6700 XT (10.3.0) was swapped for an RX 6800, which needs nothing.
    "rocmlab-gfx-swap": ({}, ["gfx1030"], "kfd", True),
}

# Text each written file must explain its variables with: the card and its gfx target.
WHY = {
    "rocmlab-gfx-rx6700xt": ["Navi 22 [Radeon RX 6700/6700 XT/6750 XT] (gfx1031)"],
    "rocmlab-gfx-rx6700xt-nokfd": ["0000:03:00.0 Navi 22", "(gfx1031)", "known by its PCI id"],
    "rocmlab-gfx-780m": ["Phoenix1 [Radeon 780M/760M] (gfx1103)"],
    "rocmlab-gfx-raphael": [
        "hides 0000:0e:00.0 Raphael/Granite Ridge graphics (gfx1036)",
        "integrated GPU beside a discrete one",
    ],
}


@pytest.fixture
def expected(host):
    return EXPECTED[host.backend.get_hostname()]


def settings(text: str) -> dict[str, str]:
    """KEY=value lines of a file, comments and export keywords aside."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        found[key] = value
    return found


@pytest.mark.parametrize("path", [PROFILE, ENVIRONMENT_D])
def test_files_exist_only_when_a_variable_is_needed(host, expected, path):
    assert host.file(path).exists == bool(expected[0])


@pytest.mark.parametrize("path", [PROFILE, ENVIRONMENT_D])
def test_written_files_are_root_owned_and_world_readable(host, expected, path):
    if not expected[0]:
        pytest.skip("this machine needs no variables")
    written = host.file(path)
    assert (written.user, written.group, written.mode) == ("root", "root", 0o644)


@pytest.mark.parametrize(("path", "prefix"), [(PROFILE, "export "), (ENVIRONMENT_D, "")])
def test_written_files_hold_exactly_the_needed_variables(host, expected, path, prefix):
    if not expected[0]:
        pytest.skip("this machine needs no variables")
    text = host.file(path).content_string
    assert settings(text) == expected[0]
    for key, value in expected[0].items():
        assert f"\n{prefix}{key}={value}\n" in text


@pytest.mark.parametrize("path", [PROFILE, ENVIRONMENT_D])
def test_written_files_say_who_manages_them_and_why(host, expected, path):
    if not expected[0]:
        pytest.skip("this machine needs no variables")
    text = host.file(path).content_string
    first = text.splitlines()[0]
    assert first.startswith("# Ansible managed")
    assert "Managed by rocmlab's gfx_override role" in first
    for key in expected[0]:
        assert f"\n# {key}: " in text
    for words in WHY[host.backend.get_hostname()]:
        assert words in text


def test_a_login_shell_gets_the_variables(host, expected):
    names = ["HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES"]
    script = "; ".join(f'echo "{name}=${{{name}-unset}}"' for name in names)
    out = host.check_output(f"env -i PATH=/usr/bin:/bin bash -lc '{script}'")
    got = dict(line.split("=", 1) for line in out.splitlines())
    assert got == {name: expected[0].get(name, "unset") for name in names}


def test_facts_describe_the_gpus(host, expected):
    facts = json.loads(host.file(FACTS).content_string)
    assert facts["gfx_override_environment"] == expected[0]
    assert [gpu["gfx_target"] for gpu in facts["gfx_override_gpus"]] == expected[1]
    assert facts["gfx_override_detection_source"] == expected[2]
    assert facts["gfx_override_has_gpu"] is expected[3]
