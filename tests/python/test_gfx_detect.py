"""Unit tests for plugins/modules/gfx_detect.py (role gfx_override), on the fixture sysfs trees.

The module is imported by path (it is an Ansible module, not a package module), and fed the
role's real tables from roles/gfx_override/vars/main.yml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from ansible_modules import load_module, run_module

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "gfx_override"
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
NODES = ("class", "kfd", "kfd", "topology", "nodes")

gfx_detect = load_module("gfx_detect")

VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
TARGETS = VARS["__gfx_override_targets"]
PCI_IDS = VARS["__gfx_override_pci_ids"]

# `lspci -nn | grep -iE '(nvidia|amd)'` of an RX 6700 XT + RTX 3060 Ti machine, as posted on
# sweetbbak.github.io (GPU passthrough notes); the one line the blog wrapped is joined again.
LSPCI_RX6700XT = """\
01:00.0 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 10 XL Upstream Port of PCI Express Switch [1002:1478] (rev df)
02:00.0 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 10 XL Downstream Port of PCI Express Switch [1002:1479]
03:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 22 [Radeon RX 6700/6700 XT/6750 XT / 6800M/6850M XT] [1002:73df] (rev df)
03:00.1 Audio device [0403]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 21/23 HDMI/DP Audio Controller [1002:ab28]
0a:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA104 [GeForce RTX 3060 Ti Lite Hash Rate] [10de:2489] (rev a1)
0a:00.1 Audio device [0403]: NVIDIA Corporation GA104 High Definition Audio Controller [10de:228b] (rev a1)
"""  # noqa: E501


def detect(root: Path, lspci_text: str | None = None, targets: dict | None = None):
    warnings: list[str] = []
    found = gfx_detect.detect(str(root), targets or TARGETS, PCI_IDS, lspci_text, warnings)
    return found, warnings


def plan_for(root: Path, mode: str = "auto", version: str = "", hide_igpu: bool = True):
    found, _ = detect(root)
    return gfx_detect.plan(found["gpus"], mode, version, hide_igpu)


def node_props(tree: str, node: int) -> str:
    return FIXTURES.joinpath(tree, *NODES, str(node), "properties").read_text()


def make_tree(tmp_path: Path, nodes: dict[int, str]) -> Path:
    """A KFD topology holding the given properties texts (no PCI bus)."""
    for node, text in nodes.items():
        path = tmp_path.joinpath(*NODES, str(node))
        path.mkdir(parents=True)
        (path / "properties").write_text(text)
    return tmp_path


def with_line(text: str, name: str, value: int) -> str:
    """A properties text with one property's value replaced."""
    return "".join(
        f"{name} {value}\n" if line.split()[0] == name else line + "\n"
        for line in text.splitlines()
    )


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    ("value", "gfx"),
    [
        (100300, "gfx1030"),
        (100301, "gfx1031"),
        (100306, "gfx1036"),
        (110000, "gfx1100"),
        (110002, "gfx1102"),
        (110003, "gfx1103"),
        (90010, "gfx90a"),
        (90012, "gfx90c"),
        (90400, "gfx940"),
        (90402, "gfx942"),
        (120001, "gfx1201"),
        (0, ""),
        (110099, ""),  # a stepping of 99 has no single hex digit: not a real target
    ],
)
def test_gfx_target_version_decodes_with_hex_minor_and_stepping(value, gfx):
    assert gfx_detect.decode_gfx_target_version(value) == gfx


@pytest.mark.parametrize(
    ("gfx", "version"),
    [("gfx1030", "10.3.0"), ("gfx1100", "11.0.0"), ("gfx90a", "9.0.10"), ("gfx942", "9.4.2")],
)
def test_native_version_of_a_target(gfx, version):
    assert gfx_detect.gfx_native_version(gfx) == version


@pytest.mark.parametrize("value", ["10.3.0", "11.0.0", "9.0.10", "63.255.255", "0.0.0"])
def test_override_accepts_major_minor_stepping(value):
    assert gfx_detect.valid_override(value)


@pytest.mark.parametrize(
    "value",
    ["10.3", "10.3.0.1", "v10.3.0", "gfx1030", "64.0.0", "10.256.0", "10.3.x", "", " 10.3.0"],
)
def test_override_rejects_anything_else(value):
    assert not gfx_detect.valid_override(value)


@pytest.mark.parametrize(
    ("domain", "location_id", "address"),
    [
        (0, 3072, "0000:0c:00.0"),
        (0, 34304, "0000:86:00.0"),
        (0, 8, "0000:00:01.0"),  # the Bristol Ridge APU; its dmesg says 0000:00:01.0
        (0, 0x050B, "0000:05:01.3"),
        (1, 0x7500, "0001:75:00.0"),
    ],
)
def test_location_id_decodes_to_a_pci_address(domain, location_id, address):
    assert gfx_detect.pci_address(domain, location_id) == address


def test_properties_parse_the_verbatim_7900xtx_dump():
    props = gfx_detect.parse_properties(node_props("rx7900xtx", 1))
    assert props["gfx_target_version"] == 110000
    assert props["device_id"] == 0x744C
    assert props["unique_id"] == 11673270660693242239
    assert len(props) == 38


def test_properties_keep_string_values_and_skip_odd_lines():
    props = gfx_detect.parse_properties("simd_count 4\ngpu_family gfx1100\n\nbroken line here\n")
    assert props == {"simd_count": 4, "gpu_family": "gfx1100"}


# ---------------------------------------------------------------- the fixture machines

GPU_FIELDS = ("pci_address", "gfx_target", "igpu", "usable", "override", "node_id", "rocr_index")
MACHINES = {
    "rx6700xt": ("kfd", [("0000:0c:00.0", "gfx1031", False, True, "10.3.0", 1, 0)]),
    "rx6700xt-nokfd": ("pci", [("0000:03:00.0", "gfx1031", False, True, "10.3.0", None, 0)]),
    "rx6800": ("kfd", [("0000:03:00.0", "gfx1030", False, True, "", 1, 0)]),
    "rx7900xtx": ("kfd", [("0000:86:00.0", "gfx1100", False, True, "", 1, 0)]),
    "rx7600": ("kfd", [("0000:03:00.0", "gfx1102", False, True, "11.0.0", 1, 0)]),
    "laptop-780m": ("kfd", [("0000:c6:00.0", "gfx1103", True, True, "11.0.0", 1, 0)]),
    "desktop-7900xtx-raphael": (
        "kfd",
        [
            ("0000:86:00.0", "gfx1100", False, True, "", 1, 0),
            ("0000:0e:00.0", "gfx1036", True, False, "", 2, 1),
        ],
    ),
    "mi210": (
        "kfd",
        [
            ("0000:01:00.0", "gfx90a", False, True, "", 1, 0),
            ("0000:02:00.0", "gfx90a", False, True, "", 2, 1),
        ],
    ),
    "apu-bristol-ridge": ("kfd", [("0000:00:01.0", "gfx801", True, False, "", 0, 0)]),
    "no-amd-gpu": ("none", []),
}


@pytest.mark.parametrize(("tree", "expected"), MACHINES.items(), ids=list(MACHINES))
def test_each_machine_is_detected(tree, expected):
    source, gpus = expected
    found, warnings = detect(FIXTURES / tree)
    assert found["source"] == source
    assert [tuple(gpu[field] for field in GPU_FIELDS) for gpu in found["gpus"]] == gpus
    assert warnings == []


ENVIRONMENTS = {
    "rx6700xt": {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"},
    "rx6700xt-nokfd": {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"},
    "rx6800": {},
    "rx7900xtx": {},
    "rx7600": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
    "laptop-780m": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
    "desktop-7900xtx-raphael": {"ROCR_VISIBLE_DEVICES": "0"},
    "mi210": {},
    "apu-bristol-ridge": {},
    "no-amd-gpu": {},
}


@pytest.mark.parametrize(("tree", "environment"), ENVIRONMENTS.items(), ids=list(ENVIRONMENTS))
def test_each_machine_gets_only_the_variables_it_needs(tree, environment):
    planned = plan_for(FIXTURES / tree)
    assert planned["conflict"] == ""
    assert planned["environment"] == environment
    assert sorted(planned["notes"]) == sorted(environment)


def test_the_override_note_names_the_card_and_its_target():
    notes = plan_for(FIXTURES / "rx6700xt")["notes"]["HSA_OVERRIDE_GFX_VERSION"]
    assert notes == [
        "0000:0c:00.0 Navi 22 [Radeon RX 6700/6700 XT/6750 XT] (gfx1031): "
        "ROCm ships no gfx1031 code objects; Navi 22 runs gfx1030's"
    ]


def test_an_override_found_without_kfd_says_so():
    notes = plan_for(FIXTURES / "rx6700xt-nokfd")["notes"]["HSA_OVERRIDE_GFX_VERSION"]
    assert notes[0].endswith("(known by its PCI id: amdgpu was not loaded)")


def test_the_hidden_igpu_is_named_with_the_reason():
    notes = plan_for(FIXTURES / "desktop-7900xtx-raphael")["notes"]["ROCR_VISIBLE_DEVICES"]
    assert notes[0].startswith("ROCm sees only GPU 0 ")
    assert notes[1] == (
        "  hides 0000:0e:00.0 Raphael/Granite Ridge graphics (gfx1036): Raphael/Granite Ridge "
        "2-CU display graphics, no compute target; an integrated GPU beside a discrete one can "
        "crash the runtime"
    )


# ---------------------------------------------------------------- iGPU rule


def test_igpu_by_target_when_the_node_looks_discrete():
    """Modern kernels give an APU's graphics its own node with cpu_cores_count 0."""
    props = gfx_detect.parse_properties(node_props("laptop-780m", 1))
    assert props["cpu_cores_count"] == 0
    found, _ = detect(FIXTURES / "laptop-780m")
    assert found["gpus"][0]["igpu"] is True


def test_igpu_by_a_combined_cpu_and_gpu_node_even_if_the_table_says_otherwise():
    targets = {**TARGETS, "gfx801": {**TARGETS["gfx801"], "igpu": False}}
    found, _ = detect(FIXTURES / "apu-bristol-ridge", targets=targets)
    assert found["gpus"][0]["igpu"] is True


def test_a_node_without_gfx_target_version_takes_its_target_from_the_pci_id():
    assert "gfx_target_version" not in node_props("apu-bristol-ridge", 0)
    found, _ = detect(FIXTURES / "apu-bristol-ridge")
    assert found["gpus"][0]["gfx_target"] == "gfx801"


def test_igpu_without_kfd_comes_from_the_pci_table(tmp_path):
    shutil.copytree(FIXTURES / "laptop-780m" / "bus", tmp_path / "bus")
    found, _ = detect(tmp_path)
    assert found["source"] == "pci"
    assert [(gpu["gfx_target"], gpu["igpu"]) for gpu in found["gpus"]] == [("gfx1103", True)]


def test_igpu_only_laptop_keeps_its_igpu_visible():
    planned = plan_for(FIXTURES / "laptop-780m")
    assert "ROCR_VISIBLE_DEVICES" not in planned["environment"]
    assert planned["visible"] == ["0000:c6:00.0"]


def test_hiding_igpus_can_be_turned_off():
    planned = plan_for(FIXTURES / "desktop-7900xtx-raphael", hide_igpu=False)
    # The Raphael iGPU is no compute target either way: it stays hidden as unusable.
    assert planned["environment"] == {"ROCR_VISIBLE_DEVICES": "0"}
    assert "no compute target" in planned["notes"]["ROCR_VISIBLE_DEVICES"][1]


def test_a_usable_igpu_beside_a_dgpu_is_hidden_only_when_asked(tmp_path):
    root = make_tree(
        tmp_path,
        {
            0: node_props("rx7900xtx", 0),
            1: node_props("rx7900xtx", 1),
            2: node_props("laptop-780m", 1),
        },
    )
    found, _ = detect(root)
    hidden = gfx_detect.plan(found["gpus"], "auto", "", True)
    shown = gfx_detect.plan(found["gpus"], "auto", "", False)
    assert hidden["environment"] == {"ROCR_VISIBLE_DEVICES": "0"}
    # Both visible: the 7900 XTX runs 11.0.0 natively, the 780M needs 11.0.0: one value fits.
    assert shown["environment"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}


# ---------------------------------------------------------------- topology edge cases


def test_cpu_nodes_are_skipped_and_nodes_sort_numerically(tmp_path):
    cpu, mi = node_props("mi210", 0), node_props("mi210", 1)
    root = make_tree(
        tmp_path,
        {
            0: cpu,
            1: cpu,
            2: mi,
            10: with_line(mi, "location_id", 0xA00),
            3: with_line(mi, "location_id", 0x300),
        },
    )
    found, _ = detect(root)
    assert [(gpu["node_id"], gpu["rocr_index"]) for gpu in found["gpus"]] == [
        (2, 0),
        (3, 1),
        (10, 2),
    ]


def test_non_amd_nodes_are_skipped(tmp_path):
    nvidia = with_line(node_props("rx6800", 1), "vendor_id", 0x10DE)
    root = make_tree(tmp_path, {0: node_props("rx6800", 0), 1: nvidia, 2: node_props("rx6800", 1)})
    found, _ = detect(root)
    assert [(gpu["node_id"], gpu["rocr_index"]) for gpu in found["gpus"]] == [(2, 0)]


def test_an_unreadable_node_is_reported_not_fatal(tmp_path):
    root = make_tree(tmp_path, {0: node_props("rx6800", 0), 2: node_props("rx6800", 1)})
    root.joinpath(*NODES, "1", "properties").mkdir(parents=True)  # reading it raises OSError
    found, warnings = detect(root)
    assert [gpu["node_id"] for gpu in found["gpus"]] == [2]
    assert len(warnings) == 1 and warnings[0].startswith("KFD node 1: cannot read")


def test_an_unknown_kfd_target_is_kept_as_native_with_a_warning(tmp_path):
    strix = with_line(node_props("laptop-780m", 1), "gfx_target_version", 110501)
    root = make_tree(
        tmp_path, {0: node_props("laptop-780m", 0), 1: with_line(strix, "device_id", 0x1586)}
    )
    found, warnings = detect(root)
    gpu = found["gpus"][0]
    assert (gpu["gfx_target"], gpu["known"], gpu["usable"], gpu["override"]) == (
        "gfx1151",
        False,
        True,
        "",
    )
    assert "gfx1151" in warnings[0] and "gfx_override_targets_extra" in warnings[0]


def test_kfd_without_gpu_nodes_falls_back_to_pci(tmp_path):
    shutil.copytree(FIXTURES / "rx6700xt" / "bus", tmp_path / "bus")
    make_tree(tmp_path, {0: node_props("rx6700xt", 0)})
    found, _ = detect(tmp_path)
    assert (found["source"], found["kfd_present"]) == ("pci", True)
    assert [gpu["gfx_target"] for gpu in found["gpus"]] == ["gfx1031"]


# ---------------------------------------------------------------- PCI and lspci


def test_pci_skips_bridges_audio_and_other_vendors():
    found, _ = detect(FIXTURES / "rx6700xt-nokfd")
    assert [gpu["pci_address"] for gpu in found["gpus"]] == ["0000:03:00.0"]
    assert found["kfd_present"] is False


def test_an_unknown_amd_pci_device_is_ignored_with_a_warning(tmp_path):
    shutil.copytree(FIXTURES / "rx6700xt-nokfd" / "bus", tmp_path / "bus")
    tmp_path.joinpath("bus", "pci", "devices", "0000:03:00.0", "device").write_text("0x73a5\n")
    found, warnings = detect(tmp_path)
    assert found == {"source": "none", "kfd_present": False, "gpus": []}
    assert "1002:73a5" in warnings[0]


def test_lspci_parser_finds_the_gpu_in_captured_output():
    assert gfx_detect.parse_lspci(LSPCI_RX6700XT) == [
        {"address": "0000:03:00.0", "class": "0300", "device": "73df"}
    ]


def test_lspci_parser_reads_domains_and_instinct_classes():
    text = (
        "0000:01:00.0 Display controller [0380]: Advanced Micro Devices, Inc. [AMD/ATI] "
        "Aldebaran/MI200 [Instinct MI210] [1002:740f] (rev 02)\n"
        "0001:c1:00.0 Processing accelerators [1200]: Advanced Micro Devices, Inc. [AMD/ATI] "
        "Aqua Vanjaram [Instinct MI300X] [1002:74a1]\n"
    )
    assert [entry["address"] for entry in gfx_detect.parse_lspci(text)] == [
        "0000:01:00.0",
        "0001:c1:00.0",
    ]


def test_lspci_is_used_only_when_sysfs_has_no_pci_bus(tmp_path):
    found, _ = detect(tmp_path, lspci_text=LSPCI_RX6700XT)
    assert found["source"] == "lspci"
    assert [(gpu["pci_address"], gpu["override"]) for gpu in found["gpus"]] == [
        ("0000:03:00.0", "10.3.0")
    ]
    found, _ = detect(FIXTURES / "no-amd-gpu", lspci_text=LSPCI_RX6700XT)
    assert found["gpus"] == []


# ---------------------------------------------------------------- planning


def test_two_dgpus_needing_different_overrides_are_refused():
    planned = plan_for(FIXTURES / "desktop-7900xtx-rx6700xt")
    assert planned["environment"] == {}
    assert "(gfx1031) needs 10.3.0" in planned["conflict"]
    assert "(gfx1100) needs 11.0.0 (its own ISA)" in planned["conflict"]
    assert "HSA_OVERRIDE_GFX_VERSION_<n>" in planned["conflict"]
    assert "gfx_override_mode: manual" in planned["conflict"]


def test_manual_mode_overrides_the_conflict():
    planned = plan_for(FIXTURES / "desktop-7900xtx-rx6700xt", mode="manual", version="11.0.0")
    assert planned["conflict"] == ""
    assert planned["environment"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}


@pytest.mark.parametrize(
    ("second", "value"),
    [(("rx7600", 1), "11.0.0"), (("rx6700xt", 1), "10.3.0")],
    ids=["7900xtx+7600", "6800+6700xt"],
)
def test_a_native_card_whose_isa_matches_the_override_is_no_conflict(tmp_path, second, value):
    first = ("rx7900xtx", 1) if value == "11.0.0" else ("rx6800", 1)
    other = with_line(node_props(*second), "location_id", 0x2000)
    root = make_tree(tmp_path, {0: node_props("rx6800", 0), 1: node_props(*first), 2: other})
    found, _ = detect(root)
    planned = gfx_detect.plan(found["gpus"], "auto", "", True)
    assert planned["conflict"] == ""
    assert planned["environment"] == {"HSA_OVERRIDE_GFX_VERSION": value}


def test_an_unusable_dgpu_beside_a_usable_one_is_hidden(tmp_path):
    # An RDNA1 card (gfx1010, no reliable override) made from the RX 6800 node for the test.
    rdna1 = with_line(
        with_line(node_props("rx6800", 1), "gfx_target_version", 100100), "location_id", 0x900
    )
    root = make_tree(tmp_path, {0: node_props("rx6800", 0), 1: node_props("rx6800", 1), 2: rdna1})
    found, _ = detect(root)
    planned = gfx_detect.plan(found["gpus"], "auto", "", True)
    assert planned["environment"] == {"ROCR_VISIBLE_DEVICES": "0"}
    assert planned["hidden"] == ["0000:09:00.0"]


def test_off_mode_plans_nothing():
    assert plan_for(FIXTURES / "rx6700xt", mode="off")["environment"] == {}


def test_manual_mode_keeps_igpu_hiding():
    planned = plan_for(FIXTURES / "desktop-7900xtx-raphael", mode="manual", version="11.0.0")
    assert planned["environment"] == {
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
        "ROCR_VISIBLE_DEVICES": "0",
    }


def test_pci_only_numbering_is_flagged_as_a_prediction(tmp_path):
    shutil.copytree(FIXTURES / "desktop-7900xtx-raphael" / "bus", tmp_path / "bus")
    found, _ = detect(tmp_path)
    planned = gfx_detect.plan(found["gpus"], "auto", "", True)
    # PCI order puts the iGPU (0e) before the 7900 XTX (86): the dGPU is index 1 there.
    assert planned["environment"] == {"ROCR_VISIBLE_DEVICES": "1"}
    assert "predicted from PCI order" in planned["notes"]["ROCR_VISIBLE_DEVICES"][-1]


# ---------------------------------------------------------------- the tables


def test_every_target_entry_is_complete_and_every_override_valid():
    for gfx, entry in TARGETS.items():
        assert set(entry) == {"override", "usable", "igpu", "note"}, gfx
        assert entry["override"] == "" or gfx_detect.valid_override(entry["override"]), gfx
        assert gfx_detect.GFX_NAME_RE.match(gfx), gfx


def test_every_pci_id_names_a_known_target():
    for device, entry in PCI_IDS.items():
        assert len(device) == 4 and device == device.lower(), device
        assert entry["gfx"] in TARGETS, device


# ---------------------------------------------------------------- the module itself


def run_gfx_detect(args: dict, capsys, monkeypatch) -> dict:
    return run_module(gfx_detect, args, capsys, monkeypatch)


def test_module_reports_gpus_and_environment_in_check_mode(capsys, monkeypatch):
    result = run_gfx_detect(
        {
            "sysfs_root": str(FIXTURES / "rx7600"),
            "targets": TARGETS,
            "pci_ids": PCI_IDS,
            "_ansible_check_mode": True,
        },
        capsys,
        monkeypatch,
    )
    assert result["changed"] is False
    assert result["environment"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    assert [gpu["gfx_target"] for gpu in result["gpus"]] == ["gfx1102"]
    assert result["summary"][-1] == "Environment to write: HSA_OVERRIDE_GFX_VERSION=11.0.0"


def test_module_refuses_a_malformed_manual_version(capsys, monkeypatch):
    result = run_gfx_detect(
        {
            "sysfs_root": str(FIXTURES / "rx7600"),
            "targets": TARGETS,
            "mode": "manual",
            "version": "10.3",
        },
        capsys,
        monkeypatch,
    )
    assert result["failed"] is True
    assert "'10.3' is not major.minor.stepping" in result["msg"]


# ---------------------------------------------------------------- the installed Core SDK

NATIVE = VARS["__gfx_override_native"]


def core_installed(tmp_path: Path, mode: str = "auto") -> dict:
    """The installed-release probe on a host with cores 7.14 and 10.0 (tests/python/rocm_trees)."""
    from rocm_trees import TWO, tree

    from rocmlab.common import rocm_installed

    return rocm_installed.probe(str(tree(tmp_path, TWO, ("7.14", "10.0"), mode)))


def test_the_installed_core_sdk_ships_the_code_the_legacy_line_needed_an_override_for(tmp_path):
    found, _ = detect(FIXTURES / "rx6700xt")
    gfx_detect.follow_sdk(found["gpus"], core_installed(tmp_path), NATIVE)
    assert found["gpus"][0]["override"] == ""
    assert found["gpus"][0]["note"] == (
        "native code in the installed ROCm 10.0.0 (Core SDK): no override"
    )
    # So the role removes the override it wrote (tasks/remove.yml): nothing is planned.
    assert gfx_detect.plan(found["gpus"], "auto", "", True)["environment"] == {}


def test_on_the_legacy_line_or_without_rocm_the_override_stays(tmp_path):
    for installed in ({"line": "legacy", "release": "6.4.2"}, {}):
        found, _ = detect(FIXTURES / "rx6700xt")
        gfx_detect.follow_sdk(found["gpus"], installed, NATIVE)
        assert found["gpus"][0]["override"] == "10.3.0"
