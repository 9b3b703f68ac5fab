"""An application on the task API, type-checked with `mypy --strict` in `make test`
(`assert_type` fails the check if a handle's argument or result types are not inferred).
The `# type: ignore[...]` lines are calls mypy must reject: with warn_unused_ignores
(part of --strict), an ignore that is not needed is itself an error."""

from __future__ import annotations

import asyncio
from typing import Any, assert_type

import pydantic

import pgferry

app = pgferry.App()  # PGFERRY_URL, PGFERRY_HTTP_URL, PGFERRY_API_KEY


class Order(pydantic.BaseModel):
    id: int
    total_cents: int


class Receipt(pydantic.BaseModel):
    order_id: int
    text: str


@app.task
async def add(a: int, b: int = 0) -> int:
    return a + b


@app.task(queue="emails", retries=5, backoff=2.0, timeout=30, dont_retry_on=(ValueError,))
async def send_email(to: str, subject: str, *, body: str = "") -> str:
    return f"message-id-for-{to}"


@app.task(queue="billing", unique=True)
def receipt(order: Order) -> Receipt:  # a sync task: runs in the worker's thread pool
    return Receipt(order_id=order.id, text=f"{order.total_cents / 100:.2f}")


@app.on_startup
async def open_resources(resources: dict[str, Any]) -> None:
    resources["greeting"] = "hello"


async def main() -> None:
    job = await send_email.enqueue("a@example.com", subject="hi")
    assert_type(job, pgferry.JobHandle[str])
    assert_type(await job.result(timeout=60), str)
    assert_type(await add.run(1, b=2), int)
    r = await receipt.run(Order(id=1, total_cents=1999))
    assert_type(r, Receipt)
    later = await send_email.schedule(delay=60).enqueue("b@example.com", subject="later")
    assert_type(later, pgferry.JobHandle[str])
    jobs = await add.enqueue_many([add.call(i) for i in range(10)])
    assert_type(jobs, list[pgferry.JobHandle[int]])
    assert_type(add.enqueue_sync(1).result_sync(), int)

    await send_email.enqueue("a@example.com", subjet="typo")  # type: ignore[call-arg]
    await add.enqueue("one")  # type: ignore[arg-type]
    await add.enqueue(1, 2, 3)  # type: ignore[call-arg]
    wrong: str = await add.run(1)  # type: ignore[assignment]
    del wrong


if __name__ == "__main__":
    asyncio.run(main())
