"""The server's handles on remote members (members.py's routes), kept
between requests by (group, member id), and forgotten once silent."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...errors import InvalidRequest, StaleGeneration
from ...groups import GroupConsumer

SWEEP_EVERY_S = 5.0
MAX_MEMBERS = 10_000


@dataclass
class Member:
    handle: GroupConsumer
    seen: float  # time.monotonic() of its last request


class Members:
    """The server's handles on remote members, by (group, member id)."""

    def __init__(self) -> None:
        self.handles: dict[tuple[str, str], Member] = {}
        self._swept = time.monotonic()

    def add(self, handle: GroupConsumer) -> None:
        self.sweep()
        if len(self.handles) >= MAX_MEMBERS:
            raise InvalidRequest(f"this server holds {MAX_MEMBERS} remote members already; try later")
        self.handles[(handle.group, handle.member_id)] = Member(handle, time.monotonic())

    def get(self, group: str, member: str) -> GroupConsumer:
        self.sweep()
        entry = self.handles.get((group, member))
        if entry is None:
            raise StaleGeneration(
                f"member {member!r} is not in group {group!r} on this server (it left, expired, "
                "or joined before a restart): join again"
            )
        entry.seen = time.monotonic()
        return entry.handle

    def drop(self, group: str, member: str) -> None:
        self.handles.pop((group, member), None)

    def sweep(self) -> None:
        """Forget handles silent for two session timeouts: the store expired them."""
        now = time.monotonic()
        if now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        for key, entry in list(self.handles.items()):
            if now - entry.seen > 2 * entry.handle.session_ms / 1000 + SWEEP_EVERY_S:
                del self.handles[key]
