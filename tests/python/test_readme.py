"""The README as a lab admin reads it: short, starting with the project's two commands, every
command of its sh blocks run by a test, a scenario or a tool of this checkout (RUNNERS, held to
the files that run them), its links resolving, and the places other parts fill (the release
change, the hardware verified) where they belong."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from fleet_testutil import smoke_report
from rocmlab_testutil import REPO

from rocmlab.doctor import CHECKS

README = REPO / "README.md"
MAX_WORDS = 1250

# Each command of the README's sh blocks -> the file that runs it and what in that file does:
# the command as written where the file runs it so; where a scenario or tool runs the same
# playbook or command with its own paths (its inventory, its output directory), those lines.
# None: the command is that file itself, a tool of this checkout.
RUNNERS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "tools/demo": ("tools/demo", None),
    "tools/test": (".ci/run", ("exec tools/test",)),
    # The same playbook over the demo host's inventory.
    "ansible-playbook -i inventory/localhost.yml playbooks/site.yml --ask-become-pass": (
        "tools/demo",
        ("ansible-playbook -i inventory/demo/hosts.yml playbooks/site.yml",),
    ),
    "ansible-galaxy collection build --output-path dist .": (
        "tools/collection-checks",
        ('ansible-galaxy collection build --output-path "$work/dist" .',),
    ),
    "ansible-galaxy collection install dist/rocmlab-rocmlab-*.tar.gz": (
        "tools/collection-checks",
        (
            "tarball=$(find \"$work/dist\" -name 'rocmlab-rocmlab-*.tar.gz' -print -quit)",
            'ansible-galaxy collection install --force -p "$tree" "$tarball"',
        ),
    ),
    # Each case of the fleet scenario runs fleet.yml over its own inventory of five hosts.
    "ansible-playbook -i inventory/lab playbooks/fleet.yml": (
        "molecule/fleet/tests/test_fleet.py",
        ('FLEET = PROJECT / "playbooks" / "fleet.yml"', '["ansible-playbook", "-i", str(inv)'),
    ),
    # The README's release change: the migration scenario reads the section and runs its blocks
    # as written, with its own inventory in place of inventory/lab.
    "ansible-playbook -i inventory/lab playbooks/site.yml": (
        "molecule/migration/tests/test_release_change.py",
        ('blocks = readme_section("## Changing the ROCm release")',),
    ),
    # The framework suite, for the PyTorch venv of the pytorch_rocm scenario (module torch).
    ". /opt/rocmlab/venvs/pytorch/bin/activate": (
        "molecule/shared/framework_suite.py",
        (
            "return f\"/opt/rocmlab/venvs/{'pytorch' if self.module == 'torch' else self.module}\"",
            "bash -c '. {venv}/bin/activate && echo $VIRTUAL_ENV'",
        ),
    ),
    # As the researcher, before the smoke job trains (the smoke_test scenario).
    "rocmlab doctor": (
        "roles/smoke_test/tasks/run.yml",
        ("[smoke_test_venv ~ '/bin/rocmlab', 'doctor', '--json'",),
    ),
}


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of LANGUAGE in TEXT."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of an sh block: its lines without comments, continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            found.append(line.split(" #", 1)[0].strip())
    return found


def flat(text: str) -> str:
    return " ".join(text.split())


def readme_commands() -> list[str]:
    return [c for block in blocks(README.read_text(), "sh") for c in commands(block)]


def test_the_readme_reads_in_five_minutes():
    words = len(README.read_text().split())
    assert words <= MAX_WORDS, f"README.md has {words} words, at most {MAX_WORDS}"


def test_the_readme_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert lines[0] == "# rocmlab"
    assert lines[2:6] == [
        "```sh",
        "tools/demo    # provision the demo lab host (a local Debian 12 container) with "
        "playbooks/site.yml, smoke job included",
        "tools/test    # lint, pytest and every Molecule scenario (what CI runs)",
        "```",
    ]


def test_every_command_of_the_readme_is_run_by_a_test_a_scenario_or_a_tool():
    found = readme_commands()
    assert len(found) == len(set(found)), "a command written twice"
    unmapped = [c for c in found if c not in RUNNERS]
    assert not unmapped, f"README commands nothing here runs (add them to RUNNERS): {unmapped}"
    stale = [c for c in RUNNERS if c not in found]
    assert not stale, f"RUNNERS lists commands the README no longer has: {stale}"


@pytest.mark.parametrize("command", sorted(RUNNERS))
def test_the_file_that_runs_a_command_really_does(command):
    name, lines = RUNNERS[command]
    path = REPO / name
    assert path.is_file(), name
    if lines is None:
        assert command.split()[0] == name and path.stat().st_mode & 0o111, name
        return
    text = flat(path.read_text())
    for line in lines:
        assert flat(line) in text, f"{name} no longer has {line!r} (it ran {command!r})"


def test_a_command_the_readme_does_not_run_fails_the_map(monkeypatch, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README.read_text() + "\n```sh\nrm -rf /opt/rocm   # not run anywhere\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "README", readme)
    with pytest.raises(AssertionError, match="rm -rf /opt/rocm"):
        test_every_command_of_the_readme_is_run_by_a_test_a_scenario_or_a_tool()


def section(title: str) -> str:
    text = README.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README.md has no section {title!r}"
    return match.group(1)


def test_the_release_change_is_written_as_its_scenario_runs_it():
    assert section("Changing the ROCm release") == (
        "Set the release in the inventory; the frameworks follow it (their newest build for "
        "that release) unless you pinned them:\n\n"
        '```yaml\n# inventory/lab/group_vars/all.yml\nrocm_repo_version: "7.1"\n```\n\n'
        "```sh\nansible-playbook -i inventory/lab playbooks/site.yml\n```\n\n"
    )


def test_the_verified_section_is_its_generated_block():
    """The section is tools/role_docs.py's table alone (its --check holds the rows to
    docs/verified.json)."""
    lines = section("Verified on hardware").strip().splitlines()
    assert lines[0] == "<!-- BEGIN verified: generated -->"
    assert lines[-1] == "<!-- END verified -->"


def test_the_readme_names_what_a_user_finds_on_a_host():
    text = flat(README.read_text())
    for fact in (
        "/opt/rocmlab/venvs/pytorch",
        "/opt/rocmlab/venvs/tensorflow",
        "log out and back in",
        "rocmlab doctor",
        "ansible-core 2.17 or later on Python 3.10 or later",
    ):
        assert fact in text, fact
    defaults = (REPO / "roles" / "tensorflow_rocm" / "defaults" / "main.yml").read_text()
    assert "tensorflow_rocm_venv: /opt/rocmlab/venvs/tensorflow\n" in defaults
    pytorch = (REPO / "roles" / "pytorch_rocm" / "defaults" / "main.yml").read_text()
    assert "pytorch_rocm_venv: /opt/rocmlab/venvs/pytorch\n" in pytorch


@pytest.mark.parametrize(
    "page",
    ["README.md", "CONTRIBUTING.md", "docs/lab.md", "docs/rollback.md", "docs/roles.md"],
)
def test_the_links_resolve(page):
    path = REPO / page
    broken = [
        target
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
        if not target.startswith(("http://", "https://"))
        and not (path.parent / target).resolve().exists()
    ]
    assert not broken, f"{page}: {broken}"


def test_the_doctor_table_the_readme_links_lists_every_check():
    """Troubleshooting sends a user to docs/doctor.md's table: it has one row per check, in the
    order the doctor prints them."""
    table = re.findall(r"^\| `([a-z_]+)` \|", (REPO / "docs" / "doctor.md").read_text(), re.M)
    assert table == [name for name, _ in CHECKS]


# --- tools/demo ends with the verdict ---------------------------------------------------------
DEMO = REPO / "tools" / "demo"


def demo_verdict(tmp_path, report: dict | None) -> subprocess.CompletedProcess:
    """The demo's last step (its Python between <<'PY' and PY) in a checkout-like directory with
    the collection's link and REPORT as the demo host's smoke report (None: no report)."""
    script = re.search(r"<<'PY'\n(.*?)^PY$", DEMO.read_text(), re.S | re.M).group(1)
    (tmp_path / "collections").symlink_to(REPO / "collections")
    (tmp_path / "reports").mkdir()
    if report is not None:
        (tmp_path / "reports" / "rocmlab-demo.json").write_text(json.dumps(report))
    return subprocess.run(
        [sys.executable, "-", "rocmlab-demo"],
        input=script,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_demo_prints_nothing_after_its_verdict():
    text = DEMO.read_text()
    assert text.rstrip().endswith("PY"), "tools/demo prints something after its verdict"
    status = text[text.index("ansible-playbook -i inventory/demo/hosts.yml") :]
    assert 'exit "$status"' in status.split("<<'PY'")[0]


def test_the_demo_verdict_is_the_smoke_reports_line(tmp_path):
    run = demo_verdict(tmp_path, smoke_report("rocmlab-demo"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("rocmlab-demo: PASSED, ")
    assert run.stdout.count("\n") == 1 and "test accuracy" in run.stdout


def test_a_failed_or_missing_report_is_a_failed_demo(tmp_path):
    (tmp_path / "failed").mkdir()
    failed = demo_verdict(tmp_path / "failed", smoke_report("rocmlab-demo", passed=False))
    assert failed.returncode == 1 and failed.stdout.startswith("rocmlab-demo: FAILED")
    (tmp_path / "missing").mkdir()
    missing = demo_verdict(tmp_path / "missing", None)
    assert missing.returncode == 1
    assert missing.stdout == "rocmlab-demo: no report (the smoke job did not run there)\n"
