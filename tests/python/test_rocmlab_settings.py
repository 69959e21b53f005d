"""Unit tests for plugins/module_utils/settings.py: the checks of every role's settings (declared
in roles/<role>/meta/settings.yml), which the action rocmlab_check_settings runs on the
controller, and the module rocmlab_settings on a host, before anything on a host changes.

Each class of hostile input has a table; every value is refused with a sentence naming the
variable, the value and what is accepted. The pip option parser is checked against pip's own
parser (the pip of this venv).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "rocmlab_settings", REPO / "plugins" / "module_utils" / "settings.py"
)
assert _spec is not None and _spec.loader is not None
settings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(settings)
LAB_CACHE_SETTINGS = REPO / "roles" / "lab_cache" / "meta" / "settings.yml"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="changes owners: run as root")


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


def test_a_list_elements_refusal_says_what_is_accepted():
    element = {"kind": "pattern", "pattern": "gfx[0-9a-f]{3,4}|all"}
    text = assert_refused(
        "list", ["gfx90a", "gfx90z"], 'some_var[1]: "gfx90z"', element=element, example="[gfx1100]"
    )
    assert "(for example [gfx1100])" in text


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


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("http://mirror.lab/rocm;proxy=http://evil:3128", "parameters (;)"),
        ("https://mirror.lab/rocm/apt/6.4.2;type=a", "parameters (;)"),
        ("https://mirror.lab/simple#egg=torch", "a fragment (#)"),
        ("http://mirror.lab/x;a=b#c", "parameters (;) and a fragment (#)"),
        ("file:///srv/mnist#frag", "a fragment (#)"),
    ],
)
def test_urls_with_parameters_or_a_fragment_are_refused_naming_what(value, what):
    found = problems("url", value, schemes=["https", "http", "file"])
    assert found == [
        f"some_var: \"{value}\" carries {what}. Use scheme://host[:port][/path][?query]: no ';' "
        "parameters (';proxy=' and the like, which clients read as options) and no '#' fragment."
    ]
    # Where credentials are accepted (pip's sources), parameters and fragments are not.
    assert problems("url", value, credentials="masked", schemes=["https", "http", "file"])


def test_credentials_in_urls_are_masked_in_messages():
    text = assert_refused("url", "https://user:hunter2@mirror/ x", "***@")
    assert "hunter2" not in text


# --- Credentials in URLs: refused wherever rocmlab would publish them. ---
@pytest.mark.parametrize(
    "value",
    [
        "https://user:secret@mirror.lab/rocm",
        "https://token@mirror.lab/rocm",
        "http://user:@mirror.lab:8080/",
        "https://u%40lab:p%3Ass@mirror.lab/",
    ],
)
def test_credentials_in_urls_are_refused_where_they_would_be_published(value):
    published = "lab-cache.json (served over HTTP to every host of the lab)"
    text = assert_refused(
        "url",
        value,
        "carries credentials (user:password@ before the host)",
        f"which rocmlab would publish in {published}",
        "Use a URL without user:password@",
        published=published,
    )
    assert "secret" not in text and "token" not in text and "p%3Ass" not in text
    assert "***@" in text
    # Without a place named, the message still says why.
    assert_refused("url", value, "files and logs that other accounts or hosts read")


def test_credentials_are_accepted_where_the_role_masks_them():
    """pip's index and wheelhouse: masked in the roles' records and messages, and the pip task
    is no_log while a URL carries them."""
    for value in ("https://user:secret@mirror.lab/pypi/simple", "http://token@mirror.lab/whl/"):
        assert problems("url", value, credentials="masked") == []


def test_only_the_pip_sources_the_roles_mask_accept_credentials():
    """The settings that accept credentials are exactly those the roles mask (pip's sources, and
    the lab's proxy, which reaches the hosts only as the fetching tasks' environment)."""
    masked = []
    for path in sorted((REPO / "roles").glob("*/meta/settings.yml")):
        for spec in settings_in(path):
            for item in (spec, spec.get("items") or {}):
                if item.get("credentials") == "masked":
                    masked.append(spec["name"])
    assert sorted(masked) == [
        "jax_rocm_find_links",
        "jax_rocm_index_url",
        "lab_cache_wheel_upstream",
        "pytorch_rocm_find_links",
        "pytorch_rocm_index_url",
        "rocmlab_http_proxy",
        "tensorflow_rocm_find_links",
        "tensorflow_rocm_index_url",
    ]


def settings_in(path: Path) -> list[dict]:
    """The declared checks of a role's meta/settings.yml, each with the setting's name."""
    options = settings.declared_options(yaml.safe_load(path.read_text()))
    return [
        dict(option["check"], name=name) for name, option in options.items() if "check" in option
    ]


@pytest.mark.parametrize("name", ["lab_cache_amd_upstream", "lab_cache_amd_core_upstream"])
def test_the_lab_caches_published_upstreams_refuse_credentials(name):
    (spec,) = [s for s in settings_in(LAB_CACHE_SETTINGS) if s["name"] == name]
    spec = dict(spec, value="https://user:secret@repo.example/rocm")
    text = " ".join(settings.problems_of(spec))
    assert name in text and "lab-cache.json" in text
    assert "secret" not in text


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


# --- Directories on the controller: checked like the ones rocmlab makes on a host. ---
@pytest.mark.parametrize(
    "value",
    [
        "/home/admin/rocmlab/playbooks/../reports",
        "/srv/rocmlab/reports",
        "/root/.cache/molecule/rocmlab/lab_cache/reports",
        "/tmp/pytest-of-root/pytest-3/test_fleet0/reports",
    ],
)
def test_controller_directories_are_accepted_once_resolved(value):
    assert problems("controller_dir", value) == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("reports", "is not an absolute path"),
        ("../reports", "is not an absolute path"),
        ("/", "system directory"),
        ("/etc", "system directory"),
        ("/home/admin/rocmlab/../../../etc", "(resolved: /etc) is a system directory"),
        ("/srv/rocmlab/../..", "(resolved: /) is a system directory"),
        ("/proc/self/cwd", "lies under /proc"),
        ("/home/admin/my reports", "spaces"),
        ("/home/admin/$(id)", "shell characters"),
        ("/home/admin/reports\n", "control character"),
    ],
)
def test_controller_directories_that_a_host_directory_would_fail_are_refused(value, fragment):
    assert_refused("controller_dir", value, fragment)


def test_the_reports_directory_is_one_setting_checked_as_a_path():
    """Every report on the controller goes to rocmlab_reports_dir (role rocmlab), checked as a
    directory; no role declares a directory of its own for them."""
    specs = [s for s in settings_in(REPO / "roles" / "rocmlab" / "meta" / "settings.yml")]
    (spec,) = [s for s in specs if s["name"] == "rocmlab_reports_dir"]
    assert spec["kind"] == "controller_dir"
    assert settings.problems_of(dict(spec, value="/etc")) != []
    assert settings.problems_of(dict(spec, value="/srv/rocmlab/playbooks/../reports")) == []
    controller_dirs = [
        (role.name, s["name"])
        for role in sorted((REPO / "roles").iterdir())
        if (role / "meta" / "settings.yml").is_file()
        for s in settings_in(role / "meta" / "settings.yml")
        if s["kind"] == "controller_dir"
    ]
    assert controller_dirs == [("rocmlab", "rocmlab_reports_dir")]


def test_a_retired_setting_still_set_is_refused_with_what_replaced_it():
    retired = yaml.safe_load((REPO / "roles" / "rocmlab" / "meta" / "settings.yml").read_text())[
        "retired"
    ]
    assert set(retired) == {
        "smoke_test_report_dir",
        "cluster_check_report_dir",
        "rocmlab_fleet_reports_dir",
        "lab_cache_report_dir",
        "rocmlab_fleet_free_space_gib",
    }
    problems = settings.retired_problems(retired, {"smoke_test_report_dir": "/x", "other": 1})
    assert problems == [
        "smoke_test_report_dir is no longer read: set rocmlab_reports_dir, the one directory for "
        "every report, instead."
    ]
    assert settings.retired_problems(retired, {"rocmlab_reports_dir": "/x"}) == []
    # Nothing that is read may be retired.
    for role in (REPO / "roles").iterdir():
        if (role / "meta" / "settings.yml").is_file():
            declared = yaml.safe_load((role / "meta" / "settings.yml").read_text())
            assert not set(settings.declared_options(declared)) & set(retired), role.name
    # Nor set or read anywhere in the project: a play that set one would be refused on every host.
    users = [
        str(path.relative_to(REPO))
        for top in ("roles", "playbooks", "plugins", "molecule", "tools", "benchmarks", "inventory")
        for path in sorted((REPO / top).rglob("*"))
        if path.suffix in (".yml", ".yaml", ".py", ".j2", ".sh", ".md")
        and path.is_file()
        and path != REPO / "roles" / "rocmlab" / "meta" / "settings.yml"
        and any(name in path.read_text(errors="replace") for name in retired)
    ]
    assert users == []


def every_declaration() -> dict:
    return {
        path.parent.parent.name: yaml.safe_load(path.read_text())
        for path in sorted((REPO / "roles").glob("*/meta/settings.yml"))
    }


def unknown_of(places, allowed=()):
    declarations = every_declaration()
    names, known = settings.declared_names(declarations)
    return settings.unknown_problems(places, declarations, known, names, allowed)


def test_a_variable_with_a_roles_prefix_that_no_role_declares_is_refused_with_the_closest():
    problems = unknown_of(
        {
            "rocmlab_fleet_seiral": ["group_vars/lab"],
            "rocmlab_lab_cach": ["the extra vars", "host_vars/gpu01"],
            "pytorch_rocm_version": ["group_vars/all"],  # a setting
            "rocm_repo_files": ["host_vars/gpu01"],  # a fact role rocm_repo publishes
            "smoke_test_report_dir": ["group_vars/all"],  # retired: refused as such, not here
            "rocm_repo_site_owner": ["group_vars/all"],  # the site's own, allowed
            "site_owner": ["group_vars/all"],  # no role's prefix
        },
        allowed=["rocm_repo_site_owner"],
    )
    tail = " A variable of the site's own whose name starts with {} is accepted once listed in "
    tail += "rocmlab_settings_allow_unknown."
    assert problems == [
        # The longest prefix is the role's (rocmlab_fleet_, not rocmlab_).
        "rocmlab_fleet_seiral, set in group_vars/lab, is not a setting of any rocmlab role, so "
        "nothing would read it. Did you mean rocmlab_fleet_serial?" + tail.format("rocmlab_fleet_"),
        "rocmlab_lab_cach, set in the extra vars and in host_vars/gpu01, is not a setting of "
        "any rocmlab role, so nothing would read it. Did you mean rocmlab_lab_cache?"
        + tail.format("rocmlab_"),
    ]


def test_only_a_close_name_is_offered_and_an_odd_name_is_shown_as_json():
    problems = unknown_of({"rocm_repo_site_owner": ["x"], "rocm_repo_x\nInjected: y": ["x"]})
    # rocm_repo_site_owner is not offered rocm_repo_suite (the shared prefix does not count).
    assert [p.split(" A variable")[0] for p in problems] == [
        "rocm_repo_site_owner, set in x, is not a setting of any rocmlab role, so nothing would "
        "read it. Role rocm_repo's settings are listed in its README.",
        '"rocm_repo_x\\nInjected: y", set in x, is not a setting of any rocmlab role, so '
        "nothing would read it. Role rocm_repo's settings are listed in its README.",
    ]


def test_ansibles_own_variables_never_have_a_roles_prefix():
    from ansible import constants as C
    from ansible.vars.reserved import get_reserved_names

    names = set(get_reserved_names()) | set(C.COMMON_CONNECTION_VARS)
    names |= {name for names in C.MAGIC_VARIABLE_MAPPING.values() for name in names}
    names |= {
        "hostvars", "groups", "group_names", "inventory_hostname", "inventory_dir",
        "playbook_dir", "role_path", "role_name", "omit", "ansible_play_hosts",
        "ansible_play_batch", "ansible_facts", "ansible_check_mode", "ansible_run_tags",
    }  # fmt: skip
    assert unknown_of({name: ["the inventory"] for name in names}) == []


# --- Paths rocmlab makes root's (owner: root) are checked on the host: never another
# account's or a service's directory. ---
def owned(path: Path, uid: int, mode: int | None = None) -> Path:
    os.chown(path, uid, uid)
    if mode is not None:
        path.chmod(mode)
    return path


@AS_ROOT
def test_a_directory_of_another_account_is_refused_naming_its_owner(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    owned(theirs, 12345)
    text = assert_refused(
        "dir", str(theirs), "belongs to uid 12345 on this host, not to root", owner="root"
    )
    assert "rocmlab makes it root's (root:root 0755)" in text
    www = pwd.getpwnam("www-data").pw_uid
    owned(theirs, www)
    assert_refused("dir", str(theirs), "belongs to www-data", owner="root")
    # Below it, too: the account could replace whatever rocmlab made there.
    assert_refused(
        "dir", str(theirs / "cache"), f"lies in {theirs}, which belongs to www-data", owner="root"
    )
    # Unchanged by the check.
    assert theirs.stat().st_uid == www


@AS_ROOT
def test_a_directory_others_can_write_above_the_path_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert_refused(
        "dir", str(shared / "cache"), f"lies in {shared}", "other accounts can write", owner="root"
    )
    # A sticky directory (as /tmp) is fine for a root-owned directory that exists already in
    # it, not for one another account could make there first.
    shared.chmod(0o1777)
    assert_refused("dir", str(shared / "cache"), "other accounts can write", owner="root")
    (shared / "cache").mkdir()
    assert problems("dir", str(shared / "cache"), owner="root") == []


@AS_ROOT
def test_a_link_is_refused_and_roots_own_directories_are_accepted(tmp_path):
    mine = tmp_path / "lab-cache"
    mine.mkdir()
    assert problems("dir", str(mine), owner="root") == []
    assert problems("dir", str(tmp_path / "not-yet" / "lab-cache"), owner="root") == []
    os.symlink(mine, tmp_path / "link")
    assert_refused("dir", str(tmp_path / "link"), "is a symbolic link (to", owner="root")
    # Without owner: root the host is not looked at (the pure checks only).
    owned(mine, 12345)
    assert problems("dir", str(mine)) == []


def test_a_home_or_a_services_directory_is_refused(tmp_path, monkeypatch):
    """Any account's home directory (a person's, or a service's such as www-data's /var/www
    or apt-cacher-ng's cache), and anything in it, even when root owns it."""
    home = tmp_path / "svc-home"
    home.mkdir()
    service = pwd.struct_passwd(("svc", "x", 12345, 12345, "", str(home), "/usr/sbin/nologin"))
    accounts = [*pwd.getpwall(), service]
    monkeypatch.setattr(settings.pwd, "getpwall", lambda: accounts)
    assert_refused("dir", str(home), f"is the home directory of svc ({home})", owner="root")
    assert_refused("dir", str(home / "cache"), "is in the home directory of svc", owner="root")
    # root's own home and accounts whose home is / are not what this is about.
    assert problems("dir", str(tmp_path / "elsewhere"), owner="root") == []


def test_the_lab_cache_root_is_checked_on_the_host():
    (spec,) = [s for s in settings_in(LAB_CACHE_SETTINGS) if s["name"] == "lab_cache_root"]
    assert spec["owner"] == "root"
