# Copyright: rocmlab contributors
# Apache License 2.0
"""Reading and rewriting OpenPGP keyring files with gpg, as apt's keyrings need.

Shared by the rocm_keyring_info and rocm_keyring modules, and plain Python (no Ansible import)
so that the Molecule verifiers parse gpg's output with the same code. gpg always runs with a
private, temporary home directory and never starts an agent: nothing outside the files named
is read or written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

_FINGERPRINT_RE = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")
_ARMOR_HEADER = b"-----BEGIN PGP "


class GpgError(Exception):
    """gpg failed; the message is what gpg said."""


class GpgMissing(GpgError):
    """No gpg program on this host."""


def primary_fingerprints(colons: str) -> list[str]:
    """Fingerprints of the primary keys in gpg's --with-colons output, in gpg's order.

    A ``pub`` (or ``sec``) record starts a primary key and the first ``fpr`` record after it
    carries its fingerprint in field 10; the ``fpr`` records after ``sub``/``ssb`` belong to
    subkeys and are left out.
    """
    found: list[str] = []
    expecting = False
    for line in colons.splitlines():
        fields = line.split(":")
        record = fields[0]
        if record in ("pub", "sec"):
            expecting = True
        elif record in ("sub", "ssb"):
            expecting = False
        elif record == "fpr" and expecting and len(fields) > 9:
            found.append(fields[9])
            expecting = False
    return found


def normalize_fingerprint(text: str) -> str | None:
    """TEXT as gpg prints a fingerprint (upper case, no spaces), or None if it is not one."""
    fingerprint = re.sub(r"\s", "", text).upper()
    return fingerprint if _FINGERPRINT_RE.fullmatch(fingerprint) else None


def is_armored(data: bytes) -> bool:
    """Whether DATA is ASCII-armored (as apt's *.asc keyrings are) rather than binary."""
    return data.lstrip().startswith(_ARMOR_HEADER)


class ScratchGpg:
    """gpg run in a private temporary home directory, removed on exit."""

    def __init__(self, program: str = "gpg") -> None:
        self.program = program
        self.home = ""

    def __enter__(self) -> ScratchGpg:
        self.home = tempfile.mkdtemp(prefix="rocm-gpg-")
        return self

    def __exit__(self, *_exc: object) -> None:
        shutil.rmtree(self.home, ignore_errors=True)

    def run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """gpg ARGS in the scratch home (never starting an agent); the result, whatever rc."""
        command = [self.program, "--homedir", self.home, "--batch", "--no-tty", "--no-autostart"]
        env = dict(os.environ, LC_ALL="C")
        try:
            return subprocess.run([*command, *args], capture_output=True, env=env, check=False)
        except FileNotFoundError as err:
            raise GpgMissing(
                f"{self.program} is not installed on this host: apt-get install gpg"
            ) from err

    def check(self, *args: str) -> bytes:
        """gpg ARGS' standard output; GpgError with gpg's messages when it fails."""
        result = self.run(*args)
        if result.returncode != 0:
            raise GpgError(said(result) or f"gpg exited with status {result.returncode}")
        return result.stdout

    def show_keys(self, path: str) -> tuple[list[str], str | None]:
        """(primary fingerprints gpg could read in the key file PATH, its complaint or None)."""
        result = self.run("--show-keys", "--with-colons", path)
        found = primary_fingerprints(result.stdout.decode("utf-8", "replace"))
        error = None
        if result.returncode != 0:
            error = said(result) or f"gpg exited with status {result.returncode}"
        return found, error

    def import_keys(self, path: str) -> list[str]:
        """Import the keys of PATH into the scratch home; the primary fingerprints it holds."""
        self.check("--quiet", "--import", path)
        colons = self.check("--list-keys", "--with-colons").decode("utf-8", "replace")
        return primary_fingerprints(colons)

    def export(self, fingerprints: list[str], armor: bool) -> bytes:
        """The keys FINGERPRINTS (imported before) as a keyring; empty for no fingerprints."""
        if not fingerprints:
            return b""
        return self.check(*(["--armor"] if armor else []), "--export", *fingerprints)


def said(result: subprocess.CompletedProcess[bytes]) -> str:
    """What gpg wrote to standard error, without its chatter about the scratch home."""
    lines = result.stderr.decode("utf-8", "replace").splitlines()
    chatter = ("keybox '", "no gpg-agent running", "trustdb created")
    return "; ".join(line for line in lines if not any(c in line for c in chatter)).strip()


def keyring_fingerprints(path: str, program: str = "gpg") -> tuple[list[str], str | None]:
    """(primary fingerprints in the keyring file PATH, gpg's complaint or None); read-only."""
    with ScratchGpg(program) as gpg:
        return gpg.show_keys(path)


class KeyNotFound(GpgError):
    """The key file does not hold the wanted primary key."""

    def __init__(self, path: str, fingerprint: str, found: list[str]) -> None:
        super().__init__(
            f"{path} holds no primary key {fingerprint}; its primary keys: "
            + (", ".join(found) or "none")
        )
        self.found = found


def exported_key(src: str, fingerprint: str, armor: bool, program: str = "gpg") -> bytes:
    """The primary key FINGERPRINT of the key file SRC, alone, as a keyring (binary or armored).

    Raises KeyNotFound (with the fingerprints SRC does hold) when it is not there.
    """
    with ScratchGpg(program) as gpg:
        found = gpg.import_keys(src)
        if fingerprint not in found:
            raise KeyNotFound(src, fingerprint, found)
        return gpg.export([fingerprint], armor)


def without_key(path: str, fingerprint: str, program: str = "gpg") -> tuple[bytes, list[str]]:
    """(the keyring file PATH rewritten without the primary key FINGERPRINT, keys left).

    The other keys are exported again by gpg, in the file's own format (armored or binary).
    """
    with open(path, "rb") as handle:
        armor = is_armored(handle.read())
    with ScratchGpg(program) as gpg:
        left = [found for found in gpg.import_keys(path) if found != fingerprint]
        return gpg.export(left, armor), left
