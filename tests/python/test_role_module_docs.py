"""Every module the roles ship documents itself in a form ansible-doc renders.

ansible-doc parses DOCUMENTATION, EXAMPLES and RETURN as YAML; a plain scalar with ": " in it
turns a description line into a mapping and the page fails to render, silently for Ansible
(the module still runs), so it is checked here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(REPO.glob("plugins/modules/*.py"))
ANSIBLE_DOC = shutil.which("ansible-doc", path=str(Path(sys.executable).parent)) or shutil.which(
    "ansible-doc"
)


@pytest.mark.skipif(ANSIBLE_DOC is None, reason="needs ansible-doc")
def test_ansible_doc_renders_every_role_module(tmp_path):
    assert MODULES, "no role modules found"
    library = ":".join(sorted({str(path.parent) for path in MODULES}))
    names = [path.stem for path in MODULES]
    # Run outside the repository so that its ansible.cfg (callbacks) plays no part.
    result = subprocess.run(
        [ANSIBLE_DOC, "-M", library, *names],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR" not in result.stderr, result.stderr
    for name in names:
        assert f"> MODULE {name} " in result.stdout.replace("\x1b[1m", "").replace("\x1b[0m", "")
