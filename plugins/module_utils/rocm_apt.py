# Copyright: rocmlab contributors
# Apache License 2.0
"""Opening the host's apt cache with python3-apt, for the rocm_packages modules."""

from __future__ import annotations


def apt_cache(module, module_name: str):
    """(python3-apt's apt_pkg, the host's apt cache); the task fails saying what to install
    when python3-apt is missing."""
    try:
        import apt_pkg
    except ImportError:
        module.fail_json(
            msg=f"{module_name} needs python3-apt on the host: apt-get install python3-apt"
        )
    apt_pkg.init()
    return apt_pkg, apt_pkg.Cache(progress=None)
