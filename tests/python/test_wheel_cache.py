"""The rocmlab wheel kept on the controller (module_utils/wheel_cache.py, action rocmlab_wheel):
built once per content of the project, reused while the sources are the same, built again when
any file the build reads changes, never read from a cache that is not the account's own.

The builds are real (`python -m pip wheel` on a copy of this checkout's pyproject.toml,
README.md and src/), as the role runs them; the digest is checked against the wheel's own bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import wheel_cache
from ansible_collections.rocmlab.rocmlab.plugins.module_utils.wheel_cache import WheelError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of what the build reads, which a test may edit."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(REPO / name, copy / name)
    shutil.copytree(
        REPO / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    return copy


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_the_same_sources_give_the_kept_wheel_and_a_change_builds_again(project, tmp_path):
    cache = tmp_path / "cache"
    first = wheel_cache.ensure(project, cache, sys.executable)
    assert first["built"] is True
    assert Path(first["wheel"]).name.startswith("rocmlab-") and first["wheel"].endswith(".whl")
    with zipfile.ZipFile(first["wheel"]) as wheel:
        assert "rocmlab/cli.py" in wheel.namelist()
    again = wheel_cache.ensure(project, cache, sys.executable)
    assert again["built"] is False
    assert (again["wheel"], again["digest"]) == (first["wheel"], first["digest"])

    cli = project / "src" / "rocmlab" / "cli.py"
    cli.write_text(cli.read_text() + "\n# changed\n")
    changed = wheel_cache.ensure(project, cache, sys.executable)
    assert changed["built"] is True and changed["digest"] != first["digest"]
    with zipfile.ZipFile(changed["wheel"]) as wheel:
        assert wheel.read("rocmlab/cli.py").endswith(b"# changed\n")
    # Built reproducibly: the old contents again give the old wheel, byte for byte.
    cli.write_text(cli.read_text().removesuffix("\n# changed\n"))
    back = wheel_cache.ensure(project, cache, sys.executable)
    assert back["digest"] == first["digest"] and back["built"] is False
    assert sha256(back["wheel"]) == sha256(first["wheel"])


def test_the_digest_follows_names_and_contents_and_ignores_pythons_caches(project):
    inputs = wheel_cache.build_inputs(project)
    assert {"README.md", "pyproject.toml"} <= set(inputs)
    assert "src/rocmlab/cli.py" in inputs
    digest = wheel_cache.source_digest(project, inputs)
    cache_dir = project / "src" / "rocmlab" / "__pycache__"
    cache_dir.mkdir(exist_ok=True)
    (cache_dir / "cli.cpython-311.pyc").write_bytes(b"\0")
    (project / "src" / "rocmlab.egg-info").mkdir()
    (project / "src" / "rocmlab.egg-info" / "PKG-INFO").write_text("x")
    (project / "src" / "rocmlab" / "linked.py").symlink_to("/etc/hostname")
    assert wheel_cache.build_inputs(project) == inputs
    assert wheel_cache.source_digest(project, inputs) == digest
    # A new file, a renamed one, an edited README: each a new digest.
    (project / "src" / "rocmlab" / "extra.py").write_text("")
    extra_digest = wheel_cache.source_digest(project, wheel_cache.build_inputs(project))
    assert extra_digest != digest
    (project / "src" / "rocmlab" / "extra.py").rename(project / "src" / "rocmlab" / "other.py")
    renamed = wheel_cache.source_digest(project, wheel_cache.build_inputs(project))
    assert renamed not in (digest, extra_digest)
    (project / "src" / "rocmlab" / "other.py").unlink()
    (project / "README.md").write_text("edited")
    assert wheel_cache.source_digest(project, inputs) != digest


def test_a_cache_that_is_not_the_accounts_own_is_refused_and_not_read(project, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(WheelError, match=r"not this account's own .*mode 0777.*chmod go-w"):
        wheel_cache.ensure(project, shared, sys.executable)
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(WheelError, match="is not a directory"):
        wheel_cache.ensure(project, link, sys.executable)
    assert not any(target.iterdir())


def test_a_planted_entry_is_not_taken_for_the_wheel(project, tmp_path):
    cache = tmp_path / "cache"
    digest = wheel_cache.source_digest(project, wheel_cache.build_inputs(project))
    entry = cache / digest
    entry.mkdir(parents=True)
    (entry / "rocmlab-0.1.0-py3-none-any.whl").symlink_to("/etc/hostname")
    assert wheel_cache.cached_wheel(cache, digest) is None
    (entry / "rocmlab-0.1.0-py3-none-any.whl").unlink()
    entry.chmod(0o777)
    assert wheel_cache.cached_wheel(cache, digest) is None


def test_something_else_where_the_wheel_goes_is_named_not_taken(project, tmp_path):
    cache = tmp_path / "cache"
    digest = wheel_cache.source_digest(project, wheel_cache.build_inputs(project))
    cache.mkdir(mode=0o700)
    (cache / digest).write_text("not a wheel")
    with pytest.raises(WheelError, match=r"cannot be kept as .*: remove "):
        wheel_cache.ensure(project, cache, sys.executable)
    assert (cache / digest).read_text() == "not a wheel"
    assert sorted(p.name for p in cache.iterdir()) == [digest]


def test_a_failed_build_names_pip_and_leaves_no_half_wheel(project, tmp_path):
    cache = tmp_path / "cache"
    (project / "pyproject.toml").write_text("[build-system\nbroken")
    with pytest.raises(WheelError, match=r"pip wheel` failed \(exit [1-9]"):
        wheel_cache.ensure(project, cache, sys.executable)
    assert [p.name for p in cache.iterdir()] == []


def test_a_missing_project_is_named(tmp_path):
    with pytest.raises(WheelError, match=r"is not rocmlab's project: .*src missing"):
        wheel_cache.ensure(tmp_path, tmp_path / "cache", sys.executable)


def test_older_wheels_are_pruned_but_the_newest(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    for n in range(7):
        entry = cache / f"{n:064x}"
        entry.mkdir()
        os.utime(entry, (1000 + n, 1000 + n))
    keep = f"{0:064x}"
    removed = wheel_cache.prune(cache, keep, keep=2)
    assert sorted(removed) == [f"{n:064x}" for n in range(1, 5)]
    assert sorted(p.name for p in cache.iterdir()) == [keep, f"{5:064x}", f"{6:064x}"]


PLAY = """
- name: The wheel, twice
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Find or build it
      rocmlab.rocmlab.rocmlab_wheel:
        project: "{{ project }}"
        cache_dir: "{{ cache }}"
      register: first
    - name: Again
      rocmlab.rocmlab.rocmlab_wheel:
        project: "{{ project }}"
        cache_dir: "{{ cache }}"
      register: second
    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ [first, second] | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def test_the_action_builds_once_and_changes_nothing(project, tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    out = tmp_path / "out.json"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections")}
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            json.dumps(
                {
                    "project": str(project),
                    "cache": str(tmp_path / "c"),
                    "out": str(out),
                    "ansible_python_interpreter": sys.executable,
                }
            ),
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    first, second = json.loads(out.read_text())
    assert (first["built"], second["built"]) == (True, False)
    assert first["changed"] is False and second["changed"] is False
    assert first["wheel"] == second["wheel"] and Path(first["wheel"]).is_file()
