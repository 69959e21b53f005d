# Copyright: rocmlab contributors
# Apache License 2.0
"""The lab cache's apt fill: which packages a client's run installs, and which package files
the cache fetches once, for every client of a batch, before any of them downloads one.

apt-cacher-ng fetches on demand: several clients asking for the same .deb at the same moment
can make it open a second upstream transfer. So each client asks its own apt which files this
run's packages need that it does not hold (``apt-get install --print-uris``: its own sources,
pins, configuration and installed packages, nothing replicated elsewhere), and the cache host
fetches the union of those lists through its own apt-cacher-ng, each file once (several
distinct files at once), before any client installs. The lists come from lab machines: they
are parsed here, bounded, and only plain ``http://`` URLs of ``.deb`` files are fetched
(never a query, never the cache's own pages), each checked against the size and hash the
client's apt gave.

Pure functions (tests/python/test_lab_cache_apt.py); the modules lab_cache_apt_uris (on a
client) and lab_cache_apt_fill (on the cache host) call them.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# apt package names (Debian policy 5.6.1), with an architecture qualifier and an exact version
# (the release move's ``name=version``) allowed.
PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?")
# What the venv module takes on Debian and Ubuntu (role framework_venv).
VENV_PACKAGE = "python3-venv"

# The paths under which the lab cache's apt-cacher-ng serves AMD's repositories (role lab_cache's
# Remap- directives; role rocmlab's rocmlab_lab_cache_urls): the legacy line's, the Core SDK's.
REMAPS = ("amd", "amdcore")

# Bounds on what a client sends: its print-uris output.
MAX_TEXT = 16 << 20
MAX_LINE = 4096
MAX_FILES = 20000
# One package file: under 64 GiB.
MAX_SIZE = 1 << 36
HASHES = {"SHA512": 128, "SHA256": 64, "SHA1": 40, "MD5Sum": 32}
# 'URI' FILENAME SIZE HASHNAME:HEX, as apt-get --print-uris -qq writes it.
URI_LINE = re.compile(
    r"'(?P<uri>[^'\s]+)' (?P<name>[^\s']+) (?P<size>[0-9]{1,15}) "
    r"(?P<hash_name>[A-Za-z0-9]+):(?P<hash>[0-9a-f]+)"
)
# What a fetched URL may hold: RFC 3986 characters, no quote, backslash or space.
URL_CHARS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+")


def apt_wants(rocm=(), driver=(), pytorch_plan=None, tensorflow_plan=None):
    """The apt packages this run installs on a host, from its roles' settings, sorted: ROCm's
    (rocm_packages' list, the release move's ``name=version``), the kernel driver's, the
    distribution's PyTorch (pytorch_rocm_plan's ``packages``), and the venv module when a
    framework goes in a venv (a plan whose ``python_found`` is set: pip). Raises ValueError on
    a name apt would not take."""
    wanted = set(rocm) | set(driver)
    for plan in (pytorch_plan or {}), (tensorflow_plan or {}):
        wanted |= set(plan.get("packages") or ())
        if plan.get("python_found"):
            wanted.add(VENV_PACKAGE)
    for name in wanted:
        if not isinstance(name, str) or not PACKAGE.fullmatch(name):
            raise ValueError(
                f"{name!r} is not an apt package name (lower-case letters, digits, + . -,"
                " optionally :arch and =version)"
            )
    return sorted(wanted)


def parse_print_uris(text):
    """The files of one client's ``apt-get install --print-uris -qq`` output, as (files,
    problems): each file {uri, size, hash_name, hash}; each problem a sentence. A line that is
    not apt's form is a problem and left out; more than MAX_FILES files, or a text over
    MAX_TEXT bytes, is refused whole."""
    if not isinstance(text, str):
        return [], ["the list is not text"]
    if len(text.encode("utf-8", errors="replace")) > MAX_TEXT:
        return [], [f"the list is over {MAX_TEXT} bytes: refused whole"]
    files, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            problems.append(f"line {number} is over {MAX_LINE} characters")
            continue
        match = URI_LINE.fullmatch(line.strip())
        if not match:
            problems.append(f"line {number} is not apt's 'URI' file size hash form")
            continue
        name, digest = match["hash_name"], match["hash"]
        if HASHES.get(name) != len(digest):
            problems.append(
                f"line {number}: {name} is not a hash apt gives with {len(digest)} digits"
            )
            continue
        size = int(match["size"])
        if size > MAX_SIZE:
            problems.append(f"line {number}: {size} bytes is more than a package file holds")
            continue
        files.append({"uri": match["uri"], "size": size, "hash_name": name, "hash": digest})
        if len(files) > MAX_FILES:
            return [], [f"more than {MAX_FILES} files: refused whole"]
    return files, problems


def _under(remaps):
    """The remapped paths REMAPS (one name or several) as /NAME/ prefixes."""
    return tuple(f"/{name}/" for name in ((remaps,) if isinstance(remaps, str) else remaps))


def cache_target(uri, cache, remaps=REMAPS):
    """How the cache host asks its own apt-cacher-ng for URI, as (request target, proxied):
    a URL on the cache itself (CACHE is its ``host:port`` as the clients name it) is asked
    directly by its path, which must be under one of /REMAPS/ (AMD's repositories of either
    line); any other URL through the proxy, whole. Raises ValueError for anything but a plain
    http URL of a .deb file."""
    if not URL_CHARS.fullmatch(uri) or not uri.startswith("http://"):
        raise ValueError("is not a plain http:// URL (apt fetches https:// without the cache)")
    parts = urlsplit(uri)
    if parts.query or parts.fragment or "?" in uri or "#" in uri:
        raise ValueError("has a query or fragment")
    if not parts.hostname or not parts.path.endswith(".deb"):
        raise ValueError("is not the URL of a .deb file")
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        raise ValueError("has a . or .. segment")
    if parts.username is not None or parts.password is not None:
        raise ValueError("holds credentials")
    if parts.netloc.lower() == cache.lower():
        under = _under(remaps)
        if not parts.path.startswith(under):
            raise ValueError(f"is on the cache itself but not under {' or '.join(under)}")
        return parts.path, False
    return uri, True


def fill_plan(wants, cache, remaps=REMAPS):
    """What the cache host fetches for its clients, from WANTS ({client: print-uris text}):
    (files, problems). Each file once, sorted by URL: {uri, target, proxied, size, hash_name,
    hash, clients}. Two clients naming one URL with another size or hash keep the first
    client's (in name order) and name the other in a problem; its own apt refuses what it gets
    if that is wrong for it."""
    files, problems = {}, []
    for client in sorted(wants):
        parsed, trouble = parse_print_uris(wants[client])
        problems.extend(f"{client}: {sentence}" for sentence in trouble)
        for entry in parsed:
            uri = entry["uri"]
            try:
                target, proxied = cache_target(uri, cache, remaps)
            except ValueError as exc:
                problems.append(f"{client}: {uri} {exc}: not fetched")
                continue
            known = files.get(uri)
            if known is None:
                files[uri] = {**entry, "target": target, "proxied": proxied, "clients": [client]}
            elif (known["size"], known["hash_name"], known["hash"]) != (
                entry["size"],
                entry["hash_name"],
                entry["hash"],
            ):
                problems.append(
                    f"{client}: {uri} has size {entry['size']} and {entry['hash_name']}"
                    f" {entry['hash']}, {known['clients'][0]} gave {known['size']} and"
                    f" {known['hash_name']} {known['hash']}: fetched once, as the first gave it"
                )
            elif client not in known["clients"]:
                # A client's list naming a file twice counts that client once.
                known["clients"].append(client)
    return [files[uri] for uri in sorted(files)], problems
