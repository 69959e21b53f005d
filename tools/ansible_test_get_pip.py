"""pip's bootstrap for ansible-test's sanity virtual environments, without pip's bootstrap host.

ansible-test creates each sanity test's virtual environment without pip and then runs a
get-pip.py it downloads from its own file host, which this machine cannot reach. Its message
says to save one at ~/.ansible/test/cache/get_pip_<version>.py instead; tools/collection-checks
puts this file there (under a home of its own in the cache, never the user's). It does what
get-pip.py does with the arguments ansible-test gives it (pip's options and `pip==<version>`):
installs the pip that Python's standard library bundles (ensurepip, no network), then
`pip install --upgrade --force-reinstall` the packages asked for, from the package index pip is
configured with.
"""

from __future__ import annotations

import subprocess
import sys

# get-pip.py's own options: ansible-test passes them; pip install does not know them.
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main() -> int:
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    python = sys.executable
    subprocess.run(
        [python, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL
    )
    command = [python, "-m", "pip", "install", "--upgrade", "--force-reinstall", *args]
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
