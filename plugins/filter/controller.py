# Copyright: rocmlab contributors
# Apache License 2.0
"""What the controller must run, checked by the first play of playbooks/site.yml and fleet.yml.

controller_problems(ansible_core, python=None) -> [message, ...]: one message for each of
    ansible-core (ansible_version.full) and the controller's Python (this process's, unless given)
    that is older than rocmlab needs, naming the version found and the version needed; [] when
    both are new enough.

It runs on the ansible-core it checks, old ones included: nothing here needs a newer Python than
the oldest ansible-core that can load a collection.
"""

from __future__ import annotations

import platform
import re

# meta/runtime.yml's requires_ansible and pyproject.toml's requires-python (a test holds them to
# those files).
ANSIBLE_CORE = (2, 17)
PYTHON = (3, 10)
LEADING = re.compile(r"(\d+)\.(\d+)")
HOW = (
    "Install them on the controller, for example in a virtual environment of Python {1} or "
    "later: pip install 'ansible-core>={0}' (README, Requirements). Nothing on any host was "
    "changed."
)


def _major_minor(version: str) -> tuple[int, int] | None:
    match = LEADING.match(version.strip()) if isinstance(version, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def _shown(needed: tuple[int, int]) -> str:
    return ".".join(str(part) for part in needed)


def problems(ansible_core: str, python: str) -> list[str]:
    """A message for each of ANSIBLE_CORE and PYTHON that is older than rocmlab needs."""
    found = []
    for name, version, needed in (
        ("ansible-core", ansible_core, ANSIBLE_CORE),
        ("Python", python, PYTHON),
    ):
        have = _major_minor(version)
        if have is None:
            found.append(
                f"{name} {version!r} runs this playbook on the controller, a version rocmlab "
                f"cannot read; rocmlab needs {name} {_shown(needed)} or later."
            )
        elif have < needed:
            found.append(
                f"{name} {version} runs this playbook on the controller; rocmlab needs {name} "
                f"{_shown(needed)} or later."
            )
    if found:
        found.append(HOW.format(_shown(ANSIBLE_CORE), _shown(PYTHON)))
    return found


def controller_problems(ansible_core, python=None):
    """What is too old on this controller: ANSIBLE_CORE and its Python (this process's)."""
    return problems(ansible_core, platform.python_version() if python is None else python)


class FilterModule:
    def filters(self):
        return {"controller_problems": controller_problems}
