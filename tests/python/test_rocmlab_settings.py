"""Unit tests for plugins/modules/rocmlab_settings.py (role rocmlab): the one check every role
runs on the inventory values that reach a file, a command line or a path, before anything on a
host changes.

Each class of hostile input has a table; every value is refused with a sentence naming the
variable, the value and what is accepted. The pip option parser is checked against pip's own
parser (the pip of this venv).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "rocmlab_settings", REPO / "plugins" / "modules" / "rocmlab_settings.py"
)
assert _spec is not None and _spec.loader is not None
settings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(settings)


def problems(kind: str, value: object, **options: object) -> list[str]:
    return settings.problems_of({"name": "some_var", "value": value, "kind": kind, **options})


def assert_refused(kind: str, value: object, *fragments: str, **options: object) -> str:
    found = problems(kind, value, **options)
    assert found, f"{kind} {value!r} was accepted"
    text = " ".join(found)
    assert text.startswith("some_var"), text
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    return text


# --- Control characters: a newline becomes a line of its own in a file a root shell reads. ---
LINE_BREAKS = ["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\t"]


@pytest.mark.parametrize("char", LINE_BREAKS, ids=[repr(c) for c in LINE_BREAKS])
@pytest.mark.parametrize(
    ("kind", "benign", "options"),
    [
        ("text", "a note", {}),
        ("pattern", "6.4.2", {"pattern": r"[0-9]+\.[0-9]+(\.[0-9]+)?"}),
        ("account", "researcher", {}),
        ("group", "render", {}),
        ("package", "rocm-hip-sdk", {}),
        ("dist", "tensorflow-rocm", {}),
        ("dir", "/opt/rocmlab/venvs/pytorch", {}),
        ("url", "https://repo.radeon.com", {}),
    ],
)
def test_control_characters_are_refused_in_every_kind(kind, benign, options, char):
    assert problems(kind, benign, **options) == []
    for hostile in (benign + char, benign + char + "LD_PRELOAD=/tmp/x.so", char + benign):
        assert_refused(kind, hostile, "some_var", **options)


def test_a_trailing_newline_is_refused_where_a_dollar_anchor_would_accept_it():
    # re.match('^...$') accepts "6.4.2\n": $ also matches before a trailing newline.
    text = assert_refused("pattern", "6.4.2\n", '"6.4.2\\n"', pattern=r"[0-9.]+")
    assert "control character" in text


# --- Types: a string where a list is meant is split into characters by a loop. ---
@pytest.mark.parametrize(
    ("kind", "value", "fragment"),
    [
        ("list", "--epochs 1", "is a string, not a list"),
        ("list", {"a": 1}, "is a mapping, not a list"),
        ("pip_args", "--proxy=http://p:3128", "is a string, not a list of strings"),
        ("text", ["a"], "is a list, not a string"),
        ("text", 6.4, "is a number, not a string"),
        ("bool", "yes", "is a string"),
        ("int", "600\nPackage: *", "is not a whole number"),
        ("int", True, "is a boolean"),
        ("dict", ["gfx1031"], "is a list, not a mapping"),
    ],
)
def test_values_of_the_wrong_type_are_refused(kind, value, fragment):
    assert_refused(kind, value, fragment)


def test_list_elements_are_checked_each_with_their_index():
    text = assert_refused("list", ["--epochs", "1\n2"], "some_var[1]", element={"kind": "text"})
    assert "some_var[0]" not in text


def test_int_range():
    assert problems("int", 600, min=501, max=1000) == []
    assert problems("int", "600", min=501, max=1000) == []
    assert_refused("int", 400, "out of range", "Use 501 to 1000", min=501, max=1000)


# --- Numbers with bounds (a failure budget, a fraction) and Ansible's serial batches. ---
def test_number_bounds():
    assert problems("number", 0.7, above=0, max=1) == []
    assert problems("number", 1, above=0, max=1) == []
    assert problems("number", "0.25", above=0, max=1) == []
    assert problems("number", 0, min=0, max=100) == []
    assert problems("number", 100, min=0, max=100) == []
    assert_refused("number", 0, "out of range", "above 0", above=0, max=1)
    assert_refused("number", 1.5, "out of range", "up to 1", above=0, max=1)
    assert_refused("number", -1, "out of range", "from 0", min=0, max=100)
    assert_refused("number", 100.5, "out of range", min=0, max=100)
    assert_refused("number", float("nan"), "finite", above=0, max=1)
    assert_refused("number", "0.7x", "not a number", above=0, max=1)
    assert_refused("number", True, "boolean", above=0, max=1)
    assert_refused("number", [0.7], "list", above=0, max=1)


@pytest.mark.parametrize("value", [1, 3, "2", "25%", "100%", "1%", [1, "25%"], [1, 5, "50%"]])
def test_batches_ansible_accepts_are_accepted(value):
    assert problems("batches", value) == []


@pytest.mark.parametrize(
    ("value", "where", "fragment"),
    [
        (0, "some_var: 0", "no host would ever be provisioned"),
        (-2, "some_var: -2", "-2 hosts"),
        ("0%", 'some_var: "0%"', "0% of the hosts"),
        ("-10%", 'some_var: "-10%"', "-10% of the hosts"),
        ("150%", 'some_var: "150%"', "over 100%"),
        ([1, 0], "some_var[1]: 0", "no host would ever"),
        ([1, "101%"], 'some_var[1]: "101%"', "over 100%"),
        ([], "some_var: []", "empty list"),
        ("12.5%", 'some_var: "12.5%"', "whole percentage"),
        (2.5, "some_var: 2.5", "whole number"),
        (True, "some_var: true", "boolean"),
        ({"size": 1}, "some_var: {", "mapping"),
        ("25%\n", "some_var:", "control character"),
        (" 25%", "some_var:", "whole percentage"),
    ],
)
def test_batches_that_provision_nothing_or_too_much_are_refused(value, where, fragment):
    text = assert_refused("batches", value, where, fragment)
    assert "a percentage from 1% to 100%" in text


# --- Paths: absolute, normalised, plain characters, never a system directory or its parent. ---
@pytest.mark.parametrize(
    "value",
    [
        "/",
        "/etc",
        "/usr",
        "/bin",
        "/lib",
        "/lib64",
        "/var",
        "/boot",
        "/proc",
        "/sys",
        "/dev",
        "/root",
        "/home",
        "/opt",
        "/usr/local",
        "/usr/lib",
        "/var/lib",
        "/etc/apt",
        "/etc/profile.d",
    ],
)
def test_system_directories_and_their_parents_are_refused(value):
    assert_refused("dir", value, "system directory")
    assert_refused("file", value, "system directory")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("opt/venv", "not an absolute path"),
        ("/opt/rocmlab/../../etc", "normalised"),
        ("/opt/rocmlab/./venv", "normalised"),
        ("//opt/venv", "normalised"),
        ("/opt/venv/", "normalised"),
        ("/opt/$(reboot)", "shell characters"),
        ("/opt/`id`", "shell characters"),
        ("/opt/my venv", "spaces"),
        ("/opt/a;b", "shell characters"),
        ("/opt/a'b", "shell characters"),
        ("/proc/self/root", "under /proc"),
        ("/sys/kernel/x", "under /sys"),
        ("/dev/shm/venv", "under /dev"),
        ("/boot/venv", "under /boot"),
    ],
)
def test_paths_that_are_not_plain_absolute_normalised_paths_are_refused(value, fragment):
    assert_refused("dir", value, fragment)


def test_ordinary_paths_are_accepted():
    for value in ("/opt/rocmlab/venvs/pytorch", "/srv/ml/venv-2.9", "/home/alice/.venvs/torch"):
        assert problems("dir", value) == []
    # Reading a system path is fine: only what rocmlab creates or writes is confined.
    assert problems("path", "/sys") == []
    assert problems("path", "/usr/bin/python3") == []


def test_keyrings_must_lie_in_the_keyring_directories_and_never_in_trusted_gpg_d():
    options = {"under": ["/etc/apt/keyrings", "/usr/share/keyrings"], "suffix": ".gpg"}
    assert problems("file", "/etc/apt/keyrings/rocm.gpg", **options) == []
    for hostile in ("/etc/apt/trusted.gpg.d/rocm.gpg", "/etc/apt/trusted.gpg", "/tmp/rocm.gpg"):
        assert_refused("file", hostile, "must lie in /etc/apt/keyrings or", **options)
    assert_refused("file", "/etc/apt/keyrings/rocm.key", "must end in .gpg", **options)


# --- URLs: a whole URL of an accepted scheme, nothing appended. ---
@pytest.mark.parametrize(
    "value",
    [
        "https://repo.radeon.com",
        "https://repo.radeon.com/rocm/apt/6.4.2",
        "http://rocmlab-amd-mirror",
        "http://10.0.0.5:8080/whl/rocm6.4/",
        "https://user:secret@mirror.lab/pypi/simple",
        "http://[::1]:3142/",
    ],
)
def test_urls_are_accepted(value):
    assert problems("url", value) == []


@pytest.mark.parametrize(
    ("value", "options"),
    [
        ("ftp://mirror", {}),
        ("file:///srv/mirror", {}),
        ("https://", {}),
        ("https://repo.radeon.com stable main", {}),
        ('https://repo.radeon.com"', {}),
        ("https://repo.radeon.com/`id`", {}),
        ("https://-bad-.host/", {}),
        ("https://host:99999/", {}),
        ("javascript://x", {"schemes": ["https", "http", "file"]}),
        ("file://host/srv", {"schemes": ["file"]}),
    ],
)
def test_urls_with_anything_else_are_refused(value, options):
    assert_refused("url", value, "some_var", **options)


def test_credentials_in_urls_are_masked_in_messages():
    text = assert_refused("url", "https://user:hunter2@mirror/ x", "***@")
    assert "hunter2" not in text


def test_file_urls_when_asked_for():
    assert problems("url", "file:///srv/mnist", schemes=["https", "http", "file"]) == []


# --- Names ---
@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("account", "Alice"),
        ("account", "-rf"),
        ("account", "a" * 40),
        ("account", "alice;reboot"),
        ("group", "Render Group"),
        ("group", "render$"),
        ("package", "rocm hip"),
        ("package", "-o APT::x"),
        ("dist", "tensorflow-rocm==2.14"),
        ("dist", "-e"),
    ],
)
def test_bad_names_are_refused(kind, value):
    assert_refused(kind, value, "is not a", "Use ")


def test_mappings_check_keys_and_fields():
    spec = {
        "keys": {"kind": "pattern", "pattern": "gfx[0-9a-f]{3,4}", "accepted": "gfx targets"},
        "fields": {"override": {"kind": "text"}, "usable": {"kind": "bool"}},
    }
    assert problems("dict", {"gfx1101": {"override": "", "usable": True}}, **spec) == []
    assert_refused("dict", {"gfx1101\nX=1": {}}, "some_var key", "control character", **spec)
    assert_refused("dict", {"navi32": {}}, "some_var key", "gfx targets", **spec)
    assert_refused("dict", {"gfx1101": {"note\n": "x"}}, "is not a field", **spec)
    assert_refused("dict", {"gfx1101": {"override": "x\ny"}}, "some_var.gfx1101.override", **spec)
    assert_refused("dict", {"gfx1101": "10.3.0"}, "not a mapping of override, usable", **spec)


# --- pip options, read the way pip reads them ---
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--extra-index-url", "https://pypi.org/simple"], "--extra-index-url"),
        (["--extra-index=https://pypi.org/simple"], "--extra-index-url"),
        (["--extra", "https://pypi.org/simple"], "--extra-index-url"),
        (["--index", "https://pypi.org/simple"], "--index-url"),
        (["--index-u=https://pypi.org/simple"], "--index-url"),
        (["-ihttps://pypi.org/simple"], "--index-url"),
        (["-qi", "https://pypi.org/simple"], "--index-url"),
        (["--pypi-url", "https://pypi.org/simple"], "--index-url"),
        (["--find", "https://x/"], "--find-links"),
        (["-fhttps://x/"], "--find-links"),
        (["--no-ind"], "--no-index"),
        (["--target", "/etc"], "--target"),
        (["--pre"], "--pre"),
        (["-r", "/tmp/req.txt"], "--requirement"),
        (["--proxy", "http://p:3128", "--root=/"], "--root"),
    ],
)
def test_pip_options_are_read_as_pip_reads_them_and_refused_unless_allowed(args, option):
    text = assert_refused("pip_args", args, f"found: {option}, as pip reads")
    assert "--proxy" in text  # what is accepted


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--proxy=http://p:3128", "torch==2.5.0+cu121"], "is not an option (a requirement)"),
        (["--no-such-option"], "no such option"),
        (["--no"], "ambiguous option"),
        (["--proxy"], "requires 1 argument"),
    ],
)
def test_what_pip_itself_would_refuse_is_refused(args, fragment):
    assert_refused("pip_args", args, fragment)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--proxy", "http://user:pw@proxy.lab:3128"],
        [
            "--proxy=http://proxy.lab:3128",
            "--trusted-host",
            "mirror.lab",
            "--cert",
            "/etc/ssl/ca.pem",
        ],
        ["--timeout", "120", "--retries", "10", "--no-cache-dir", "-q"],
        ["--use-feature=truststore", "--prefer-binary"],
        ["--prox", "http://proxy.lab:3128"],  # an abbreviation of an allowed option
    ],
)
def test_network_options_are_accepted(args):
    assert problems("pip_args", args) == []


def test_the_option_table_is_pips_own():
    from pip._internal.commands import create_command

    parser = create_command("install").parser
    theirs = {
        tuple(o._short_opts + o._long_opts): o.takes_value() for o in parser._get_all_options()
    }
    assert dict(settings.PIP_INSTALL_OPTIONS) == theirs


def test_our_parse_matches_pips_parse_of_abbreviations():
    from pip._internal.commands import create_command

    for args, dest in (
        (["--extra-ind=https://x/simple"], "extra_index_urls"),
        (["--ind", "https://x/simple"], "index_url"),
        (["-ihttps://x/simple"], "index_url"),
        (["--fin", "https://x/"], "find_links"),
    ):
        options, _ = create_command("install").parser.parse_args(args)
        assert getattr(options, dest), (args, dest)
        assert settings.parse_pip_args(args)


def test_every_problem_of_every_setting_is_reported_at_once():
    found = [
        problem
        for spec in (
            {"name": "a_version", "value": "6.x", "kind": "pattern", "pattern": "[0-9.]+"},
            {"name": "a_venv", "value": "/etc", "kind": "dir"},
            {"name": "a_url", "value": "ftp://x", "kind": "url"},
        )
        for problem in settings.problems_of(spec)
    ]
    assert [p.split(":")[0] for p in found] == ["a_version", "a_venv", "a_url"]


# --- Arguments for rocmlab's own argparse commands: the options the role sets are refused. ---
SMOKE_RESERVED = {"reserved": ["--data", "--dataset", "--json", "--doctor-json"]}


@pytest.mark.parametrize(
    "args", [["--json", "/etc/x"], ["--js=/etc/x"], ["--epochs", "1", "--data", "/"]]
)
def test_arguments_the_role_sets_are_refused_with_their_abbreviations(args):
    assert_refused("cli_args", args, "which the role sets itself", **SMOKE_RESERVED)


def test_other_arguments_pass_and_strings_are_not_lists():
    assert problems("cli_args", ["--epochs", "1", "--optimizer", "sgd"], **SMOKE_RESERVED) == []
    assert_refused("cli_args", "--epochs 1", "is a string, not a list", **SMOKE_RESERVED)
    assert_refused("cli_args", ["--epochs", "1\n"], "control character", **SMOKE_RESERVED)
