"""Reading OpenPGP keyrings on a test host the way the rocm_repo role does.

gpg runs on the test host; its --with-colons output is parsed here by the role's own parser
(plugins/module_utils/rocm_gpg.py, plain Python), so the verifiers and the role's
modules cannot disagree on which fingerprints are primary keys.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_ROCM_GPG = Path(__file__).resolve().parents[2] / "plugins/module_utils/rocm_gpg.py"
_spec = importlib.util.spec_from_file_location("rocm_gpg", _ROCM_GPG)
assert _spec is not None and _spec.loader is not None
rocm_gpg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rocm_gpg)


def primary_fingerprints(host, path: str) -> list[str]:
    """Fingerprints of the primary keys in the keyring file PATH on HOST (subkeys left out)."""
    colons = host.check_output(
        'home=$(mktemp -d) && gpg --homedir "$home" --batch --no-autostart'
        ' --show-keys --with-colons %s; rc=$?; rm -rf "$home"; exit $rc',
        path,
    )
    return rocm_gpg.primary_fingerprints(colons)
