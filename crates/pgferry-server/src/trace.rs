//! W3C trace context. A `traceparent` sent with an enqueue (HTTP header, gRPC metadata)
//! is copied into the job's `meta` unless the job carries its own, and reaches workers
//! with the job, so their spans can parent on the producer's. Request logs carry its
//! trace id, so the server's log lines of a request can be found from a trace.

use axum::http::Request;
use tracing::Span;

/// Key of the trace context in a job's meta (and the header / metadata name).
pub const TRACEPARENT: &str = "traceparent";

/// `v` if it is a well-formed `traceparent` (version-traceid-parentid-flags: 2, 32, 16 and 2
/// lowercase hex digits). Anything else is ignored: tracing must never fail a request.
pub fn valid(v: &str) -> Option<&str> {
    let v = v.trim();
    let ok = v.len() == 55
        && v.bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && v.split('-').map(str::len).eq([2, 32, 16, 2]);
    ok.then_some(v)
}

/// The trace id inside a valid `traceparent`.
pub fn trace_id(traceparent: &str) -> &str {
    traceparent.get(3..35).unwrap_or_default()
}

/// The span of one HTTP request: method, path and, when the caller sent a trace context,
/// its trace id. (Events inside a handler carry these fields; a JSON log has them too.)
pub fn http_span<B>(req: &Request<B>) -> Span {
    let trace = req
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(valid)
        .map(trace_id)
        .unwrap_or_default();
    tracing::info_span!(
        "http",
        method = %req.method(),
        path = %req.uri().path(),
        trace_id = trace,
        role = http_role(req.method(), req.uri().path()),
        // Recorded once the key is authenticated (http/extract.rs).
        tenant = tracing::field::Empty,
    )
}

/// The role an HTTP request plays, as gRPC's services name theirs (`grpc::rpc_role`):
/// producers enqueue, workers claim and report (jobs and workflow steps), everything else
/// is the API's admin and read side.
pub fn http_role(method: &axum::http::Method, path: &str) -> &'static str {
    let enqueue = method == axum::http::Method::POST
        && (path == "/v1/jobs" || path == "/v1/jobs/batch" || path == "/v1/workflows");
    if enqueue {
        "enqueuer"
    } else if path.starts_with("/v1/workers/") || path.starts_with("/v1/workflow-steps/") {
        "claimer"
    } else {
        "api"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_requests_name_their_role() {
        use axum::http::Method;
        assert_eq!(http_role(&Method::POST, "/v1/jobs"), "enqueuer");
        assert_eq!(http_role(&Method::GET, "/v1/jobs"), "api");
        assert_eq!(http_role(&Method::POST, "/v1/workers/claim"), "claimer");
        assert_eq!(
            http_role(&Method::POST, "/v1/workflow-steps/outcome"),
            "claimer"
        );
        assert_eq!(http_role(&Method::POST, "/v1/queues/q/pause"), "api");
    }

    #[test]
    fn only_well_formed_traceparents_are_taken() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(valid(tp), Some(tp));
        assert_eq!(valid(&format!(" {tp} ")), Some(tp));
        assert_eq!(trace_id(tp), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "00-abc",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(valid(bad), None, "{bad:?}");
        }
    }
}
