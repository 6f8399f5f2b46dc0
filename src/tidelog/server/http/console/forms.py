"""The console's forms: read, and checked to come from the console's own pages.

Every state-changing request of the console is a form POST (produce,
reset offsets, redrive, log in, log out), and each is read here, so each
is checked twice against cross-site request forgery:

- its Origin (or, without one, its Referer) must be this server's host
  and port, as the Host header names it. Browsers send Origin on every
  POST. This is what stops a page on another port of the same host: to a
  browser that is the same *site*, so SameSite=Strict cookies go along.
- it must carry the CSRF token of the page it came from: its session's
  (a random token per login), or the server's own without a token. No
  other origin's script can read a page of this one to learn it.

A request authenticated with the bearer header needs no CSRF token (no
other site can make a browser send that header); a request with neither
Origin nor Referer is no browser's, and still needs the token when it
rides on a session. Bad input is refused with 403 and changes nothing.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request

from ....errors import InvalidRequest
from ..auth import AUTHENTICATED_BY
from ..bodies import read_body
from ..errors import Forbidden
from ..responses import ctx_of
from .render import csrf_token

MAX_FORM_FIELDS = 10_000


def check_origin(request: Request) -> None:
    """Forbidden unless the request's Origin (else Referer) is this server's own host and port."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        return
    host = (request.headers.get("host") or request.url.netloc).lower()
    came_from = urlsplit(source).netloc.lower() if source != "null" else "null"
    if came_from != host:
        raise Forbidden(
            f"this form was sent from {source!r}, not from this server's console ({host}); "
            "open the console at its own address and submit it there"
        )


async def read_form(request: Request, *, csrf: bool = True) -> FormData:
    """The posted form (application/x-www-form-urlencoded: the console posts
    no files), refused with Forbidden when it did not come from one of the
    console's pages: the Origin always, the CSRF token when `csrf`."""
    check_origin(request)
    body = await read_body(request, ctx_of(request).settings.max_body)
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidRequest(f"the form could not be read: {e}") from None
    form = FormData(list(pairs))
    if csrf and request.scope.get(AUTHENTICATED_BY) != "bearer":
        given = str(form.get("csrf", ""))
        if not hmac.compare_digest(given.encode(), csrf_token(request).encode()):
            raise Forbidden(
                "this form's CSRF token is missing or out of date (a new login, or a server restart): "
                "reload the page and submit it again"
            )
    return form
