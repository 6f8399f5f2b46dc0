"""A FastAPI service on tidelog.aio: an endpoint that enqueues, a background
consumer started in the lifespan, and a health check.

    TIDELOG_URL=orders.db granian --interface asgi --working-dir examples fastapi_app:app
    curl -X POST localhost:8000/orders -H 'content-type: application/json' -d '{"item": "tea", "qty": 2}'
    curl 'localhost:8000/receipts?after=0&wait=10'     # long-polls until a receipt is there
    curl localhost:8000/healthz

The consumer leases orders from the queue group "orders", writes a receipt
to the topic "receipts" and acks. Nothing here blocks the event loop: every
await is a store call on tidelog's small thread pool or a wait on the loop.
On shutdown the lifespan cancels the consumer (an order it was working on
is delivered again after its visibility timeout) and closes the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Query, Request
from pydantic import BaseModel, Field

import tidelog.aio


class Order(BaseModel):
    item: str = Field(min_length=1, max_length=100)
    qty: int = Field(gt=0, le=1000)


async def fulfil(log: tidelog.aio.AsyncLog, orders: tidelog.aio.AsyncQueue) -> None:
    """The background consumer: one order at a time, forever (until cancelled
    or the log closes)."""
    receipts = log.producer(id="fulfilment")
    async for d in orders:
        order = d.data
        await receipts.send("receipts", {"order": d.offset, "item": order["item"], "qty": order["qty"]})
        await orders.ack(d)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with tidelog.aio.open(os.environ.get("TIDELOG_URL", "tidelog.db")) as log:
        await log.create_topic("receipts")
        orders = await log.queue("orders", visibility_timeout=30).open()
        app.state.log, app.state.orders = log, orders
        consumer = asyncio.create_task(fulfil(log, orders))
        try:
            yield
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer


app = FastAPI(title="orders", lifespan=lifespan)


@app.post("/orders", status_code=202)
async def place_order(order: Order, request: Request) -> dict[str, Any]:
    sent = await request.app.state.orders.send(order.model_dump(), key=order.item)
    return {"order": sent.offset}


@app.get("/receipts")
async def receipts(
    request: Request, after: int = Query(0, ge=0), wait: float = Query(0, ge=0, le=30)
) -> list[dict[str, Any]]:
    """Receipts after offset `after`; waits up to `wait` seconds for one."""
    log: tidelog.aio.AsyncLog = request.app.state.log
    await log.wait_for_records("receipts", 0, after, timeout=wait)
    return [m.data for m in await log.read("receipts", 0, after=after)]


@app.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    stats = await request.app.state.orders.stats()
    return {"ok": True, "orders_waiting": stats.available, "orders_in_flight": stats.in_flight}
