"""Failed authentication, throttled per client address across every front.

One `AuthThrottle` a server process is shared by the HTTP bearer check, the
console's login form, Redis's AUTH and HELLO AUTH, and Kafka's SASL: a
client that guesses tokens on one front is held back on all of them, so
none is the way around another's limit.

An address may fail `free` times (`Limits.auth_free_failures`); from then
on each further failure makes it wait before its next try, `base` seconds
(`auth_wait`) after the first and twice as long after each one after that,
up to `cap` (`auth_max_wait`; as fail2ban's growing bans and
OpenSSH's per-source penalties). While it waits, every try is refused
without looking at the token, the right one too: the limit is on trying,
and an answer that told a right token from a wrong one sooner would be the
oracle the wait is there to deny. An address that authenticates is
forgotten, and so is one that has not failed for `forget` seconds; an
address that never failed meets no throttle and no delay. At most
`max_clients` addresses are remembered, the least recently failed forgotten
first; an IPv6 client counts by its /64, which one host usually holds whole.

With `--workers N` each process keeps its own table: a client may fail N
times as often, still bounded.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable

from .limits import DEFAULT_AUTH_FREE_FAILURES, DEFAULT_AUTH_MAX_WAIT_S, DEFAULT_AUTH_WAIT_S, Limits

FORGET_S = 15 * 60.0  # an address that has not failed for this long starts afresh
MAX_CLIENTS = 4096
# The fronts, as the metrics label them (a closed set).
FRONTS = ("http", "console", "resp", "kafka")


def client_key(address: str) -> str:
    """What the throttle counts by: the address, or an IPv6 address's /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class AuthThrottle:
    def __init__(
        self,
        free: int = DEFAULT_AUTH_FREE_FAILURES,
        base: float = DEFAULT_AUTH_WAIT_S,
        cap: float = DEFAULT_AUTH_MAX_WAIT_S,
        forget: float = FORGET_S,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
        count: Callable[[str, str], None] | None = None,
    ):
        self.free, self.base, self.cap, self.forget = free, base, cap, forget
        self.max_clients, self.clock = max_clients, clock
        # Counts each failure and each refused try by front ("failed", "throttled"): /metrics.
        self.count = count or (lambda front, outcome: None)
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # key -> (failures, last)

    @classmethod
    def of(cls, limits: Limits, count: Callable[[str, str], None] | None = None) -> AuthThrottle:
        """The throttle a server's limits set (auth_free_failures, auth_wait, auth_max_wait)."""
        return cls(limits.auth_free_failures, limits.auth_wait, limits.auth_max_wait, count=count)

    def __len__(self) -> int:
        return len(self._failures)

    def _state(self, key: str, now: float) -> tuple[int, float]:
        failures, last = self._failures.get(key, (0, now))
        if now - last > self.forget:
            return 0, now
        return failures, last

    def wait(self, address: str, front: str | None = None) -> float:
        """Seconds before `address` may try a token again (0: now). With
        `front`, a try refused here is counted as throttled there."""
        if not self._failures:  # the common case: nobody failed
            return 0.0
        now = self.clock()
        failures, last = self._state(client_key(address), now)
        if failures < self.free:
            return 0.0
        left = last + min(self.cap, self.base * 2 ** (failures - self.free)) - now
        if left <= 0:
            return 0.0
        if front is not None:
            self.count(front, "throttled")
        return left

    def failed(self, address: str, front: str) -> None:
        """`address` sent a wrong token on `front`."""
        key, now = client_key(address), self.clock()
        failures, _ = self._state(key, now)
        self._failures[key] = (failures + 1, now)
        self._failures.move_to_end(key)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)
        self.count(front, "failed")

    def passed(self, address: str) -> None:
        """`address` authenticated: its failures are forgotten."""
        if self._failures:
            self._failures.pop(client_key(address), None)


def retry_message(seconds: float) -> str:
    """What a refused try is told, on every front."""
    return f"too many failed authentications from this address: try again in {max(1, round(seconds))} s"
