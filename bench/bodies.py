"""Typed bodies: what decoding and validating a publish body costs.

Two parts, both sides measured in the same run:

- in process (timeit, best of 7): a typical /v1 publish body, one record
  (`{"records": [{"value": {...}, "key": "k"}]}`) and a batch of 100, decoded
  and validated three ways: the hand-written checks the route used before
  (orjson, then `field`/`int_field`/`no_unknown` and `wire.record_in`),
  msgspec (`bodies.decode` into `models.Produce`) and pydantic (the same
  model written for pydantic 2, strict, extra fields forbidden).
- served (`--before SRC`): server CPU µs a request of POST
  /v1/topics/{topic}/records (one record and 100), POST
  /v1/queues/{topic}/messages and POST /api/topics/{name}/publish, this tree against a
  server importing from SRC (another checkout's src), the sides taking
  turns (bench/peers.py's h2load and /proc CPU reading; HTTP/1.1 cleartext).

Prints figures; never passes or fails.

    python bench/bodies.py [--before /path/to/other/src] [--rounds 3] [--seconds 4]

Instructions a one-record body, which the load on the machine does not move:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/a python bench/bodies.py --count typed 2000
    valgrind --tool=callgrind --callgrind-out-file=/tmp/b python bench/bodies.py --count typed 6000
    # (Collected of b - Collected of a) / 4000; the same with `hand`
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

sys.path.insert(0, str(Path(__file__).parent))

import orjson  # noqa: E402

from peers import Figure, Servers, alternate, h2load  # noqa: E402
from tidelog.config import check_name  # noqa: E402
from tidelog.server.http.bodies import decode, field, int_field, no_unknown, parse_json  # noqa: E402
from tidelog.server.http.models import Produce  # noqa: E402
from tidelog.wire import record_in  # noqa: E402

VALUE = {
    "id": 12345,
    "customer": "c-881",
    "items": [{"sku": "a-1", "qty": 2}, {"sku": "b-7", "qty": 1}],
    "total": 31.5,
}
ONE = orjson.dumps({"records": [{"value": VALUE, "key": "k"}]})
HUNDRED = orjson.dumps({"records": [{"value": VALUE, "key": f"k{i}"} for i in range(100)]})


def by_hand(raw: bytes) -> list[Any]:
    """The route's checks before the typed body, in its order."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ValueError("not an object")
    no_unknown(body, {"records", "partition", "producer", "timestamp"})
    records = field(body, "records", list)
    int_field(body, "partition", 0, default=None)
    producer = field(body, "producer", str, default=None)
    if producer is not None:
        check_name("producer", producer)
    int_field(body, "timestamp", 0, 1 << 53, default=None)
    return [record_in(item, f"records[{i}]") for i, item in enumerate(records)]


def typed(raw: bytes) -> list[Any]:
    body = decode(raw, Produce)
    if body.producer is not None:
        check_name("producer", body.producer)
    return [r.to_record(f"records[{i}]") for i, r in enumerate(body.records)]


def pydantic_side() -> Any:
    """models.Produce written for pydantic 2, or None without pydantic."""
    try:
        from pydantic import BaseModel, ConfigDict, Field
    except ImportError:
        return None

    class Record(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        value: Any
        format: Literal["json", "text", "bytes"] = "json"
        key: str | None = None
        key_base64: str | None = None
        headers: dict[str, str] | list[Any] | None = None
        partition: Annotated[int, Field(ge=0, le=(1 << 63) - 1)] | None = None

    class Body(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        records: Annotated[list[Record], Field(min_length=1, max_length=100_000)]
        partition: Annotated[int, Field(ge=0, le=(1 << 63) - 1)] | None = None
        producer: Annotated[str, Field(pattern="^[A-Za-z0-9._-]{1,200}$")] | None = None
        timestamp: Annotated[int, Field(ge=0, le=(1 << 53) - 1)] | None = None

    return Body.model_validate_json


def in_process() -> None:
    sides = {"hand-written checks": by_hand, "msgspec (models.Produce)": typed}
    validate = pydantic_side()
    if validate is not None:
        sides["pydantic 2 (decode + validate only)"] = validate
    sides["msgspec (decode + validate only)"] = lambda raw: decode(raw, Produce)
    print("| body | decoder | µs a body |\n| --- | --- | ---: |")
    for label, raw, number in (("1 record", ONE, 20_000), ("100 records", HUNDRED, 300)):
        for name, fn in sides.items():
            fn(raw)
            best = min(timeit.repeat(lambda fn=fn, raw=raw: fn(raw), number=number, repeat=7)) / number
            print(f"| {label} | {name} | {best * 1e6:.2f} |", flush=True)


def _turn(into: list[Figure], run: Callable[[], Figure]) -> Figure:
    figure = run()
    into.append(figure)
    return figure


def count(side: str, n: int) -> None:
    """`n` decodes of one body by one side, and nothing else: for callgrind."""
    fn = {"hand": by_hand, "typed": typed}[side]
    for _ in range(n):
        fn(ONE)


def served(before: str, rounds: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        servers = Servers(Path(tmp), None, {})
        try:
            this, this_port, _ = servers.tidelog(tls=False)
            prior, prior_port, _ = servers.tidelog(tls=False, src=before)
            print(
                "| route | --before: least server CPU a request (its rate) | this tree | CPU before ÷ this |\n| --- | ---: | ---: | ---: |"
            )
            rows = (
                ("/v1 produce, 1 record", "/v1/topics/bench/records", ONE),
                ("/v1 produce, 100 records", "/v1/topics/bench/records", HUNDRED),
                ("/v1/queues send, 1 record", "/v1/queues/bench/messages", ONE),
                ("/api publish", "/api/topics/bench1/publish", orjson.dumps({"payload": VALUE})),
            )
            for n, (label, path, raw) in enumerate(rows):
                body = str(Path(tmp) / f"body-{n}.json")
                Path(body).write_bytes(raw)
                sides = {
                    "before": lambda body=body, path=path: h2load(
                        f"http://127.0.0.1:{prior_port}{path}", prior.pid, 8, seconds, body, True
                    ),
                    "this tree": lambda body=body, path=path: h2load(
                        f"http://127.0.0.1:{this_port}{path}", this.pid, 8, seconds, body, True
                    ),
                }
                seen: dict[str, list[Figure]] = {name: [] for name in sides}
                alternate(rounds, {name: partial(_turn, seen[name], sides[name]) for name in sides})
                # The least CPU a request of each side's rounds: the round the other
                # engineers' load disturbed least (a busy machine only adds to it).
                b, t = (min(seen[name], key=lambda f: f.cpu_us) for name in ("before", "this tree"))
                print(
                    f"| {label} | {b.cpu_us:.0f} µs ({b.rate:,.0f}/s) | {t.cpu_us:.0f} µs ({t.rate:,.0f}/s) "
                    f"| {b.cpu_us / t.cpu_us:.2f} |",
                    flush=True,
                )
        finally:
            servers.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", metavar="SRC", help="also serve from SRC and compare server CPU a request")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument(
        "--count", nargs=2, metavar=("SIDE", "N"), help="hand|typed N: N decodes only (callgrind)"
    )
    args = ap.parse_args()
    if args.count:
        count(args.count[0], int(args.count[1]))
        return 0
    print(f"cores: {os.cpu_count()}; load {os.getloadavg()[0]:.2f} (a shared machine: figures are noisy)")
    in_process()
    if args.before:
        served(args.before, args.rounds, args.seconds)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
