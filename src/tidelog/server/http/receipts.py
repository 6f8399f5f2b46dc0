"""Receipts over HTTP: the opaque token a client settles a delivery with.

A token names everything the server needs to settle the delivery, so the
server keeps no table of them: group, topic, partition, offset, delivery
count, and the delivery's own receipt (96 random bits, made by the core).
It is base64url text; clients treat it as opaque.

Why it cannot be forged to settle another group's record: the store settles
a lease only when the receipt matches the current lease of *that* group on
that record, atomically. A token edited to name another group, record or
delivery carries a receipt that is not that lease's, so it is refused
(LeaseLost) and nothing changes; guessing a live lease's receipt means
guessing 96 random bits. A token is also bound to the group and topic it
was issued for: presenting it with another `group=` or topic is refused
before the store is asked. No secret is involved, so tokens stay valid
across a server restart and between servers sharing one database.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import NamedTuple

from ...config import MAX_PARTITIONS, NAME_RE
from ...errors import LeaseLost
from ...queues import Delivery
from ...records import make_message

_RECEIPT = re.compile(r"[0-9a-f]{1,64}")
MAX_TOKEN = 1024


class Receipt(NamedTuple):
    group: str
    topic: str
    partition: int
    offset: int
    delivery_count: int
    receipt: str


def encode(group: str, d: Delivery) -> str:
    text = f"{group}:{d.topic}:{d.partition}:{d.offset}:{d.delivery_count}:{d.receipt}"
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")


def decode(token: object, group: str, topic: str) -> Receipt:
    """The receipt a token names; LeaseLost for anything this server did not issue
    for `group` on `topic`."""
    if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN:
        raise LeaseLost("the receipt is not one this server issued")
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
        g, t, partition, offset, count, receipt = text.split(":")
        parsed = Receipt(g, t, int(partition), int(offset), int(count), receipt)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise LeaseLost("the receipt is not one this server issued") from None
    if not (
        NAME_RE.fullmatch(g)
        and NAME_RE.fullmatch(t)
        and _RECEIPT.fullmatch(receipt)
        and 0 <= parsed.partition < MAX_PARTITIONS
        and 0 <= parsed.offset < 1 << 40
        and 0 <= parsed.delivery_count < 1 << 31
    ):
        raise LeaseLost("the receipt is not one this server issued")
    if (g, t) != (group, topic):
        raise LeaseLost(f"the receipt is for group {g!r} on topic {t!r}, not group {group!r} on {topic!r}")
    return parsed


def delivery(r: Receipt, row: tuple | None = None) -> Delivery:
    """A Delivery to settle through `tidelog.Queue` (its record, when a reject needs it)."""
    msg = make_message(r.topic, r.partition, row or (r.offset, 0, b"", None))
    return Delivery(msg, r.delivery_count, r.receipt, 0)
