"""Channels, auth metadata and reconnect backoff shared by the client and the worker."""

from __future__ import annotations

import random
from urllib.parse import urlparse

import grpc
import grpc.aio

# Keepalive so a dead server (or a silently dropped connection) is noticed in seconds,
# and large enough message limits for a full EnqueueBatch.
_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def parse_target(url: str) -> tuple[str, bool]:
    """("host:port", secure) from "http://host:port", "https://host", or "host:port"."""
    if "://" not in url:
        return url, False
    u = urlparse(url)
    if u.scheme not in ("http", "https", "grpc", "grpcs"):
        raise ValueError(f"pgferry: unsupported URL scheme {u.scheme!r} in {url!r}")
    secure = u.scheme in ("https", "grpcs")
    host = u.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    port = u.port or (443 if secure else 80)
    return f"{host}:{port}", secure


def open_channel(url: str) -> grpc.aio.Channel:
    target, secure = parse_target(url)
    if secure:
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(), options=_OPTIONS)
    return grpc.aio.insecure_channel(target, options=_OPTIONS)


def auth_metadata(api_key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),)


class Backoff:
    """Exponential backoff with jitter: delay n is uniform in [c/2, c], c = min(cap, base·2^n),
    so a fleet of workers reconnecting after a server restart does not arrive at once."""

    def __init__(self, base: float = 0.1, cap: float = 10.0) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
