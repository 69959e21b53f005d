"""The lab's proxy (rocmlab_http_proxy, rocmlab_no_proxy; role rocmlab) and the free space a run
needs (rocmlab_free_space_gib).

Every task of every role that fetches over the network carries the proxy environment
(rocmlab_proxy_env, set by roles/rocmlab/tasks/proxy-env.yml): a structural test walks the
task files, as Ansible reads them, and names any fetching task without it. The environment is
built by one tested function (plugins/module_utils/downloads.py, proxy_env), the settings are
checked against their declaration (a proxy's login accepted and never shown), and the site
playbook's first play stops, before anything changes, on a host without room for what the run
installs, with the rollout's module and its sentence.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import load_module, playbook_run

REPO = Path(__file__).resolve().parents[2]


downloads = load_module("proxy_downloads", REPO / "plugins" / "module_utils" / "downloads.py")
settings = load_module("proxy_settings", REPO / "plugins" / "module_utils" / "settings.py")

PROXY_ENV = "rocmlab_proxy_env"
# Modules that fetch from the network, and when (None: always). lab_cache_apt_fill is not among
# them: it asks the lab cache's own apt-cacher-ng on that host, whose upstream fetches go through
# the proxy by its configuration (roles/lab_cache/templates/acng.conf.j2).
FETCHING_MODULES = {
    "ansible.builtin.apt": None,
    "ansible.builtin.apt_repository": None,
    "ansible.builtin.deb822_repository": None,
    "ansible.builtin.get_url": None,
    "ansible.builtin.package": None,
    "ansible.builtin.pip": None,
    "ansible.builtin.uri": None,
    # apt-get update, to prove apt can fetch with the new files.
    "rocmlab.rocmlab.rocmlab_apt_files": None,
    # pip download and rocmlab fetch-mnist on the lab cache.
    "rocmlab.rocmlab.lab_cache_fill": None,
    # The mirrors of the rollout's preflight, fetched from the host.
    "rocmlab.rocmlab.rocmlab_preflight": lambda args: bool(args.get("urls")),
    # A venv rebuilt from its recorded freeze (pip install).
    "rocmlab.rocmlab.rocmlab_venv_keep": lambda args: args.get("state") == "restored",
}
COMMANDS = ("ansible.builtin.command", "ansible.builtin.shell")
# A command that fetches: apt-get, pip install or download (not from a local wheel alone:
# --no-index), rocmlab fetch-mnist. Read from the task's name and arguments.
FETCHING_COMMAND = re.compile(r"apt-get|apt_command|\bpip\b.*\b(install|download)\b|fetch-mnist")


def tasks_of(node):
    """Every task of a task file's data, those in blocks, rescue and always included."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks_of(task.get(key))


def fetches(task: dict) -> bool:
    """Whether TASK fetches over the network."""
    for module, when in FETCHING_MODULES.items():
        if module in task:
            args = task[module] if isinstance(task[module], dict) else {}
            return when is None or when(args)
    for module in COMMANDS:
        if module in task:
            text = json.dumps([task.get("name", ""), task[module]])
            return FETCHING_COMMAND.search(text) is not None and "--no-index" not in text
    return False


def fetching_tasks(root: Path) -> list[tuple[str, dict]]:
    """(file, task) of every fetching task of every role's tasks and handlers under ROOT."""
    found = []
    files = sorted(root.glob("roles/*/tasks/*.yml")) + sorted(root.glob("roles/*/handlers/*.yml"))
    for path in files:
        for task in tasks_of(yaml.safe_load(path.read_text())):
            if fetches(task):
                found.append((str(path.relative_to(root)), task))
    return found


def unproxied(root: Path) -> list[str]:
    """The fetching tasks under ROOT whose environment is not the proxy's."""
    return [
        f"{where}: {task.get('name')}"
        for where, task in fetching_tasks(root)
        if PROXY_ENV not in str(task.get("environment", ""))
    ]


def test_every_fetching_task_of_every_role_goes_through_the_labs_proxy() -> None:
    assert unproxied(REPO) == []


def test_the_walk_finds_the_fetches_of_each_kind() -> None:
    """The detector is not blind: each kind of fetch the roles make is found where it is."""
    found = {(where, task.get("name")) for where, task in fetching_tasks(REPO)}
    for where, name in (
        ("roles/rocm_repo/tasks/key.yml", None),  # get_url of the signing key
        (
            "roles/rocmlab/tasks/apt-lists.yml",
            "Fetch the package lists when none were ever fetched",
        ),
        ("roles/framework_venv/tasks/pip.yml", "Run pip install for {{ framework_venv_reason }}"),
        ("roles/smoke_test/tasks/data.yml", "Fetch and verify the dataset"),
        (
            "roles/lab_cache/tasks/wheels.yml",
            "Fetch the wheels the clients install, for their Python",
        ),
        ("roles/rocmlab_fleet/tasks/busy.yml", "Read the host's use, free space and clock"),
        (
            "roles/rocm_packages/tasks/install.yml",
            "Download the Core SDK packages before the legacy line's packages go",
        ),
    ):
        assert any(w == where and (name is None or n == name) for w, n in found), (where, name)
    # A local wheel (--no-index), a pip uninstall and the free-space read fetch nothing.
    names = {name for _, name in found}
    assert "Install the wheel into the venv" not in names
    assert "Read the free space where this run installs" not in names


def test_a_fetch_without_the_proxy_environment_is_named(tmp_path: Path) -> None:
    shutil.copytree(REPO / "roles", tmp_path / "roles")
    key = tmp_path / "roles" / "rocm_repo" / "tasks" / "key.yml"
    text = key.read_text()
    assert PROXY_ENV in text
    key.write_text(re.sub(r"\n\s*environment: .*rocmlab_proxy_env.*", "", text))
    assert [line for line in unproxied(tmp_path) if "key.yml" in line] != []


def test_the_proxy_is_read_for_the_environment_and_the_lab_caches_upstream_alone() -> None:
    """Nothing else reads rocmlab_http_proxy: no file on a client host holds it (apt and pip get
    it in the fetching tasks' environment), only the lab cache's apt-cacher-ng configuration."""
    readers = sorted(
        str(path.relative_to(REPO))
        for path in REPO.glob("roles/*/*/*")
        if path.is_file()
        and path.parent.name in ("tasks", "handlers", "templates", "files", "vars")
        and "rocmlab_http_proxy" in path.read_text()
    )
    assert readers == [
        "roles/lab_cache/tasks/servers.yml",
        "roles/lab_cache/templates/acng.conf.j2",
        "roles/rocmlab/tasks/proxy-env.yml",
    ]


# --- the environment ---------------------------------------------------------------------------


def test_no_proxy_is_no_environment() -> None:
    assert downloads.proxy_env("", ["mirror.lab"], "10.0.0.5") == {}
    assert downloads.proxy_env(None) == {}


def test_a_proxy_goes_to_both_schemes_and_the_lab_is_reached_directly() -> None:
    env = downloads.proxy_env("http://proxy.lab:3128", [".lab.example", "10.1.2.3"], "[fd00::5]")
    direct = "localhost,127.0.0.1,::1,fd00::5,.lab.example,10.1.2.3"
    assert env == {
        "http_proxy": "http://proxy.lab:3128",
        "https_proxy": "http://proxy.lab:3128",
        "no_proxy": direct,
        "HTTP_PROXY": "http://proxy.lab:3128",
        "HTTPS_PROXY": "http://proxy.lab:3128",
        "NO_PROXY": direct,
    }


def test_each_direct_name_is_listed_once() -> None:
    env = downloads.proxy_env("http://p:1", ["head", "localhost", "head"], "head")
    assert env["no_proxy"] == "localhost,127.0.0.1,::1,head"


# --- the settings, as declared -----------------------------------------------------------------


def declared_check(name: str) -> dict:
    spec = yaml.safe_load((REPO / "roles" / "rocmlab" / "meta" / "settings.yml").read_text())
    for entry in spec["argument_specs"].values():
        if name in (entry.get("options") or {}):
            return entry["options"][name]["check"]
    raise AssertionError(name)


def proxy_problems(value) -> list[str]:
    check = declared_check("rocmlab_http_proxy")
    return settings.problems_of({**check, "name": "rocmlab_http_proxy", "value": value})


@pytest.mark.parametrize(
    "value",
    ["", "http://proxy.lab:3128", "https://proxy.lab", "http://user:s3cret@proxy.lab:3128"],
)
def test_a_proxy_url_is_accepted_with_or_without_a_login(value) -> None:
    assert proxy_problems(value) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("proxy.lab:3128", "is not an http(s) URL"),
        ("socks5://proxy.lab:1080", "is not an http(s) URL"),
        ("file:///etc/proxy", "is not an http(s) URL"),
        ("http://proxy.lab:3128\nexport X=1", "control character"),
        ("http://proxy.lab:99999", "has an invalid port"),
        ("http://proxy.lab:3128/;x=1", "carries parameters"),
    ],
)
def test_a_bad_proxy_is_refused_naming_the_setting(value, why) -> None:
    text = " ".join(proxy_problems(value))
    assert text.startswith("rocmlab_http_proxy: "), text
    assert why in text, text


def test_a_refused_proxys_login_is_never_shown() -> None:
    text = " ".join(proxy_problems("socks5://alice:s3cret@proxy.lab:1080"))
    assert "s3cret" not in text and "alice" not in text, text
    assert "***@proxy.lab" in text, text


@pytest.mark.parametrize("value", [["mirror.lab"], [".lab.example"], ["10.0.0.1", "fd00::1"]])
def test_direct_names_are_accepted(value) -> None:
    check = declared_check("rocmlab_no_proxy")
    assert settings.problems_of({**check, "name": "rocmlab_no_proxy", "value": value}) == []


@pytest.mark.parametrize("value", [["a.lab,b.lab"], ["*"], "mirror.lab", ["lab\n"]])
def test_bad_direct_names_are_refused(value) -> None:
    check = declared_check("rocmlab_no_proxy")
    found = settings.problems_of({**check, "name": "rocmlab_no_proxy", "value": value})
    assert found and found[0].startswith("rocmlab_no_proxy"), found


# --- the free space, as in the rollout ---------------------------------------------------------

GIB = 1024**3


def test_the_site_checks_the_space_right_after_the_settings_with_the_rollouts_module() -> None:
    # The controller's own check comes first (it contacts no host); then the settings and the
    # space, before any play that changes a host.
    controller, first = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())[:2]
    assert [t["ansible.builtin.import_tasks"] for t in controller["tasks"]] == [
        "tasks/controller.yml"
    ]
    calls = [task["ansible.builtin.include_role"]["tasks_from"] for task in first["tasks"]]
    assert calls == ["roles", "free-space"]
    entry = yaml.safe_load((REPO / "roles" / "rocmlab" / "tasks" / "free-space.yml").read_text())
    busy = yaml.safe_load((REPO / "roles" / "rocmlab_fleet" / "tasks" / "busy.yml").read_text())
    assert "rocmlab.rocmlab.rocmlab_preflight" in entry[0]
    assert "rocmlab.rocmlab.rocmlab_preflight" in busy[0]
    preflight = (REPO / "roles" / "rocmlab_fleet" / "tasks" / "preflight.yml").read_text()
    assert "downloads_preflight(rocmlab_free_space_gib)" in preflight
    assert "downloads_preflight(rocmlab_free_space_gib)" in str(entry[0]["vars"])


def test_only_the_file_systems_short_of_room_are_named() -> None:
    space = [
        {
            "mount": "/",
            "names": ["rocm", "venvs"],
            "paths": ["/opt/rocm", "/opt/rocmlab/venvs"],
            "need_bytes": 45 * GIB,
            "free_bytes": 20 * GIB,
            "enough": False,
        },
        {
            "mount": "/var",
            "names": ["datasets"],
            "paths": ["/var/lib/rocmlab/datasets"],
            "need_bytes": GIB,
            "free_bytes": 80 * GIB,
            "enough": True,
        },
    ]
    assert downloads.space_short(space) == [
        "/ (rocm /opt/rocm, venvs /opt/rocmlab/venvs): 20.0 GiB free, 45.0 GiB needed"
    ]
    assert downloads.space_short(space[1:]) == []


PLAY = """
- name: The site playbook's free-space check, on this machine
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check that the host has room for what this run installs
      ansible.builtin.include_role:
        name: rocmlab.rocmlab.rocmlab
        tasks_from: free-space
        rolespec_validate: false
"""


def free_space_run(tmp_path: Path, need_gib: float, *args: str) -> subprocess.CompletedProcess:
    """The free-space entry point on this machine, for ROCm packages published (as rocm_packages'
    validate step publishes them) to land in TMP_PATH/opt/rocm, needing NEED_GIB there."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    extra = {
        "rocmlab_settings_checked": ["rocm_packages"],
        "rocm_packages_downloads": [
            downloads.entry(
                "apt",
                "ROCm packages",
                requirements=["rocm"],
                path=str(tmp_path / "opt/rocm"),
                space="rocm",
            )
        ],
        "rocmlab_free_space_gib": {"rocm": need_gib, "venvs": 0, "datasets": 0},
    }
    return playbook_run(
        [
            "-i",
            "localhost,",
            "-e",
            json.dumps(extra),
            "-e",
            json.dumps({"ansible_python_interpreter": sys.executable}),
            *args,
            str(playbook),
        ]
    )


def test_a_host_without_room_is_stopped_naming_the_path_free_and_needed(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free / GIB
    run = free_space_run(tmp_path, 100000, "--check")
    out = run.stdout + run.stderr
    assert run.returncode == 2, out[-3000:]
    found = re.search(
        r"Not enough free space: (\S+) \(rocm (\S+)\): ([0-9.]+) GiB free, 100000\.0 GiB needed",
        out,
    )
    assert found, out[-3000:]
    assert found.group(2) == str(tmp_path / "opt/rocm")
    assert abs(float(found.group(3)) - free) < 1
    assert "Nothing on this host was changed" in out


def test_a_host_with_room_goes_on(tmp_path: Path) -> None:
    run = free_space_run(tmp_path, 0.001)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert not (tmp_path / "opt").exists()
