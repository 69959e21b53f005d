"""Root runs no code another account can place: every wrapper that starts Python as root (role
slurm_health's tier-2 runner, Epilog, maintenance helper and HealthCheckProgram wrapper, and
the health timer's tier-0 unit) is run here as rendered, from a directory that holds a planted
``rocmlab`` package and programs named like the ones the wrappers call, with PYTHONPATH and PATH
pointing there. Each wrapper must start its Python isolated, from /, with its own PATH: the
planted code never runs (a control run without ``-I`` proves the plant is imported otherwise).

The venv is a real one (``python -m venv``) whose site-packages point at this checkout's src,
as the PyTorch venv's hold rocmlab; the templates are rendered as Ansible's template module does
(trim_blocks, Ansible's ``quote``, ``dirname`` and ``bool``), with the role's own vars."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from health_testutil import machine
from test_health_timer import SETTINGS, ht

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "slurm_health"
PLANTED = ("timeout", "flock", "setsid", "env", "scontrol", "python", "python3", "runuser", "sh")


def _bool(value) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


ENV = jinja2.Environment(
    trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined
)
ENV.filters.update(quote=shlex.quote, dirname=os.path.dirname, bool=_bool)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv whose Python imports rocmlab from this checkout (a .pth file, as an editable
    install writes), with its console script."""
    where = tmp_path_factory.mktemp("venv") / "pytorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    found = subprocess.run(
        [str(where / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    Path(found.stdout.strip(), "rocmlab-src.pth").write_text(str(REPO / "src") + "\n")
    # The console script as pip writes it.
    script = where / "bin" / "rocmlab"
    script.write_text(
        f"#!{where / 'bin' / 'python'}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
        "from rocmlab.cli import main\nif __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        "    sys.exit(main())\n"
    )
    script.chmod(0o755)
    return where


@pytest.fixture
def plant(tmp_path) -> tuple[Path, Path, dict[str, str]]:
    """(the planted directory, the marker file, an environment pointing at the plant)."""
    where, marker = tmp_path / "plant", tmp_path / "marker"
    package = where / "rocmlab"
    package.mkdir(parents=True)
    code = f"open({str(marker)!r}, 'a').write('rocmlab imported from the plant\\n')\n"
    (package / "__init__.py").write_text(code)
    for name in ("health", "doctor", "common"):
        (package / name).mkdir()
        (package / name / "__init__.py").write_text(code)
    for name in PLANTED:
        program = where / name
        program.write_text(f"#!/bin/sh\necho '{name} from the plant ran' >> {marker}\nexit 0\n")
        program.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": str(where),
        "PATH": f"{where}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONSTARTUP": str(package / "__init__.py"),
        "PYTHONUSERBASE": str(where),
    }
    return where, marker, env


def test_the_plant_is_imported_by_a_python_that_is_not_isolated(venv, plant):
    where, marker, env = plant
    python = venv / "bin" / "python"
    ran = subprocess.run(
        [str(python), "-m", "rocmlab.health.slurm_tier2", "--help"],
        cwd=where, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert marker.exists(), ran.stdout + ran.stderr  # so its absence below means something
    marker.unlink()
    ran = subprocess.run(
        [str(python), "-I", "-m", "rocmlab.health.slurm_tier2", "--help"],
        cwd=where, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0 and "after-job" in ran.stdout, ran.stdout + ran.stderr
    assert not marker.exists(), marker.read_text()


def role_vars(tmp: Path, venv: Path, fixture_args: list[str]) -> dict:
    """The role's settings and private vars for a node under ``tmp`` (vars/main.yml's
    expressions for the Python and PATH rendered as Ansible would)."""
    own = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    context = {
        "slurm_health_rocmlab": str(venv / "bin" / "rocmlab"),
        "slurm_health_args": fixture_args,
        "slurm_health_node_name": "gpu1",
        "slurm_health_timeout": 40,
        "slurm_health_detach": False,
        "slurm_health_tier2_cooldown": 3600,
        "slurm_health_tier2_timeout": 60,
        "slurm_health_tier2_args": ["--expect-gpus", "0"],
        "__slurm_health_state_dir": str(tmp / "state"),
        "__slurm_health_tier2_dir": str(tmp / "tier2"),
        "__slurm_health_tier2_runner": str(tmp / "sbin" / "rocmlab-slurm-tier2"),
        "__slurm_health_tier2_account": "nobody",
        "__slurm_health_tier2": True,
        "__slurm_health_tier2_limit": 120,
    }
    for name in ("__slurm_health_python", "__slurm_health_path"):
        context[name] = ENV.from_string(str(own[name])).render(context)
    return context


def render(tmp: Path, context: dict) -> dict[str, Path]:
    """Each template of the role, rendered and installed (mode 0755) under tmp/sbin."""
    sbin = tmp / "sbin"
    sbin.mkdir(exist_ok=True)
    installed = {}
    for name, dest in (
        ("rocmlab-slurm-tier2.sh.j2", "rocmlab-slurm-tier2"),
        ("rocmlab-slurm-epilog.sh.j2", "rocmlab-slurm-epilog"),
        ("rocmlab-slurm-maintenance.sh.j2", "rocmlab-slurm-maintenance"),
        ("rocmlab-slurm-health.sh.j2", "rocmlab-slurm-health"),
    ):
        text = ENV.from_string((ROLE / "templates" / name).read_text()).render(context)
        (sbin / dest).write_text(text)
        (sbin / dest).chmod(0o755)
        installed[dest] = sbin / dest
    for directory in ("state", "tier2"):
        (tmp / directory).mkdir(exist_ok=True)
    return installed


@pytest.fixture
def node(tmp_path, venv):
    (tmp_path / "m").mkdir()
    m = machine(tmp_path / "m", "instinct-healthy", ("mi210-counters",))
    args = ["--sysfs-root", str(m.ctx.sysfs_root), "--dev-root", str(m.ctx.dev_root),
            "--root", str(m.ctx.root), "--kernel-log", str(m.log),
            "--expect-gpus", "2"]  # fmt: skip
    context = role_vars(tmp_path, venv, args)
    return context, render(tmp_path, context)


def test_the_roles_vars_start_root_python_isolated_with_a_fixed_path(node, venv):
    context, wrappers = node
    assert context["__slurm_health_python"] == str(venv / "bin" / "python")
    assert (
        context["__slurm_health_path"]
        == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )
    python = shlex.quote(context["__slurm_health_python"])
    for name in ("rocmlab-slurm-tier2", "rocmlab-slurm-health"):
        text = wrappers[name].read_text()
        assert f"{python} -I -m rocmlab" in text, name
        assert "\ncd / || exit" in text or "\n    cd / || exit" in text, name
    for name, path in wrappers.items():
        assert f"\nPATH={context['__slurm_health_path']}\nexport PATH\n" in path.read_text(), name


def wait_for_line(path: Path, text: str, marker: Path, bound: float = 60) -> str:
    """What ``path`` holds once it has ``text`` (or the marker was written)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        found = path.read_text() if path.exists() else ""
        if text in found or marker.exists():
            return found
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path} within {bound} s: {found!r}")


def test_the_tier_2_runner_imports_nothing_from_its_working_directory(node, plant):
    _context, wrappers = node
    where, marker, env = plant
    ran = subprocess.run(
        [str(wrappers["rocmlab-slurm-tier2"]), "after-boot", "--now"],
        cwd=where, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert not marker.exists(), marker.read_text()
    # It ran rocmlab's own code (the planted scontrol is not on its PATH: none is found).
    assert "after-boot: " in ran.stdout, ran.stdout + ran.stderr


def test_the_maintenance_helper_imports_nothing_from_its_working_directory(node, plant):
    _context, wrappers = node
    where, marker, env = plant
    ran = subprocess.run(
        [str(wrappers["rocmlab-slurm-maintenance"]), "--after"],
        cwd=where, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert not marker.exists(), marker.read_text()
    assert "after-boot: " in ran.stdout, ran.stdout + ran.stderr


def test_the_epilog_imports_nothing_from_its_working_directory(node, plant):
    context, wrappers = node
    where, marker, env = plant
    ran = subprocess.run(
        [str(wrappers["rocmlab-slurm-epilog"])],
        cwd=where, env={**env, "SLURM_JOB_ID": "42"}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    log = Path(context["__slurm_health_state_dir"]) / "tier2.log"
    said = wait_for_line(log, "after-job: stopped: ", marker)  # the detached runner's last word
    assert not marker.exists(), marker.read_text()
    assert "scontrol show job 42" in said, said


def test_the_health_check_wrapper_imports_nothing_from_its_working_directory(node, plant):
    context, wrappers = node
    where, marker, env = plant
    ran = subprocess.run(
        [str(wrappers["rocmlab-slurm-health"])],
        cwd=where, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert not marker.exists(), marker.read_text()
    state = Path(context["__slurm_health_state_dir"])
    log = (state / "gate.log").read_text()
    # Tier 0 ran to its verdict on the fixture node; the gate found no scontrol on its PATH.
    assert "verdict: " in log and "--slurm-gate" in log, log
    assert ran.returncode == 6, log
    assert json.loads((state / "tier0.json").read_text())["tier"] == 0


def test_the_timers_tier_0_unit_imports_nothing_from_its_working_directory(tmp_path, venv, plant):
    where, marker, env = plant
    settings = dict(
        SETTINGS,
        rocmlab=str(venv / "bin" / "rocmlab"),
        lock=str(tmp_path / "tier0.lock"),
        state_dir=str(tmp_path / "health"),
        textfile_dir="",
        expect_gpus="0",
        accounts=["nobody"],
    )
    plan = ht.health_timer_plan(settings)
    Path(settings["state_dir"]).mkdir()  # the role's
    unit = plan["units"]["rocmlab-health-tier0.service"]
    assert "\nWorkingDirectory=/\n" in unit
    path = next(x for x in unit.splitlines() if x.startswith("Environment="))
    fixed = ht.systemd_split(path.removeprefix("Environment="))[0].removeprefix("PATH=")
    assert where.as_posix() not in fixed
    # The unit's command as systemd runs it, but from the plant and with its variables set.
    ran = subprocess.run(
        plan["commands"][0], cwd=where, env={**env, "PATH": fixed}, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert not marker.exists(), marker.read_text()
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    assert json.loads(Path(plan["reports"][0]).read_text())["tier"] == 0


def test_the_health_check_starts_tier_2_for_a_drain_that_waits_for_it(node):
    """The way back from a drain that needs tier 2 (a kernel log failure, maintenance, a failed
    job): after tier 0, the wrapper starts the runner's after-boot, which waits for a reboot."""
    from rocmlab.health import drains
    from rocmlab.health.table import resume_tiers

    context, wrappers = node
    state = Path(context["__slurm_health_state_dir"])
    reason = "rocmlab: kernel_log: reboot"
    kept = drains.made("gpu1", reason, "kernel_log", 0, resume_tiers(), drains.this_boot())
    drains.save(state, kept)
    subprocess.run([str(wrappers["rocmlab-slurm-health"])], capture_output=True, timeout=120)
    said = wait_for_line(state / "tier2.log", "after-boot: ", state / "none")
    assert f"{reason!r} waits for tier 2 after a reboot" in said, said
    # A drain tier 0 resumes by itself (needs tier 0) starts no runner.
    (state / "tier2.log").unlink()
    drains.save(
        state, drains.made("gpu1", "rocmlab: gpu_count: x", "gpu_count", 0, resume_tiers(), "")
    )
    subprocess.run([str(wrappers["rocmlab-slurm-health"])], capture_output=True, timeout=120)
    time.sleep(1)
    assert not (state / "tier2.log").exists()
