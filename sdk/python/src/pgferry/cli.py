"""`pgferry-worker module:app` — import a Worker (or a pgferry.App, whose tasks it then
runs, from every queue they use) and run it until SIGTERM/SIGINT.

The URL and key default to the Worker's own arguments; PGFERRY_URL / PGFERRY_API_KEY or
--url / --api-key override them (handy when the module builds its Worker from settings)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from pgferry.app import App
from pgferry.worker import Worker


def load_app(spec: str) -> Worker | App:
    """Resolve "package.module:attr" (attr defaults to `app`) to a Worker or App instance;
    a callable attr is called with no arguments (an app factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise ValueError(f"expected module:app, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the current project is importable
    module = importlib.import_module(module_name)
    obj: object = module
    for part in (attr or "app").split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, (Worker, App)) and callable(obj):
        obj = obj()
    if not isinstance(obj, (Worker, App)):
        raise TypeError(f"{spec} is {type(obj).__name__}, not a pgferry.Worker or pgferry.App")
    return obj


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pgferry-worker", description=__doc__)
    p.add_argument("app", help="module:attribute of a pgferry.Worker or pgferry.App (attribute defaults to app)")
    p.add_argument("--url", default=os.environ.get("PGFERRY_URL"))
    p.add_argument("--api-key", default=os.environ.get("PGFERRY_API_KEY"))
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--grace", type=float, default=None, help="drain grace period in seconds")
    p.add_argument("--log-level", default=os.environ.get("PGFERRY_LOG", "INFO"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        loaded = load_app(a.app)
        if isinstance(loaded, App):
            if a.url:
                loaded.url = a.url
            if a.api_key:
                loaded.api_key = a.api_key
            app = loaded.worker(concurrency=a.concurrency or 10)
        else:
            app = loaded
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        print(f"pgferry-worker: cannot load {a.app}: {e}", file=sys.stderr)
        return 2
    if a.url:
        app.url = a.url
    if a.api_key:
        app._api_key = a.api_key
    if a.concurrency:
        app.concurrency = a.concurrency
    if a.grace is not None:
        app.grace_period = a.grace
        if app._companion is not None:
            app._companion.grace_period = a.grace
    wf = app._companion
    logging.getLogger("pgferry").info(
        "pgferry-worker: %s on %s, queues=%s kinds=%s workflows=%s concurrency=%d",
        a.app, app.url, ",".join(app.queues), ",".join(app.kinds),
        ",".join(sorted(wf.kinds)) if wf is not None else "", app.concurrency,
    )
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
