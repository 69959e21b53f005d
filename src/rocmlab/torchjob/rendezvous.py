"""The port of a job's store: taking it, naming who holds it, and saying what to do. No torch.

Under torchrun the agent of node rank 0 serves the job's store. A job started without torchrun's
agent (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand or by another launcher) has
rank 0 serve it: :func:`listen_socket` takes the port first, as torch's TCPStore would (every
address, IPv6 and IPv4, SO_REUSEADDR), so that a port held by another process is found before
torch is asked, and :func:`port_holder` names that process where /proc lets this account see it.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from rocmlab.common.hostread import MIB, read_bounded

TCP_LISTEN = "0A"  # the state column of /proc/net/tcp
PROC_NET_LIMIT = 16 * MIB
WHAT_TO_DO = (
    "stop that process, or choose another port (MASTER_PORT; torchrun's --master-port or the "
    "port of --rdzv-endpoint; cluster_check_port in the playbook)"
)


class PortInUse(OSError):
    """The store's port is taken on this machine."""


def listen_socket(port: int) -> socket.socket:
    """A listening socket on ``port`` of every address (IPv6 with IPv4 mapped, else IPv4 only).

    PortInUse when another process holds it; other OSErrors as they come.
    """
    errors = []
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:  # no IPv6 on this host
            errors.append(exc)
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(errno.EADDRINUSE, f"port {port} is in use") from exc
            errors.append(exc)
            continue
        return sock
    raise errors[-1]


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for name in ("tcp", "tcp6"):
        text = read_bounded(proc / "net" / name, PROC_NET_LIMIT).text() or ""
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != TCP_LISTEN:
                continue
            _unused, _unused2, hex_port = fields[1].rpartition(":")
            try:
                if int(hex_port, 16) == port:
                    inodes.add(fields[9])
            except ValueError:
                continue
    return inodes


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid 1234 (python3)`` of a process listening on TCP ``port``, None when this account
    cannot see it (another account's process: /proc hides its file descriptors)."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port, proc)}
    if not wanted:
        return None
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            fds = list(os.scandir(proc / pid / "fd"))
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd.path)
            except OSError:
                continue
            if target in wanted:
                comm = (read_bounded(proc / pid / "comm", 4096).text() or "?").strip()
                return f"pid {pid} ({comm})"
    return None


def port_in_use_message(address: str, port: int, holder: str | None) -> str:
    """Why rank 0 cannot serve the store, and what to do."""
    who = f"held by {holder}" if holder else "held by another process"
    find = "" if holder else f" (`ss -ltnp 'sport = :{port}'` as root names it)"
    return (
        f"cannot serve the job's store at {address}:{port}: the port is {who}{find}; {WHAT_TO_DO}"
    )


def store_unreachable_hint(address: str) -> str:
    """What a rank that cannot reach the store (or gets no answer from it) should check."""
    host, _unused, port = address.rpartition(":")
    return (
        f"nothing answered as the job's store at {address}: rank 0 did not serve it (read its "
        f"message), or another process holds port {port} on {host}; {WHAT_TO_DO}"
    )
