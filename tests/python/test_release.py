"""Releases a user can follow: one version everywhere it is written, a CHANGELOG.md that shows
every release the changelog holds, and playbooks/reset.yml removing every role site.yml applies,
in the reverse order (docs/releasing.md, docs/upgrading.md)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import registry

REPO = Path(__file__).resolve().parents[2]
VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_version_is_the_same_in_galaxy_pyproject_and_the_package() -> None:
    pyproject = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    package = re.search(
        r'^__version__ = "([^"]+)"$', (REPO / "src/rocmlab/__init__.py").read_text(), re.M
    )
    assert pyproject and package, "pyproject.toml or src/rocmlab/__init__.py names no version"
    assert (pyproject.group(1), package.group(1)) == (VERSION, VERSION)


def test_changelog_md_shows_every_release_and_none_is_newer_than_the_version() -> None:
    releases = yaml.safe_load((REPO / "changelogs/changelog.yaml").read_text())["releases"] or {}
    rendered = (REPO / "CHANGELOG.md").read_text()
    for release in releases:
        heading = "## v" + release.replace(".", r"\.")
        assert heading in rendered.splitlines(), (
            f"CHANGELOG.md has no {heading!r}: run antsibull-changelog generate"
        )
        assert version_key(release) <= version_key(VERSION), (release, VERSION)


def reset_roles() -> list[tuple[str, str]]:
    """(role, how) of every role playbooks/reset.yml applies, in order: how is its entry point,
    or the state setting the call sets to absent."""
    plays = yaml.safe_load((REPO / "playbooks/reset.yml").read_text())
    found = []
    for play in plays:
        for task in play.get("tasks", []):
            for step in task.get("block", []):
                args = step.get("ansible.builtin.include_role")
                if not args or args.get("tasks_from") in ("lock", "unlock"):
                    continue
                role = args["name"].rsplit(".", 1)[-1]
                state = (step.get("vars") or {}).get(f"{role}_state")
                found.append((role, args.get("tasks_from") or f"{role}_state: {state}"))
    return found


def test_reset_removes_every_role_site_applies_in_the_reverse_order() -> None:
    regs = yaml.safe_load((REPO / "roles/rocmlab/vars/main.yml").read_text())
    site = registry.roles(regs["__rocmlab_registry"])["site"]
    found = reset_roles()
    assert [role for role, _ in found] == list(reversed(site))
    for role, how in found:
        if how == "absent":
            assert (REPO / "roles" / role / "tasks" / "absent.yml").is_file(), role
            specs = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())
            assert "absent" in specs["argument_specs"], role
        else:
            assert how == f"{role}_state: absent", (role, how)
