"""Handler outcomes other than success and plain failure.

Raise them from a handler (or return them): `raise pgferry.Snooze(30)`. Any other
exception is a retryable failure: the server schedules the next attempt with the queue's
backoff, and dead-letters the job when its attempts run out. Except failures no attempt can
fix, which dead-letter at once: a `NonRetryable` exception (or one of the types given as
`dont_retry_on`), job arguments that do not fit the handler's parameters, and a return
value that is not JSON."""

from __future__ import annotations


class Outcome(Exception):
    """Base of the control-flow outcomes; not an error."""


class NonRetryable(Exception):
    """A failure another attempt cannot fix. Raise it, or derive your own exception types
    from it (`class BadAddress(pgferry.NonRetryable): ...`), and the job is dead-lettered at
    once with the error, whatever attempts remain. Unlike `Fail(permanent=True)` it is an
    ordinary exception, so code that is not only run as a job can raise it too."""


class Snooze(Outcome):
    """Run the job again after `seconds` without using up an attempt."""

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("Snooze(seconds) needs seconds >= 0")
        super().__init__(f"snooze {seconds}s")
        self.seconds = float(seconds)


class Cancel(Outcome):
    """Stop and cancel the job: no further attempts."""

    def __init__(self, message: str = "cancelled by handler") -> None:
        super().__init__(message)
        self.message = message


class Fail(Outcome):
    """Fail this attempt with an explicit message.

    permanent=True dead-letters the job now regardless of remaining attempts;
    retry_in (seconds) overrides the queue's backoff for the next attempt."""

    def __init__(
        self,
        message: str = "failed",
        *,
        permanent: bool = False,
        retry_in: float | None = None,
        kind: str = "Fail",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_in = retry_in
        self.kind = kind
