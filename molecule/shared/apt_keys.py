"""Reading OpenPGP keyrings on a test host the way the rocm_repo role does."""

from __future__ import annotations


def primary_fingerprints(host, path: str) -> list[str]:
    """Fingerprints of the primary keys in the keyring file PATH on HOST (subkeys left out)."""
    out = host.check_output(
        "gpg --homedir $(mktemp -d) --batch --show-keys --with-colons %s"
        ' | awk -F: \'$1=="pub"{p=1} $1=="sub"{p=0} $1=="fpr"&&p{print $10;p=0}\'',
        path,
    )
    return out.split()
