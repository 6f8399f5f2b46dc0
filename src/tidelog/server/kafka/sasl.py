"""SASL PLAIN: a client authenticates with any user name and the server's token as password.

With `--token` set, a new connection may send only ApiVersions,
SaslHandshake and SaslAuthenticate until it has authenticated, within
`Limits.handshake_timeout` of connecting; a failure is answered
SASL_AUTHENTICATION_FAILED and the connection closed, as Kafka does.
Handshake v0 is followed by a bare token (no Kafka framing around it),
v1 by SaslAuthenticate requests; both are served.
"""

from __future__ import annotations

import hmac
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from ..throttle import retry_message
from .broker import Session
from .wire import Request

MECHANISMS = ("PLAIN",)


def check_plain(session: Session, token: bytes) -> str | None:
    """The error message for a PLAIN token (authzid NUL user NUL password), None when it passes."""
    throttle = session.broker.throttle
    wait = throttle.wait(session.host, "kafka")
    if wait:  # refused unread, the right password too: see server/throttle.py
        return retry_message(wait)
    parts = token.split(b"\0")
    if len(parts) != 3 or not parts[1]:
        return "a PLAIN token is authzid, user and password separated by NUL bytes"
    expected = (session.broker.token or "").encode()
    if not hmac.compare_digest(parts[2], expected):
        throttle.failed(session.host, "kafka")
        return "authentication failed: the password must be the server's token"
    throttle.passed(session.host)
    session.authenticated = True
    session.principal = parts[1].decode(errors="replace")
    return None


async def sasl_handshake(session: Session, request: Request) -> dict[str, Any]:
    mechanism = request.body.mechanism
    if mechanism not in MECHANISMS or session.authenticated:
        code = ErrorCode.illegal_sasl_state if session.authenticated else ErrorCode.unsupported_sasl_mechanism
        session.close_after = not session.authenticated
        # Without --token the listener has no SASL, and names no mechanism (Kafka's plaintext listener).
        return {"error_code": code, "mechanisms": MECHANISMS if session.broker.token else ()}
    session.sasl_mechanism = mechanism
    session.sasl_raw = request.version == 0
    return {"error_code": 0, "mechanisms": MECHANISMS}


async def sasl_authenticate(session: Session, request: Request) -> dict[str, Any]:
    if session.sasl_mechanism is None or session.authenticated:
        # Kafka's plaintext listener answers it and goes on; a SASL exchange out of order ends.
        session.close_after = session.broker.token is not None
        return {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate comes once, after a SaslHandshake",
            "auth_bytes": b"",
        }
    failed = check_plain(session, request.body.auth_bytes)
    if failed is not None:
        session.close_after = True
        return {
            "error_code": ErrorCode.sasl_authentication_failed,
            "error_message": failed,
            "auth_bytes": b"",
        }
    return {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime": 0}


def raw_token(session: Session, frame: bytes) -> tuple[bytes, bool]:
    """After a v0 handshake: check a bare token; (the bare answer, passed).

    Kafka answers a good token with an empty frame and closes on a bad one.
    """
    session.sasl_raw = False
    failed = check_plain(session, frame)
    return struct.pack(">i", 0), failed is None
