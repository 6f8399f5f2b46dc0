"""`python -m tidelog.server.resp`: the Redis protocol front alone (`tidelog serve` runs it beside HTTP)."""

from __future__ import annotations

import argparse
import asyncio
import signal

from .listener import start_resp_server
from .server import DEFAULT_PORT, stop_resp_server

DESCRIPTION = "The Redis protocol front over a tidelog log: redis-cli and redis-py speak to it."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tidelog.server.resp", description=DESCRIPTION)
    parser.add_argument("--db", default="tidelog.db", help="a tidelog.open URL (default tidelog.db)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--token", default=None, help="require AUTH with this token")
    parser.add_argument(
        "--no-auto-create",
        dest="auto_create",
        action="store_false",
        help="XADD to a missing stream is an error instead of creating it",
    )
    parser.add_argument(
        "--resp-subscribe",
        choices=("miniqueue", "redis"),
        default="miniqueue",
        help="SUBSCRIBE's frames on RESP2: miniqueue's (the value as a bulk string, the default) or Redis's pub/sub",
    )
    args = parser.parse_args(argv)

    import tidelog

    async def serve() -> None:
        log = tidelog.open(args.db, auto_create=args.auto_create)
        try:
            server = await start_resp_server(
                log, args.host, args.port, args.token, subscribe_frames=args.resp_subscribe
            )
        except OSError as e:
            log.close()
            # The usual cause is a port in use: one line, not a traceback.
            raise SystemExit(
                f"tidelog RESP cannot listen on {args.host}:{args.port}: {e.strerror or e}"
            ) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        port = server.sockets[0].getsockname()[1]
        print(f"tidelog RESP listening on {args.host}:{port}", flush=True)
        await stop.wait()
        await stop_resp_server(server)
        log.close()

    try:
        import uvloop  # the resp extra: libuv's loop roughly halves the cost of each request
    except ImportError:  # pragma: no cover
        asyncio.run(serve())
    else:
        uvloop.run(serve())


main()
