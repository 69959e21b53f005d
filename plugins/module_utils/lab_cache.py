# Copyright: rocmlab contributors
# Apache License 2.0
"""What the lab cache's modules share (lab_cache_fill, lab_cache_bundle)."""

from __future__ import annotations

import hashlib


def sha256_of(path):
    """The SHA-256 of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
