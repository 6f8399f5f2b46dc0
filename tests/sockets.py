"""What the kernel says of a test's loopback connections (Linux /proc)."""

from __future__ import annotations


def server_end_owned(server_port: int, client_port: int) -> bool:
    """Whether a process holds the server's end of a loopback connection (its
    socket has an inode in /proc/net/tcp; a closed one with data still unsent
    has none); False too when the kernel has forgotten it."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if (
                    int(local.rsplit(":", 1)[1], 16) == server_port
                    and int(remote.rsplit(":", 1)[1], 16) == client_port
                ):
                    return fields[9] != "0"
    return False
