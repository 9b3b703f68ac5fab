"""pgferry: durable jobs in PostgreSQL. Python SDK (asyncio) over the server's gRPC streams.

Tasks (the way most applications use it):

    app = pgferry.App()   # PGFERRY_URL, PGFERRY_HTTP_URL, PGFERRY_API_KEY

    @app.task(queue="emails", retries=3)
    async def send_email(to: str) -> str: ...

    job = await send_email.enqueue("a@example.com")
    await job.result(timeout=60)

The protocol-level client and worker:

    client = pgferry.Client("http://127.0.0.1:50051", api_key)
    await client.enqueue("send_email", {"to": "a@example.com"}, queue="emails")

    app = pgferry.Worker(url, api_key, queues=["emails"], concurrency=50)

    @app.job("send_email")
    async def send_email(ctx, to: str): ...
"""

from pgferry._types import AttemptInfo, Durability, EnqueuedJob, JobInfo, JobRequest, QueueInfo
from pgferry.app import App
from pgferry.client import Client
from pgferry.context import JobCancelled, JobContext, current_job
from pgferry.errors import (
    AuthError,
    Conflict,
    InvalidArgument,
    JobCancelledError,
    JobDead,
    JobFailed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    PgferryError,
    ProtocolError,
    RateLimited,
    ResultTimeout,
    TaskArgumentError,
    Unavailable,
    Unimplemented,
)
from pgferry.outcomes import Cancel, Fail, NonRetryable, Snooze
from pgferry.sync import SyncClient
from pgferry.tasks import JobHandle, Task, TaskCall, TaskTimeout
from pgferry.worker import Worker
from pgferry import workflows
from pgferry._journal import ChildError, ChildSpec, Signal, StepError, WorkflowContext
from pgferry._wf_worker import ClaimedStep, WorkflowWorker
from pgferry.workflows import (
    Machine,
    NonDeterminismError,
    Workflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowHandle,
    WorkflowInfo,
)

__version__ = "0.1.0"

__all__ = [
    "ChildError",
    "ChildSpec",
    "ClaimedStep",
    "Machine",
    "NonDeterminismError",
    "Signal",
    "StepError",
    "Workflow",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowInfo",
    "WorkflowWorker",
    "workflows",
    "App",
    "JobCancelledError",
    "JobDead",
    "JobFailed",
    "JobHandle",
    "ResultTimeout",
    "Task",
    "TaskArgumentError",
    "TaskCall",
    "TaskTimeout",
    "current_job",
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
    "NonRetryable",
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
