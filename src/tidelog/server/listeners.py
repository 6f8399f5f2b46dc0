"""The ports a server listens on, bound once, before anything else starts.

`serve()` binds every listening socket itself (HTTP, the Redis front, the
Kafka listener when there is one; the members' home socket under several
workers) before it opens the store or forks a worker, and without
SO_REUSEPORT. So:

- a port another program holds (a second `tidelog serve` included) is
  refused at once, with one line naming it, before any file is made. With
  SO_REUSEPORT on both sides, as granian binds by itself on Linux, the
  kernel would instead split the connections between the two servers, each
  answering from its own store.
- nobody joins the port while this server runs: without SO_REUSEPORT on
  the holder, the kernel refuses every other bind of it.
- the workers inherit the sockets across fork and accept from the same
  queue. A worker that dies leaves them open in the supervisor and the
  other workers: connections not yet accepted wait for another worker or
  for its replacement, which needs no bind.

The alternative, a trial bind without SO_REUSEPORT before the workers bind
their own SO_REUSEPORT sockets, leaves a window between the check and the
binds, and the port open to any same-user program that sets SO_REUSEPORT
while the server runs (or while every worker restarts).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from ..errors import PortInUse

BACKLOG = 2048  # connections the kernel queues before a worker accepts them


@dataclass(frozen=True)
class Port:
    """A port to listen on: what it serves (for the error) and the flag that sets it."""

    serves: str  # "HTTP", "the Redis protocol", ...
    number: int  # 0: the kernel picks one
    flag: str = "--port"


def _refusal(port: Port, host: str, e: OSError) -> PortInUse:
    where = f"{host}:{port.number}"
    if e.errno == errno.EADDRINUSE:
        why = f"port {port.number} is in use by another program; stop it or choose another {port.flag}"
    elif e.errno == errno.EACCES:
        why = f"no permission to listen on port {port.number} (below 1024 needs privileges); choose another {port.flag}"
    elif e.errno == errno.EADDRNOTAVAIL:
        why = f"{host} is not an address of this machine; choose another --host"
    else:
        why = f"{e.strerror or e}"
    return PortInUse(f"cannot serve {port.serves} on {where}: {why}")


def bind_tcp(host: str, port: Port, backlog: int = BACKLOG) -> socket.socket:
    """A listening TCP socket on host:port, no SO_REUSEPORT; PortInUse names the port."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port.number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise PortInUse(f"cannot serve {port.serves} on {host}:{port.number}: {e.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        # SO_REUSEADDR only lets a restarted server bind over its old connections
        # in TIME_WAIT; it never lets two sockets listen on one port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: responses go out without Nagle's delay.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise _refusal(port, host, e) from None
    return sock


def server_ports(port: int, resp_port: int = 0, kafka_port: int = 0) -> dict[str, Port]:
    """The TCP ports `serve` listens on, by front (0: the front is off); one
    list, checked together. Each front accepts on its socket, `listeners[key]`."""
    ports = {"http": Port("HTTP", port, "--port")}
    if resp_port:
        ports["resp"] = Port("the Redis protocol", resp_port, "--resp-port")
    if kafka_port:
        ports["kafka"] = Port("Kafka's protocol", kafka_port, "--kafka-port")
    return ports


def bind_all(host: str, ports: dict[str, Port], backlog: int = BACKLOG) -> dict[str, socket.socket]:
    """A listening socket for every port, by the same keys, or none: PortInUse
    names the first that cannot be had (the ones bound before it are closed)."""
    bound: dict[str, socket.socket] = {}
    try:
        for key, port in ports.items():
            bound[key] = bind_tcp(host, port, backlog)
    except PortInUse:
        for sock in bound.values():
            sock.close()
        raise
    return bound


def bind_unix(path: str, backlog: int = BACKLOG) -> socket.socket:
    """A listening Unix socket at `path` (in a directory only this user can enter)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def port_of(sock: socket.socket) -> int:
    """The port a TCP socket listens on (the kernel's pick when it was 0)."""
    port: int = sock.getsockname()[1]
    return port
