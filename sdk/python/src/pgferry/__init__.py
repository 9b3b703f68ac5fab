"""pgferry: durable jobs in PostgreSQL. Python SDK (asyncio) over the server's gRPC streams.

    client = pgferry.Client("http://127.0.0.1:50051", api_key)
    await client.enqueue("send_email", {"to": "a@example.com"}, queue="emails")

    app = pgferry.Worker(url, api_key, queues=["emails"], concurrency=50)

    @app.job("send_email")
    async def send_email(ctx, to: str): ...
"""

from pgferry._types import AttemptInfo, Durability, EnqueuedJob, JobInfo, JobRequest, QueueInfo
from pgferry.client import Client
from pgferry.context import JobCancelled, JobContext
from pgferry.errors import (
    AuthError,
    Conflict,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    PgferryError,
    ProtocolError,
    RateLimited,
    Unavailable,
    Unimplemented,
)
from pgferry.outcomes import Cancel, Fail, Snooze
from pgferry.sync import SyncClient
from pgferry.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "AttemptInfo",
    "AuthError",
    "Cancel",
    "Client",
    "Conflict",
    "Durability",
    "EnqueuedJob",
    "Fail",
    "InvalidArgument",
    "JobCancelled",
    "JobContext",
    "JobInfo",
    "JobRequest",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "PgferryError",
    "ProtocolError",
    "QueueInfo",
    "RateLimited",
    "Snooze",
    "SyncClient",
    "Unavailable",
    "Unimplemented",
    "Worker",
]
