"""Helpers shared by the rocmlab package tests (fixtures are in conftest.py)."""

from __future__ import annotations

import contextlib
import gzip
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from rocmlab.datasets.idx import encode_idx

REPO = Path(__file__).resolve().parents[2]
STAGE_TOOL = REPO / "tools" / "stage-test-data"


def load_module(name: str, path: Path) -> ModuleType:
    """The Python file PATH (a plugin or module_utils file of the collection) as module NAME."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def playbook_run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook ARGS from the repository, with its configuration and this checkout as
    the collection."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
            ANSIBLE_ROLES_PATH=str(REPO / "roles"),
            **env,
        ),
        check=False,
    )


def link_dataset(source: Path, target: Path, names: dict[str, str]) -> Path:
    """Symlink ``source/<old>`` as ``target/<new>`` for each ``old: new`` of ``names``."""
    target.mkdir(parents=True, exist_ok=True)
    for old, new in names.items():
        (target / new).symlink_to(source / old)
    return target


def copy_dataset(source: Path, target: Path) -> Path:
    """Real copies (not links) of every file in ``source``, so tests can damage them."""
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def write_idx(path: Path, shape: tuple[int, ...], fill: int = 0, gz: bool = False) -> bytes:
    """Write a synthetic uint8 IDX file (real IDX format, made-up pixels); return its content."""
    count = 1
    for dim in shape:
        count *= dim
    content = encode_idx(shape, bytes((fill + i) % 256 for i in range(count)))
    path.write_bytes(gzip.compress(content) if gz else content)
    return content


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m rocmlab ARGS`` in a subprocess, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "rocmlab", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a Python where ``import torch`` fails."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from rocmlab.cli import main\n"
        f"sys.exit(main({list(args)!r}))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)


@contextlib.contextmanager
def loopback_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 answering with HANDLER, one thread per request; yields its
    port and stops it afterwards."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def send_body(handler: http.server.BaseHTTPRequestHandler, body: bytes | None) -> None:
    """Answer HANDLER's request with BODY (200 and its length), or 404 for None."""
    if body is None:
        handler.send_error(404, "Not Found")
        return
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def role_docs_tree(target: Path) -> Path:
    """What tools/role_docs.py reads and writes, copied into TARGET so that a test can make it
    drift: the roles, the playbooks (a fact they set is a role's to list), the inventories (the
    lab example), rocmlab's data (the CLI's contract, the support catalog), the catalog's reader
    and its copy, the README (the support table and the verified runs' table) and
    docs/network.md (the network tables)."""
    for name in ("roles", "playbooks", "inventory", "src/rocmlab/data"):
        shutil.copytree(REPO / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in (
        "README.md",
        "docs/verified.json",
        "docs/network.md",
        "plugins/module_utils/support_catalog.py",
        "src/rocmlab/common/support_catalog.py",
        "plugins/module_utils/rocm_installed.py",
        "src/rocmlab/common/rocm_installed.py",
    ):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, target / name)
    return target
