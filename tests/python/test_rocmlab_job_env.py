"""Unit tests for plugins/modules/rocmlab_job_env.py: the command line prefix that runs the
smoke job, the doctor and the cluster check as the unprivileged account - runuser -u, env -i,
no shell - with the GPU settings from gfx_override's root-owned file.

The environment file is rendered from the role's own template (roles/gfx_override/templates/
rocmlab-gfx.conf.j2) as Ansible renders it, with the values gfx_detect plans for an RX 6700 XT
beside an integrated GPU.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
from pathlib import Path

import jinja2
import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "rocmlab_job_env", REPO / "plugins" / "modules" / "rocmlab_job_env.py"
)
assert _spec is not None and _spec.loader is not None
job_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job_env)

AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="needs root (a root-owned file)")
RESEARCHER = pwd.struct_passwd(("researcher", "x", 1000, 1000, "", "/home/researcher", "/bin/sh"))
GPU = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "ROCR_VISIBLE_DEVICES": "0"}


def gfx_environment_file(path: Path, environment: dict[str, str]) -> Path:
    """/etc/environment.d/90-rocmlab-gfx.conf as role gfx_override writes it."""
    template = (REPO / "roles/gfx_override/templates/rocmlab-gfx.conf.j2").read_text()
    notes = {name: [f"why {name} is set"] for name in environment}
    text = (
        jinja2.Environment(trim_blocks=True)
        .from_string(template)
        .render(
            ansible_managed="Ansible managed",
            gfx_override_environment=environment,
            __gfx_override_detected={"notes": notes},
        )
    )
    path.write_text(text)
    path.chmod(0o644)
    return path


def test_the_prefix_runs_env_i_as_the_account_with_exactly_these_variables() -> None:
    argv, environment = job_env.job_env(
        RESEARCHER, ["/usr/local/bin", "/usr/bin", "/bin"], "C.UTF-8", GPU,
        {"ROCMLAB_HOST_NAME": "ws-01"}, "/usr/sbin/runuser",
    )  # fmt: skip
    assert argv == [
        "/usr/sbin/runuser", "-u", "researcher", "--", "/usr/bin/env", "-i",
        "HOME=/home/researcher", "USER=researcher", "LOGNAME=researcher",
        "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
        "HSA_OVERRIDE_GFX_VERSION=10.3.0", "ROCR_VISIBLE_DEVICES=0", "ROCMLAB_HOST_NAME=ws-01",
    ]  # fmt: skip
    assert "--login" not in argv and "-l" not in argv and "--command" not in argv
    assert environment["HOME"] == "/home/researcher"


def test_the_role_templates_file_gives_the_gpu_settings() -> None:
    template = (REPO / "roles/gfx_override/templates/rocmlab-gfx.conf.j2").read_text()
    text = (
        jinja2.Environment(trim_blocks=True)
        .from_string(template)
        .render(
            ansible_managed="Ansible managed",
            gfx_override_environment=GPU,
            __gfx_override_detected={"notes": {name: ["a note"] for name in GPU}},
        )
    )
    assert job_env.parse_environment_file(text, "90-rocmlab-gfx.conf") == GPU


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("LD_PRELOAD=/tmp/x.so", "LD_PRELOAD is not for a GPU setting"),
        ("PATH=/tmp", "PATH is not for a GPU setting"),
        ("PYTHONSTARTUP=/tmp/x.py", "PYTHONSTARTUP is not for a GPU setting"),
        ("export HSA_OVERRIDE_GFX_VERSION=10.3.0", "is not NAME=VALUE"),
        ("$(touch /tmp/x)", "is not NAME=VALUE"),
    ],
)
def test_a_line_that_is_no_gpu_setting_is_refused(line: str, fragment: str) -> None:
    with pytest.raises(job_env.JobEnvError, match=r"^f, line 2: ") as caught:
        job_env.parse_environment_file(f"# comment\n{line}\n", "f")
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"HOME": "/tmp"}, "extra: 'HOME' is not a variable"),
        ({"A B": "x"}, "extra: 'A B' is not a variable"),
        ({"ROCMLAB_HOST_NAME": "ws-01\nLD_PRELOAD=/x"}, "is not a one-line value"),
    ],
)
def test_extra_variables_are_checked(extra: dict, fragment: str) -> None:
    with pytest.raises(job_env.JobEnvError, match=r"^extra") as caught:
        job_env.job_env(RESEARCHER, ["/usr/bin"], "C.UTF-8", {}, extra, "/usr/sbin/runuser")
    assert fragment in str(caught.value)


def test_root_and_a_relative_path_are_refused() -> None:
    root = pwd.struct_passwd(("root", "x", 0, 0, "", "/root", "/bin/bash"))
    with pytest.raises(job_env.JobEnvError, match="root, not an unprivileged account"):
        job_env.job_env(root, ["/usr/bin"], "C.UTF-8", {}, {}, "/usr/sbin/runuser")
    with pytest.raises(job_env.JobEnvError, match="path: 'bin' is not an absolute directory"):
        job_env.job_env(RESEARCHER, ["bin"], "C.UTF-8", {}, {}, "/usr/sbin/runuser")


@needs_root
def test_roots_own_file_is_read(tmp_path: Path) -> None:
    path = gfx_environment_file(tmp_path / "90-rocmlab-gfx.conf", GPU)
    text = job_env.read_root_file(str(path))
    assert text is not None and job_env.parse_environment_file(text, str(path)) == GPU


def test_a_missing_file_adds_nothing(tmp_path: Path) -> None:
    assert job_env.read_root_file(str(tmp_path / "absent.conf")) is None


@needs_root
def test_a_file_another_account_may_write_is_refused(tmp_path: Path) -> None:
    path = gfx_environment_file(tmp_path / "90-rocmlab-gfx.conf", GPU)
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(job_env.JobEnvError, match="only root may write"):
        job_env.read_root_file(str(path))
    os.chown(path, 0, -1)
    path.chmod(0o664)
    with pytest.raises(job_env.JobEnvError, match="mode 0664: only root may write"):
        job_env.read_root_file(str(path))


@needs_root
def test_a_link_in_place_of_the_file_is_not_followed(tmp_path: Path) -> None:
    real = gfx_environment_file(tmp_path / "real.conf", GPU)
    (tmp_path / "90-rocmlab-gfx.conf").symlink_to(real)
    with pytest.raises(job_env.JobEnvError, match="without following a link"):
        job_env.read_root_file(str(tmp_path / "90-rocmlab-gfx.conf"))
