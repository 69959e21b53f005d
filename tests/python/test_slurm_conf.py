"""Role slurm_health's gres.conf and the check of slurm.conf's Gres line
(plugins/module_utils/slurm_conf.py, filter slurm_gres_plan), over gfx_detect's real output for
the fixture machines and over slurm.conf texts as labs write them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.rocmlab.rocmlab.plugins.filter.slurm_health import slurm_gres_plan
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import slurm_conf
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.slurm_conf import SlurmConfError


def gpu(address: str, minor, gfx: str = "gfx90a") -> dict:
    return {"pci_address": address, "render_minor": minor, "gfx_target": gfx}


TWO = [gpu("0000:03:00.0", 128), gpu("0000:43:00.0", 129)]
VISIBLE = ["0000:03:00.0", "0000:43:00.0"]
CONF = """\
ClusterName=lab
GresTypes=gpu
NodeName=DEFAULT CPUs=2 Gres=gpu:2 State=UNKNOWN
NodeName=gpu[01-04,07] RealMemory=1000   # four of them
NodeName=head Gres=gpu:mi210:1
NodeName=gpu08,gpu09 Gres=gpu:1,nic:1
PartitionName=gpu Nodes=gpu[01-04] Default=YES
"""


def test_explicit_lines_name_each_render_node() -> None:
    text, count = slurm_conf.gres_conf(TWO, VISIBLE, False, "gpu01")
    assert count == 2
    assert text.splitlines()[1:] == [
        "NodeName=gpu01 Name=gpu File=/dev/dri/renderD128  # 0000:03:00.0 gfx90a",
        "NodeName=gpu01 Name=gpu File=/dev/dri/renderD129  # 0000:43:00.0 gfx90a",
    ]


def test_hidden_gpus_are_left_out_and_rsmi_autodetects() -> None:
    assert slurm_conf.gres_conf(TWO, VISIBLE[:1], False, "gpu01")[1] == 1
    text, count = slurm_conf.gres_conf(TWO, VISIBLE, True, "gpu01")
    assert text.splitlines()[-1] == "AutoDetect=rsmi" and count == 2
    assert "File=" not in text


@pytest.mark.parametrize("minor", [None, 0, 127, 256, "128", True])
def test_a_gpu_without_render_node_is_refused_with_the_fix(minor) -> None:
    with pytest.raises(SlurmConfError, match=r"0000:03:00.0 .* has no render node.*rsmi"):
        slurm_conf.gres_conf([gpu("0000:03:00.0", minor)], VISIBLE, False, "gpu01")


def test_a_node_name_that_is_no_slurm_name_is_refused() -> None:
    with pytest.raises(SlurmConfError, match="is not a Slurm NodeName"):
        slurm_conf.gres_conf(TWO, VISIBLE, False, "gpu01\nNodeName=x")


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("a,b[8-10]x,c", ["a", "b8x", "b9x", "b10x", "c"]),  # the low bound sets the width
        ("n[3-1]", []),
        ("n[1-99999999]", []),
        ("n[a-b]", ["n[a-b]"]),
    ],
)
def test_host_lists(expression: str, names: list[str]) -> None:
    assert slurm_conf.hostlist(expression) == names


@pytest.mark.parametrize(
    ("node", "gpus"),
    [("gpu03", 2), ("gpu07", 2), ("head", 1), ("gpu09", 1), ("gpu05", None)],
)
def test_the_node_line_with_defaults_and_types(node: str, gpus) -> None:
    found = slurm_conf.node_gres(CONF, node)
    assert found["gpus"] == gpus and found["defined"] == (gpus is not None)
    assert found["gres_types"]


def test_the_plan_says_when_slurm_conf_disagrees() -> None:
    plan = slurm_gres_plan(TWO[:1], VISIBLE, False, "gpu02", CONF)
    assert plan["count"] == 1
    assert plan["problems"] == [
        "slurm.conf says Gres=gpu:2 for gpu02, but the node has 1 GPU(s) for gres.conf: set "
        "Gres=gpu:1 on its NodeName line (slurmd refuses a node with fewer GPUs than "
        "slurm.conf declares and drains it)"
    ]
    assert slurm_gres_plan(TWO, VISIBLE, False, "gpu02", CONF)["problems"] == []


def test_no_gres_types_and_an_undefined_node() -> None:
    conf = "NodeName=gpu1 Gres=gpu:1\n"
    plan = slurm_gres_plan(TWO[:1], VISIBLE, False, "gpu1", conf)
    assert plan["problems"] == [
        "slurm.conf has no GresTypes=gpu: add it, or Slurm ignores gres.conf"
    ]
    plan = slurm_gres_plan(
        TWO[:1], VISIBLE, False, "gpu2", conf + "Include /etc/slurm/nodes.conf\n"
    )
    assert plan["problems"] == [] and "(its Include files are not read)" in plan["notes"][0]
    plan = slurm_gres_plan(TWO, VISIBLE, False, "gpu1", "GresTypes=gpu\nNodeName=gpu1 CPUs=2\n")
    assert "slurm.conf says no Gres=gpu for gpu1" in plan["problems"][0]


def test_the_filter_turns_a_refusal_into_ansibles_error() -> None:
    with pytest.raises(AnsibleFilterError, match="has no render node"):
        slurm_gres_plan([gpu("0000:03:00.0", None)], VISIBLE, False, "gpu1", "")


# --- slurm.conf is the lab's: its cost follows its size as read, whatever its ranges say. ---
def test_a_host_list_is_asked_for_a_name_without_being_expanded() -> None:
    for expression, names in [
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("a,b[8-10]x,c", ["a", "b8x", "b9x", "b10x", "c"]),
        ("n[0-65535]", ["n0", "n65535"]),
    ]:
        assert all(slurm_conf.in_hostlist(name, expression) for name in names)
    # What hostlist would not name is not in the list: the width of the low bound, the
    # prefix and suffix, an unreadable or oversized list.
    for name, expression in [
        ("gpu1", "gpu[01-03]"),
        ("gpu007", "gpu[01-09]"),
        ("gpu04", "gpu[01-03,07]"),
        ("b9", "b[8-10]x"),
        ("n5", "n[3-1]"),
        ("n5", "n[1-99999999]"),
        ("n5", "n[1-4],n[0-65535]"),
        ("n", "n[0-9]"),
    ]:
        assert not slurm_conf.in_hostlist(name, expression), (name, expression)
        assert name not in slurm_conf.hostlist(expression)


def wide_ranges(size: int, last: str) -> str:
    """SIZE bytes of NodeName lines with a range of 65536 names each, LAST at the end."""
    line = "NodeName=n[0-65535] Gres=gpu:8\n"
    return "GresTypes=gpu\n" + line * ((size - 100) // len(line)) + last


def test_a_megabyte_of_wide_node_ranges_is_read_without_expanding_one(monkeypatch) -> None:
    expanded = []
    real = slurm_conf.hostlist
    monkeypatch.setattr(slurm_conf, "hostlist", lambda e: expanded.extend(real(e)) or [])
    text = wide_ranges(slurm_conf.CONF_LIMIT, "NodeName=gpu[00001-65535] Gres=gpu:2\n")
    assert slurm_conf.conf_bytes(text) <= slurm_conf.CONF_LIMIT
    assert slurm_conf.node_gres(text, "gpu00042")["gpus"] == 2
    assert slurm_conf.node_gres(text, "n65535")["gpus"] == 8
    assert slurm_conf.node_gres(text, "gpu42")["defined"] is False
    assert expanded == []  # no host name was materialised


def test_hostile_lines_cost_one_pass() -> None:
    # One word of a megabyte (no '='), a list of 100,000 names, and a range list that names
    # more than MAX_HOSTS: each read in a pass, each answering as Slurm's lists would.
    word = "x" * (slurm_conf.CONF_LIMIT - 10)
    assert slurm_conf.node_gres(word, "gpu01") == {
        "defined": False, "gpus": None, "gres_types": False, "includes": False,
    }  # fmt: skip
    many = "NodeName=" + ",".join(f"h{n}" for n in range(100_000)) + " Gres=gpu:1\n"
    assert slurm_conf.node_gres(many, "h99999")["gpus"] == 1
    ranges = "NodeName=n[" + ",".join(["0-65535"] * 50_000) + "] Gres=gpu:1\n"
    assert slurm_conf.node_gres(ranges, "n1")["defined"] is False


def test_the_size_limit_is_taken_from_the_bytes_read() -> None:
    # Whatever the host's stat said: the text the controller got is what is measured (bytes
    # that are not UTF-8 reach the filter as surrogates, one byte each).
    text = wide_ranges(slurm_conf.CONF_LIMIT + 200, "NodeName=gpu1 Gres=gpu:1\n")
    with pytest.raises(SlurmConfError, match=r"slurm.conf as read is \d+ bytes, over the 1048576"):
        slurm_conf.node_gres(text, "gpu1")
    with pytest.raises(AnsibleFilterError, match=r"over the 1048576 \(1 MiB\)"):
        slurm_gres_plan(TWO, VISIBLE, False, "gpu1", text)
    assert slurm_conf.conf_bytes("\udcff" * 10) == 10
    assert slurm_conf.conf_bytes("\u00e9") == 2
