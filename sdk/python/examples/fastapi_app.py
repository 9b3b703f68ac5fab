"""FastAPI with pgferry tasks: the App's connection opens with the first enqueue and closes
in the lifespan; a route enqueues, another awaits the result (long-poll, no polling loop).

    PGFERRY_URL=... PGFERRY_HTTP_URL=... PGFERRY_API_KEY=... uvicorn fastapi_app:api
    PGFERRY_URL=... PGFERRY_API_KEY=... pgferry-worker fastapi_app:tasks
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException

import pgferry

tasks = pgferry.App()  # PGFERRY_URL, PGFERRY_HTTP_URL, PGFERRY_API_KEY


@tasks.task(queue="welcome", retries=3, timeout=30)
async def welcome(email: str) -> str:
    return f"welcome mail sent to {email}"


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with tasks:  # closes this event loop's connection on shutdown
        yield


api = FastAPI(lifespan=lifespan)


@api.post("/signup")
async def signup(email: str) -> dict[str, int]:
    job = await welcome.enqueue(email)  # a bad argument raises here, in the request
    return {"job_id": job.id}


@api.get("/signup/{job_id}")
async def signup_status(job_id: int, wait: float = 10.0) -> dict[str, str]:
    try:
        return {"result": await tasks.job(job_id, welcome).result(timeout=wait)}
    except pgferry.ResultTimeout:
        raise HTTPException(status_code=202, detail="still running") from None
    except pgferry.JobFailed as e:
        raise HTTPException(status_code=409, detail=f"{e.code}: {e.error_kind}") from None
