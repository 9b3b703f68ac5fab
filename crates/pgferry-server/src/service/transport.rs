//! Which transport the current request came through, for the audit log of operations the
//! gRPC SchedulerAdmin service runs through the HTTP handlers in process
//! (`grpc/scheduler_admin.rs`): it sets [`Via::Grpc`] around the handler's future; a request
//! from the network has none set and is HTTP.

use std::future::Future;

use super::admin::Via;

tokio::task_local! {
    static VIA: Via;
}

/// The transport of the request being handled (HTTP unless a gRPC call set it).
pub fn current() -> Via {
    VIA.try_with(|v| *v).unwrap_or(Via::Http)
}

/// `"http"` or `"grpc"`: the audit detail's `via`.
pub fn current_name() -> &'static str {
    match current() {
        Via::Http => "http",
        Via::Grpc => "grpc",
    }
}

/// Runs `f` (a handler's future, polled in this task) as a request that came through `via`.
pub async fn within<F: Future>(via: Via, f: F) -> F::Output {
    VIA.scope(via, f).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_transport_is_http_unless_a_grpc_call_set_it() {
        assert_eq!(current_name(), "http");
        assert_eq!(within(Via::Grpc, async { current_name() }).await, "grpc");
        assert_eq!(current_name(), "http");
    }
}
