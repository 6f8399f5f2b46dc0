"""SUBSCRIBE: the connection becomes a one-message-at-a-time consumer of a
topic's queue group (the group has the topic's name), as miniqueue's is.

Each pushed message waits for the client's answer: ACK, NACK (again, at the
front), BACK (behind the records waiting now) or DACK [seconds] (not before
then; 1 second when none is given, as miniqueue's Redis front does), each
answered +OK, and the next message follows.

The frames are miniqueue's by default, the seed the command comes from: a
message is the record's value as a bulk string, nothing is sent for the
subscription itself, and UNSUBSCRIBE (tidelog's) is answered +OK. Redis's
pub/sub frames, which Redis clients' pub/sub APIs read (`["subscribe",
topic, 1]`, then `["message", topic, value]` a message, `["unsubscribe",
topic, 0]`), are sent to a RESP3 connection (HELLO 3: RESP3 has a push type
for exactly this), and to every connection of a server started with
`subscribe_frames="redis"` (`tidelog serve --resp-subscribe redis`).

A held message stays leased while the client speaks (any command: EXTEND,
which keeps the message and is answered +OK, or PING) at least every
`Limits.max_hold` seconds. Past that, a client that
froze or stopped reading loses it: the message goes back to the front for
another consumer, and the connection gets one error line and is closed. It is
not kept going: the protocol names no message in an answer, so a late ACK
from that client would settle the next message, one it never saw.
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import LeaseLost, TidelogError
from ...queues import MAX_VISIBILITY_S, Delivery, Queue
from .codec import OK, PONG, Push, RespError, arity_error, bulk, encode, error, text, translate
from .server import Connection

VISIBILITY_S = 30.0  # the lease on a pushed message, extended while the client holds it
SETTLE = frozenset((b"ACK", b"NACK", b"BACK", b"DACK"))
DACK_DEFAULT_S = 1.0  # miniqueue's Redis DACK takes no argument and delays by a second


class Frames:
    """How a subscription is written: miniqueue's bulk strings, or Redis's pub/sub frames."""

    def __init__(self, channel: str, redis: bool, proto: int):
        self.channel = channel.encode()
        self.redis = redis
        self.proto = proto

    def subscribed(self) -> bytes:
        return encode(Push([b"subscribe", self.channel, 1]), self.proto) if self.redis else b""

    def message(self, value: bytes) -> bytes:
        return encode(Push([b"message", self.channel, value]), self.proto) if self.redis else bulk(value)

    def unsubscribed(self) -> bytes:
        return encode(Push([b"unsubscribe", self.channel, 0]), self.proto) if self.redis else OK


async def subscribe(conn: Connection, topic: str) -> None:
    """Push `topic`'s records one at a time until UNSUBSCRIBE, QUIT or a hang-up."""
    await conn.settle_outstanding()
    server = conn.server
    queue = await server.run(lambda: server.log.queue(topic, visibility_timeout=VISIBILITY_S))
    frames = Frames(topic, conn.redis_frames(), conn.proto)
    conn.out.append(frames.subscribed())
    while not conn.closing:
        delivery = await _next_delivery(conn, queue, frames)
        if delivery is None:
            return
        conn.out.append(frames.message(delivery.value))
        if not await _settled(conn, queue, delivery, frames):
            return


async def _next_delivery(conn: Connection, queue: Queue, frames: Frames) -> Delivery | None:
    """Lease the next record, waiting for one (answering PING meanwhile); None ends the subscription."""
    server = conn.server
    clock = server.log.clock
    keys = [(queue.topic, None)]
    while True:
        woken = server.hub.register(keys)
        try:
            got, next_due = await server.run(queue.poll, 1)
            if got:
                return got[0]
            timeout = None if next_due is None else max(0.001, (next_due - clock()) / 1000)
            await conn.wait_or_input(woken, timeout)
        finally:
            server.hub.unregister(keys, woken)
        while (command := conn.next_command()) is not None:
            word = command[0].upper()
            if word == b"UNSUBSCRIBE":
                conn.out.append(frames.unsubscribed())
                return None
            if word == b"QUIT":
                conn.out.append(OK)
                conn.closing = True
                return None
            if word == b"PING":
                conn.out.append(PONG)
            else:
                conn.out.append(
                    error("ERR no message is out: only PING, UNSUBSCRIBE and QUIT while subscribed")
                )


async def _settled(conn: Connection, queue: Queue, delivery: Delivery, frames: Frames) -> bool:
    """Wait for the client's answer to a pushed message; False ends the subscription."""
    server = conn.server
    loop = server.loop
    max_hold = server.limits.max_hold
    heard = loop.time()  # the client last spoke: the message was pushed then
    extended = heard  # the lease was last pushed out
    never = loop.create_future()
    try:
        while True:
            try:
                command = conn.next_command()
            except Exception:
                await _release(conn, queue, delivery)  # a protocol error: the connection ends
                raise
            if command is None:
                now = loop.time()
                if now - heard >= max_hold:
                    await _release(conn, queue, delivery)
                    conn.hang_up(
                        error(
                            f"ERR no answer to the message in {max_hold:g} seconds: "
                            "it went back to the queue; closing"
                        )
                    )
                    return False
                renew = extended + VISIBILITY_S * 2 / 3
                try:
                    await conn.wait_or_input(never, max(0.0, min(heard + max_hold, renew) - now))
                except ConnectionError:
                    await _release(conn, queue, delivery)
                    raise
                if loop.time() >= renew and not conn.requests.has_command():
                    # The client holds the message and has spoken within max_hold: keep its lease.
                    delivery = await server.run(queue.extend, delivery, VISIBILITY_S)
                    extended = loop.time()
                continue
            heard = loop.time()
            word = command[0].upper()
            if word in SETTLE:
                try:
                    await _settle(conn, queue, delivery, command)
                except LeaseLost as e:
                    conn.out.append(error(translate(e)))
                    return True
                except (RespError, TidelogError) as e:  # a bad DACK: the message is still held
                    conn.out.append(error(translate(e)))
                    continue
                conn.out.append(OK)
                return True
            if word in (b"QUIT", b"UNSUBSCRIBE"):
                await _release(conn, queue, delivery)
                if word == b"QUIT":
                    conn.out.append(OK)
                    conn.closing = True
                else:
                    conn.out.append(frames.unsubscribed())
                return False
            if word == b"PING":
                conn.out.append(PONG)
                continue
            if word == b"EXTEND":  # as the HTTP fronts' EXTEND: the client keeps the message
                try:
                    delivery = await server.run(queue.extend, delivery, VISIBILITY_S)
                except LeaseLost as e:
                    conn.out.append(error(translate(e)))
                    return True
                extended = loop.time()
                conn.out.append(OK)
                continue
            conn.out.append(error("ERR answer the message with ACK, NACK, BACK, DACK [seconds] or EXTEND"))
    finally:
        never.cancel()


async def _settle(conn: Connection, queue: Queue, delivery: Delivery, command: list[bytes]) -> None:
    word = command[0].upper()
    if len(command) > (2 if word == b"DACK" else 1):
        raise arity_error(text(word).lower())
    run = conn.server.run
    if word == b"ACK":
        await run(queue.ack, delivery)
    elif word == b"NACK":
        await run(queue.nack, delivery)
    elif word == b"BACK":
        await run(lambda: queue.nack(delivery, back=True))
    else:
        seconds = _seconds(command[1]) if len(command) == 2 else DACK_DEFAULT_S
        await run(lambda: queue.nack(delivery, delay=seconds))


def _seconds(raw: bytes) -> float:
    """DACK's delay: a finite number of seconds, 0 to the longest lease."""
    try:
        seconds = float(raw)
    except ValueError:
        raise RespError("ERR value is not a valid float") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_VISIBILITY_S:
        raise RespError(f"ERR DACK seconds must be between 0 and {MAX_VISIBILITY_S:g}")
    return seconds


async def _release(conn: Connection, queue: Queue, delivery: Any) -> None:
    """Put a held message back at the front (the client left, froze or unsubscribed)."""
    try:
        await conn.server.run(queue.nack, delivery)
    except TidelogError:
        return  # the lease ended already: the record is due again anyway
    # Subscribers waiting here polled while it was leased: they would sleep
    # until its lease's end. A release is no append, so they hear it from us.
    conn.server.log.notifier.notify(queue.topic)
