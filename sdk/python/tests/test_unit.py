"""Unit tests of the parts that need no server: conversions, errors, backoff, CLI loading."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import grpc
import pytest

import pgferry
from pgferry import _conn, _types, errors
from pgferry.cli import load_app
from pgferry._handlers import call_args as _call_args


def test_to_spec_maps_every_option() -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    spec = _types.to_spec(
        pgferry.JobRequest(
            "k", {"a": [1, 2], "é": None}, queue="q", priority=2, run_at=at,
            unique_key="u", max_attempts=4, meta={"m": "v"},
        )
    )
    assert (spec.queue, spec.kind, spec.priority, spec.unique_key, spec.max_attempts) == ("q", "k", 2, "u", 4)
    assert json.loads(spec.args) == {"a": [1, 2], "é": None}
    assert spec.run_at_unix_ms == int(at.timestamp() * 1000)
    assert not spec.HasField("delay_ms")
    assert dict(spec.meta) == {"m": "v"}


def test_to_spec_defaults_leave_optionals_unset() -> None:
    spec = _types.to_spec(pgferry.JobRequest("k"))
    assert spec.args == "null" and spec.queue == "default"
    for f in ("max_attempts", "run_at_unix_ms", "delay_ms", "unique_key"):
        assert not spec.HasField(f)


def test_delay_accepts_seconds_and_timedelta() -> None:
    assert _types.to_spec(pgferry.JobRequest("k", delay=1.5)).delay_ms == 1500
    assert _types.to_spec(pgferry.JobRequest("k", delay=timedelta(minutes=2))).delay_ms == 120_000
    with pytest.raises(ValueError):
        _types.to_spec(pgferry.JobRequest("k", delay=-1))
    with pytest.raises(ValueError):
        _types.to_spec(pgferry.JobRequest("k", delay=1, run_at=datetime.now(timezone.utc)))
    with pytest.raises(ValueError):
        _types.to_spec(pgferry.JobRequest("k", run_at=datetime(2030, 1, 1)))


def test_unserialisable_args_raise_before_sending() -> None:
    with pytest.raises(TypeError):
        _types.to_spec(pgferry.JobRequest("k", {"when": datetime.now()}))


def test_handler_arguments_from_json_shapes() -> None:
    assert _call_args({"a": 1}) == ((), {"a": 1})
    assert _call_args([1, 2]) == ((1, 2), {})
    assert _call_args(None) == ((), {})
    assert _call_args("x") == (("x",), {})


@pytest.mark.parametrize(
    "code,cls",
    [
        ("unauthenticated", pgferry.AuthError),
        ("permission_denied", pgferry.PermissionDenied),
        ("not_found", pgferry.NotFound),
        ("job_not_found", pgferry.NotFound),
        ("invalid_argument", pgferry.InvalidArgument),
        ("invalid_json", pgferry.InvalidArgument),
        ("payload_too_large", pgferry.PayloadTooLarge),
        ("conflict", pgferry.Conflict),
        ("rate_limited", pgferry.RateLimited),
        ("something_new", pgferry.PgferryError),
    ],
)
def test_error_codes_map_to_classes(code: str, cls: type[pgferry.PgferryError]) -> None:
    e = errors.from_error(code, "msg", "jobs[1].queue")
    assert type(e) is cls and e.code == code and e.field == "jobs[1].queue"
    assert isinstance(e, pgferry.PgferryError)
    assert "jobs[1].queue" in str(e)


class _FakeRpcError(grpc.RpcError):
    def __init__(self, status: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str | bytes], ...] = ()) -> None:
        self._s, self._d, self._t = status, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._s

    def details(self) -> str:
        return self._d

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._t


def test_rpc_status_maps_to_classes() -> None:
    assert type(errors.from_rpc_error(_FakeRpcError(grpc.StatusCode.UNAUTHENTICATED, "no"))) is pgferry.AuthError
    assert type(errors.from_rpc_error(_FakeRpcError(grpc.StatusCode.NOT_FOUND, "no"))) is pgferry.NotFound
    assert type(errors.from_rpc_error(_FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down"))) is pgferry.Unavailable
    rl = errors.from_rpc_error(_FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow", (("retry-after", "3"),)))
    assert isinstance(rl, pgferry.RateLimited) and rl.retry_after == 3.0


def test_rpc_status_details_carry_code_and_field() -> None:
    from pgferry.v1 import common_pb2

    raw = common_pb2.Error(code="payload_too_large", message="args too big", field="job.args").SerializeToString()
    e = errors.from_rpc_error(
        _FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "x", (("grpc-status-details-bin", raw),))
    )
    assert type(e) is pgferry.PayloadTooLarge and e.field == "job.args" and e.message == "args too big"


def test_admin_status_message_carries_code_and_field() -> None:
    """The Admin service's `code: message (field)` status messages (docs/protocol.md)."""
    e = errors.from_rpc_error(
        _FakeRpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            'invalid_argument: must be "sync" or "async" (settings.durability)',
        )
    )
    assert type(e) is pgferry.InvalidArgument
    assert (e.field, e.message) == ("settings.durability", 'must be "sync" or "async"')
    e = errors.from_rpc_error(_FakeRpcError(grpc.StatusCode.NOT_FOUND, "not_found: queue not found"))
    assert type(e) is pgferry.NotFound and (e.field, e.message) == ("", "queue not found")
    # Not that shape, or a code this SDK does not know: the status decides, message kept.
    e = errors.from_rpc_error(_FakeRpcError(grpc.StatusCode.UNAVAILABLE, "transport: broken pipe (eof)"))
    assert type(e) is pgferry.Unavailable and e.message == "transport: broken pipe (eof)"


def test_backoff_grows_with_jitter_and_caps() -> None:
    b = _conn.Backoff(base=0.1, cap=1.0)
    delays = [b.next_delay() for _ in range(8)]
    for n, d in enumerate(delays):
        ceiling = min(1.0, 0.1 * 2**n)
        assert ceiling / 2 <= d <= ceiling
    b.reset()
    assert b.next_delay() <= 0.1


def test_parse_target() -> None:
    assert _conn.parse_target("http://127.0.0.1:5005") == ("127.0.0.1:5005", False)
    assert _conn.parse_target("https://jobs.example.com") == ("jobs.example.com:443", True)
    assert _conn.parse_target("localhost:7") == ("localhost:7", False)
    assert _conn.parse_target("http://[::1]:9") == ("[::1]:9", False)
    with pytest.raises(ValueError):
        _conn.parse_target("ftp://x")


def test_outcome_validation() -> None:
    with pytest.raises(ValueError):
        pgferry.Snooze(-1)
    f = pgferry.Fail("nope", permanent=True)
    assert f.permanent and f.message == "nope"


def test_load_app(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path  # type: ignore[assignment]
    (d / "myjobs.py").write_text(  # type: ignore[operator]
        "import pgferry\n"
        "app = pgferry.Worker('http://127.0.0.1:1', 'k', queues=['q'])\n"
        "@app.job()\n"
        "async def hello(ctx): pass\n"
        "def factory():\n    return app\n"
        "not_a_worker = 3\n"
    )
    monkeypatch.syspath_prepend(str(d))
    app = load_app("myjobs:app")
    assert app.kinds == ["hello"]
    assert load_app("myjobs") is app
    assert load_app("myjobs:factory") is app
    with pytest.raises(TypeError):
        load_app("myjobs:not_a_worker")


def test_duplicate_handler_rejected() -> None:
    app = pgferry.Worker("http://127.0.0.1:1", "k", queues=["q"])
    app.register("a", lambda ctx: None)
    with pytest.raises(ValueError):
        app.register("a", lambda ctx: None)
    with pytest.raises(ValueError):
        pgferry.Worker("http://127.0.0.1:1", "k", queues=[])
