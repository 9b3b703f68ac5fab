"""An order workflow (the README's Python workflow quick start), type-checked with
`mypy --strict` in `make test`: `assert_type` fails the check when a handle's input or
result type is not inferred. Run it against `make dev`:

    export PGFERRY_URL=http://127.0.0.1:50051 PGFERRY_API_KEY=pgf_...
    pgferry-worker workflow_app:app &      # or: python workflow_app.py worker
    python workflow_app.py                 # starts an order, pays it, prints the receipt
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TypedDict, assert_type

import pgferry

app = pgferry.App(default_queue="shop")  # PGFERRY_URL, PGFERRY_API_KEY


class Order(TypedDict):
    id: str
    items: list[str]


@app.workflow("shipping")
async def shipping(ctx: pgferry.WorkflowContext, order: Order) -> str:
    return await ctx.step("label", lambda: f"label-{order['id']}-{len(order['items'])}")


@app.workflow("order")
async def order(ctx: pgferry.WorkflowContext, o: Order) -> dict[str, Any]:
    total = await ctx.step("reserve", lambda: 10 * len(o["items"]))  # runs once, journaled
    paid = await ctx.wait_for_signal("paid", timeout=3600)  # parks: no slot held
    if paid is None:
        return {"order": o["id"], "status": "expired"}
    label = await ctx.child(shipping, o)  # a child workflow, joined
    return {"order": o["id"], "status": "shipped", "total": total, "label": label, "paid": paid.payload}


async def main() -> None:
    async with app:
        h = await order.start({"id": "42", "items": ["book", "pen"]}, correlation_key="order-42")
        assert_type(h, pgferry.WorkflowHandle[dict[str, Any]])
        await h.signal("paid", {"amount": 20})  # kept in the inbox if it arrives early
        receipt = await h.result(timeout=60)
        assert_type(receipt, dict[str, Any])
        print(receipt)
        assert_type(shipping.handle(h.id), pgferry.WorkflowHandle[str])

        await order.start({"id": 1})  # type: ignore[typeddict-item]
        wrong: int = await h.result()  # type: ignore[assignment]
        del wrong


if __name__ == "__main__":
    if sys.argv[1:] == ["worker"]:
        app.run_worker(concurrency=20)
    else:
        asyncio.run(main())
