"""Django with pgferry tasks: enqueue inside `transaction.on_commit`, so a job exists only
if the transaction that asked for it committed (a rolled-back signup sends no mail).

Settings: PGFERRY_URL, PGFERRY_HTTP_URL, PGFERRY_API_KEY (here from the environment).
Single-module Django for the example; in a project the App lives in e.g. myapp/tasks.py
and the worker runs as `pgferry-worker myapp.tasks:tasks`."""

from __future__ import annotations

import os

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        PGFERRY_URL=os.environ.get("PGFERRY_URL", ""),
        PGFERRY_HTTP_URL=os.environ.get("PGFERRY_HTTP_URL", ""),
        PGFERRY_API_KEY=os.environ.get("PGFERRY_API_KEY", ""),
    )
    django.setup()

from django.db import transaction  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

import pgferry  # noqa: E402

tasks = pgferry.App(settings.PGFERRY_URL, settings.PGFERRY_API_KEY, http_url=settings.PGFERRY_HTTP_URL)


@tasks.task(queue="django_mail", retries=3)
def send_welcome(email: str) -> str:  # sync: runs in the worker's thread pool
    return f"sent to {email}"


def signup(request: HttpRequest) -> JsonResponse:
    email = request.GET["email"]
    enqueued: list[int] = []
    try:
        with transaction.atomic():
            # ... create the user row here ...
            transaction.on_commit(lambda: enqueued.append(send_welcome.enqueue_sync(email).id))
            if request.GET.get("fail"):
                raise ValueError("signup failed after the enqueue was requested")
    except ValueError:
        return JsonResponse({"job_id": None}, status=400)
    return JsonResponse({"job_id": enqueued[0]})


def result(request: HttpRequest, job_id: int) -> JsonResponse:
    return JsonResponse({"result": tasks.job(job_id, send_welcome).result_sync(timeout=30)})


urlpatterns = [path("signup", signup), path("signup/<int:job_id>", result)]
