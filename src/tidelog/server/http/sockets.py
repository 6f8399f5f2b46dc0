"""This process's TCP sockets on one port, as the kernel shows them (Linux).

granian accepts and serves connections in Rust and tells Python nothing
about a connection until a request arrives; the connection guard
(connections.py) needs the ones that never send one. They are found here
by their file descriptors (/proc/self/fd), looked at through a duplicate
of the descriptor (never the original: granian owns it), and told apart by
their local port: the listening socket and the connections it accepted.

A descriptor number may be closed and reused between a listing and a
look; every call here works on a duplicate it checked is still the same
socket (its inode), so a reused number never reaches another socket.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass

# struct tcp_info (linux/tcp.h): the fields read here, and how far to read.
_TCP_INFO = getattr(socket, "TCP_INFO", 11)
_TCP_INFO_LEN = 104
_UNACKED = struct.Struct("=I")  # at 24: a listener's accept queue (tcpi_unacked)
_LAST_DATA_RECV = struct.Struct("=I")  # at 52: ms since data last came in (or since the connection began)


def supported() -> bool:
    """Whether this system lists a process's descriptors (Linux's /proc)."""
    return os.path.isdir("/proc/self/fd")


@dataclass(frozen=True)
class Found:
    """A socket of the port: the listener (peer None) or a connection."""

    fd: int
    inode: int
    peer: tuple[str, int] | None
    age: float = 0.0  # seconds the kernel saw no data from it (when first found), a lower bound of its age


class _Duplicate:
    """A socket object on a duplicate of `fd`, when `fd` is still socket `inode`."""

    def __init__(self, fd: int, inode: int):
        self.sock: socket.socket | None = None
        try:
            dup = os.dup(fd)
        except OSError:
            return
        try:
            if os.fstat(dup).st_ino != inode:
                os.close(dup)
                return
            # No timeout is set on it: its blocking mode is the original's
            # (granian's, non-blocking), left as it is.
            self.sock = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)

    def __enter__(self) -> socket.socket | None:
        return self.sock

    def __exit__(self, *exc: object) -> None:
        if self.sock is not None:
            self.sock.close()  # the duplicate only: granian's descriptor stays open


class PortSockets:
    """Finds the sockets of one TCP port in this process, remembering by
    inode which sockets it looked at already (a look costs a few system
    calls; a listing costs one `fstat` a descriptor)."""

    def __init__(self, port: int):
        self.port = port
        self._known: dict[int, Found | None] = {}  # inode -> the port's socket, or None: another's

    def scan(self) -> tuple[Found | None, list[Found]]:
        """(the listener, the connections) of the port, as of now."""
        listener = None
        connections = []
        known: dict[int, Found | None] = {}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                st = os.fstat(fd)
            except OSError:  # closed meanwhile
                continue
            if not stat.S_ISSOCK(st.st_mode):
                continue
            inode = st.st_ino
            found = self._known[inode] if inode in self._known else self._look(fd, inode)
            known[inode] = found
            if found is None:
                continue
            if found.fd != fd:  # the same socket under another number: use this one
                found = Found(fd, inode, found.peer, found.age)
                known[inode] = found
            if found.peer is None:
                listener = found
            else:
                connections.append(found)
        self._known = known
        return listener, connections

    def _look(self, fd: int, inode: int) -> Found | None:
        with _Duplicate(fd, inode) as sock:
            if sock is None or sock.type != socket.SOCK_STREAM:
                return None
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            try:
                if sock.getsockname()[1] != self.port:
                    return None
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    return Found(fd, inode, None)
                host, port = sock.getpeername()[:2]
                info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
            except OSError:  # not connected (yet, or any more)
                return None
            (quiet_ms,) = _LAST_DATA_RECV.unpack_from(info, 52)
            return Found(fd, inode, (host, port), quiet_ms / 1000)


def accept_queue(listener: Found) -> int:
    """Connections the kernel completed that nobody accepted yet."""
    with _Duplicate(listener.fd, listener.inode) as sock:
        if sock is None:
            return 0
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
        except OSError:
            return 0
        return int(_UNACKED.unpack_from(info, 24)[0])


def shut(connection: Found) -> bool:
    """Shut a connection down both ways: granian reads its end and closes
    it (and releases its place). False when it was gone already."""
    with _Duplicate(connection.fd, connection.inode) as sock:
        if sock is None:
            return False
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return False
        return True


def refuse(listener: Found, count: int, answer: bytes | None) -> int:
    """Take up to `count` waiting connections off the listener and refuse
    them: `answer` sent first (a whole HTTP response), or closed unanswered.
    Returns how many were refused."""
    refused = 0
    with _Duplicate(listener.fd, listener.inode) as sock:
        if sock is None:
            return 0
        for _ in range(count):
            try:
                # The listener is non-blocking (granian's): an empty queue
                # raises at once.
                conn, _ = sock.accept()
            except OSError:
                break
            with conn:
                try:
                    if answer:
                        conn.send(answer, socket.MSG_DONTWAIT)
                    conn.shutdown(socket.SHUT_WR)
                    conn.recv(65536, socket.MSG_DONTWAIT)  # what came already, so the close is no reset
                except OSError:
                    pass
            refused += 1
    return refused
