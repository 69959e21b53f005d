"""``rocmlab fetch-mnist``: stage a dataset's IDX files from a mirror URL or a directory.

Every file is verified against its known SHA-256 before it is put in place (atomically). HTTP
downloads resume from a ``.<name>.part`` file with a Range request, retry a bounded number of
times with exponential back-off, and start over when a resumed file does not verify.
"""

from __future__ import annotations

import http.client
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocmlab import __version__
from rocmlab.common.errors import DataError
from rocmlab.datasets.catalog import DatasetSpec, IdxFileSpec
from rocmlab.datasets.datadir import decompressed, search_dirs, verify_content

Log = Callable[[str], None]
MAX_DELAY = 30.0
CHUNK = 1 << 20


@dataclass(frozen=True)
class FetchOptions:
    """How hard to try."""

    attempts: int = 5  # per file, first try included
    timeout: float = 30.0  # seconds per socket operation
    retry_delay: float = 1.0  # first back-off; doubles each retry, capped at MAX_DELAY


class TransientError(Exception):
    """A failure worth retrying: network error, server error, short read."""


class NotFound(Exception):
    """The mirror does not have this name (HTTP 404/410): try the next name."""


def is_url(source: str) -> bool:
    """Whether ``source`` is an http(s) URL."""
    return urllib.parse.urlsplit(source).scheme in ("http", "https")


def source_dir(source: str) -> Path:
    """A local directory source, given as a path or a file:// URL."""
    parts = urllib.parse.urlsplit(source)
    if parts.scheme == "file":
        return Path(urllib.parse.unquote(parts.path))
    return Path(source)


def fetch_dataset(
    source: str, dest: Path, spec: DatasetSpec, options: FetchOptions, log: Log = print
) -> dict[str, Path]:
    """Stage all files of ``spec`` from ``source`` into ``dest``; return role -> staged path."""
    dest.mkdir(parents=True, exist_ok=True)
    is_source = not is_url(source) and dest_is_source(source_dir(source), dest, spec)
    staged: dict[str, Path] = {}
    for fspec in spec.files:
        existing = already_staged(dest, fspec, log, is_source)
        if existing is not None:
            log(f"{existing.name}: already staged and verified")
            staged[fspec.role] = existing
        elif is_url(source):
            staged[fspec.role] = download_file(source, dest, fspec, options, log)
        else:
            staged[fspec.role] = copy_file(source_dir(source), dest, spec, fspec, log)
    return staged


def dest_is_source(src_root: Path, dest: Path, spec: DatasetSpec) -> bool:
    """Whether ``dest`` is one of the directories the local source is read from (``--from`` and
    ``--dest`` the same directory, through a link, a relative path or torchvision's layout)."""
    if not src_root.is_dir():
        return False
    target = dest.resolve()
    return any(d.resolve() == target for d in search_dirs(src_root, spec) if d.is_dir())


def already_staged(
    dest: Path, fspec: IdxFileSpec, log: Log, is_source: bool = False
) -> Path | None:
    """A verified copy of ``fspec`` in ``dest``. Copies that fail verification are removed, unless
    ``dest`` is also the source: then the file is the only copy, and DataError names it."""
    for name in fspec.names:
        path = dest / name
        if not path.is_file():
            continue
        try:
            verify_content(path, decompressed(path, path.read_bytes()), fspec)
        except DataError as exc:
            if is_source:
                raise DataError(
                    f"{exc}; not removed: {dest} is also the source (--from), so this file is "
                    "the only copy (restore it, or stage from another --from)"
                ) from exc
            log(f"removing {path}: {exc}")
            path.unlink()
            continue
        return path
    return None


def copy_file(src_root: Path, dest: Path, spec: DatasetSpec, fspec: IdxFileSpec, log: Log) -> Path:
    """Copy one verified file from a local directory (flat or torchvision layout)."""
    if not src_root.is_dir():
        raise DataError(
            f"--from {src_root}: not a directory (expected an http(s):// or file:// mirror URL "
            "or a directory holding the IDX files)"
        )
    for directory in search_dirs(src_root, spec):
        for name in fspec.names:
            path = directory / name
            if path.is_file():
                verify_content(path, decompressed(path, path.read_bytes()), fspec)
                target = dest / name
                tmp = dest / f".{name}.part"
                shutil.copyfile(path, tmp)
                os.replace(tmp, target)
                log(f"{name}: copied from {path} (verified)")
                return target
    raise DataError(
        f"{fspec.stem}[.gz] not found in {', '.join(map(str, search_dirs(src_root, spec)))}"
    )


def download_file(
    base_url: str, dest: Path, fspec: IdxFileSpec, options: FetchOptions, log: Log
) -> Path:
    """Download one file from the mirror, trying each accepted name; verify, then move in place."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    # Mirrors usually carry the gzipped files: ask for those first.
    names = sorted(fspec.names, key=lambda n: not n.endswith(".gz"))
    for name in names:
        url = urllib.parse.urljoin(base, urllib.parse.quote(name))
        try:
            return download_verified(url, dest / name, fspec, options, log)
        except NotFound:
            continue
    raise DataError(f"{fspec.stem}: not found on the mirror {base} (tried {', '.join(names)})")


def download_verified(
    url: str, target: Path, fspec: IdxFileSpec, options: FetchOptions, log: Log
) -> Path:
    """Fetch ``url`` into ``target`` with bounded retries, resuming; raise NotFound on 404."""
    part = target.with_name(f".{target.name}.part")
    last_error = ""
    bad_content = 0  # a mirror serving a wrong file gets one fresh retry, not all attempts
    for attempt in range(1, options.attempts + 1):
        if attempt > 1:
            delay = min(options.retry_delay * 2 ** (attempt - 2), MAX_DELAY)
            log(
                f"{target.name}: attempt {attempt}/{options.attempts} in {delay:g} s ({last_error})"
            )
            time.sleep(delay)
        resumed_from = part.stat().st_size if part.exists() else 0
        try:
            http_get_resuming(url, part, options.timeout)
        except TransientError as exc:
            last_error = str(exc)
            continue
        try:
            verify_content(target, decompressed(target, part.read_bytes()), fspec)
        except DataError as exc:
            part.unlink()  # start over: a resumed file may have joined two different versions
            last_error = f"downloaded file did not verify: {exc}"
            bad_content += 1
            if bad_content == 2:
                raise DataError(f"{url}: {last_error}") from exc
            continue
        os.replace(part, target)
        how = f" (resumed at byte {resumed_from})" if resumed_from else ""
        log(f"{target.name}: downloaded from {url}{how} (verified)")
        return target
    raise DataError(f"{url}: giving up after {options.attempts} attempts: {last_error}")


def http_get_resuming(url: str, part: Path, timeout: float) -> None:
    """Append the rest of ``url`` to ``part`` (Range request when it is non-empty)."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"rocmlab/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            raise NotFound(url) from exc
        if exc.code == 416 and offset:
            return  # the part is already complete; verification decides
        raise TransientError(f"HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise TransientError(f"{type(exc).__name__}: {exc}") from exc
    with response:
        if response.status == 206:
            start = parse_content_range_start(response.headers.get("Content-Range", ""))
            if start != offset:
                part.unlink(missing_ok=True)
                raise TransientError(f"server resumed at byte {start}, asked for {offset}")
            mode = "ab"
        else:
            mode = "wb"
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        received = 0
        try:
            with part.open(mode) as handle:
                while chunk := response.read(CHUNK):
                    handle.write(chunk)
                    received += len(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise TransientError(f"connection lost after {received} bytes: {exc}") from exc
    if expected is not None and received < expected:
        raise TransientError(f"short read: got {received} of {expected} bytes")


def parse_content_range_start(value: str) -> int | None:
    """First byte of a ``Content-Range: bytes START-END/TOTAL`` header, or None."""
    unit, _unused, spec = value.partition(" ")
    start, _unused, _unused2 = spec.partition("-")
    return int(start) if unit == "bytes" and start.isdigit() else None
