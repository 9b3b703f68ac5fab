//! The gRPC front: the Producer and Worker streams of proto/pgferry/v1 (docs/protocol.md).
//!
//! Both streams authenticate once, with the `hello` that must open them, and then carry
//! many requests. Writes go through the server's group-commit coalescers (one statement per
//! flush across every stream and HTTP request); an ack is sent only after COMMIT. Workers
//! are fed by one dispatcher per queue ([`dispatch`]) that claims ahead of demand and hands
//! jobs out strictly within the credits each stream granted.

mod admin;
mod admin_pb;
mod ash;
mod cancel;
pub mod codec;
mod convert;
pub mod dispatch;
mod producer;
mod scheduler_admin;
mod scheduler_bridge;
mod worker;
mod workflow_admin;
mod workflow_pb;
mod workflow_worker;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::Engine;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::Status;

use crate::auth::token::TokenKey;
use crate::auth::{Auth, AuthError, Principal, Scope};
use crate::coalesce::Coalescers;
use crate::http::extract::RateLimiter;
use crate::proto::v1 as pb;

/// Limits and timings of the gRPC front.
#[derive(Debug, Clone)]
pub struct GrpcConfig {
    /// Largest EnqueueBatch (told to producers in HelloAck).
    pub max_batch: usize,
    /// Jobs a dispatcher claims beyond the credits it currently sees, so that a credit
    /// arriving with a result is answered from memory, not after a claim round trip. It
    /// must cover what the streams consume during a claim's round trip: 256 left busy
    /// workers waiting on claims (bench cycle --via grpc, 128 slots: 0.43-0.48x of the
    /// in-process cycle against 0.82-0.97x with 1024 in the same minutes).
    pub prefetch: usize,
    /// Largest single claim.
    pub max_claim: usize,
    /// Claims one dispatcher runs at once (the engine puts concurrent claims of a process on
    /// different lanes of the queue; more than the queue's shards find nothing), while its
    /// claims find more than a job or so each; one at a time below that (`dispatch::claims`).
    pub claim_concurrency: usize,
    /// Longest a dispatcher with unmet demand waits for a tick before claiming again anyway
    /// (a backstop: ticks normally wake it within milliseconds of an enqueue).
    pub idle_poll: Duration,
    /// HTTP/2 keepalive pings on idle connections (and their timeout).
    pub keepalive: Duration,
    /// Lease assumed for a queue whose settings cannot be read (the engine's default).
    pub default_lease: Duration,
    /// Requests (enqueues or results) one stream may have waiting for COMMIT at once;
    /// beyond it the server stops reading that stream (HTTP/2 flow control pushes back).
    pub max_inflight_per_stream: usize,
    /// Credits one stream may hold unused (bounds what a dispatcher claims for it).
    pub max_credits: u64,
    /// Largest decoded message.
    pub max_message_bytes: usize,
    /// Most items per JobBatch / ResultBatch / ResultAckBatch on a worker stream that asked
    /// for batches (the hello_ack carries the smaller of this and the worker's wish).
    pub max_worker_batch: u32,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            max_batch: 1000,
            prefetch: 1024,
            max_claim: 500,
            claim_concurrency: 2,
            idle_poll: Duration::from_secs(1),
            keepalive: Duration::from_secs(20),
            default_lease: Duration::from_secs(60),
            max_inflight_per_stream: 1024,
            max_credits: 10_000,
            max_message_bytes: 32 << 20,
            max_worker_batch: 500,
        }
    }
}

/// Everything the gRPC services share.
pub struct GrpcState {
    pub engine: Arc<Engine>,
    pub auth: Arc<Auth>,
    pub coalescers: Arc<Coalescers>,
    /// The server's metrics (shared with the HTTP API).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Claim order of the receipts handed out (shared with the HTTP claim).
    pub receipts: Arc<crate::coalesce::ReceiptBook>,
    pub tokens: Arc<TokenKey>,
    pub config: GrpcConfig,
    pub dispatchers: dispatch::Registry,
    /// The HTTP API's per-key rate limits: Admin calls and stream opens take a token.
    pub limiter: Arc<RateLimiter>,
    /// The HTTP API's `/v1` router over the same state: SchedulerAdmin runs its operations
    /// through it in process (set by [`GrpcState::from_app`]; unset, those RPCs are
    /// UNIMPLEMENTED).
    pub(crate) api: std::sync::OnceLock<axum::Router>,
    /// Becomes true when the server stops: streams end with UNAVAILABLE, dispatchers hand
    /// back what they hold.
    stopping: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
}

impl GrpcState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Arc<Engine>,
        auth: Arc<Auth>,
        coalescers: Arc<Coalescers>,
        metrics: Arc<crate::metrics::Metrics>,
        receipts: Arc<crate::coalesce::ReceiptBook>,
        tokens: Arc<TokenKey>,
        config: GrpcConfig,
        limiter: Arc<RateLimiter>,
    ) -> Arc<GrpcState> {
        let (stop, stopping) = watch::channel(false);
        Arc::new(GrpcState {
            dispatchers: dispatch::Registry::new(
                engine.clone(),
                coalescers.clone(),
                metrics.clone(),
                receipts.clone(),
                tokens.clone(),
                config.clone(),
                stopping.clone(),
            ),
            engine,
            auth,
            coalescers,
            metrics,
            receipts,
            tokens,
            config,
            limiter,
            api: std::sync::OnceLock::new(),
            stopping,
            stop,
        })
    }

    /// The gRPC front over the same engine, keys and coalescers as the HTTP API (group
    /// commit spans both). Loads the shared token secret (the same key HTTP signs with).
    pub async fn from_app(
        app: &crate::AppState,
        config: GrpcConfig,
    ) -> pgferry_core::Result<Arc<GrpcState>> {
        let client = app.engine.pool().get().await?;
        let tokens = TokenKey::load_or_create(&client).await?;
        drop(client);
        let state = GrpcState::new(
            app.engine.clone(),
            app.auth.clone(),
            app.coalescers.clone(),
            app.metrics.clone(),
            app.receipts.clone(),
            Arc::new(tokens),
            config,
            app.http.limiter.clone(),
        );
        let api = crate::http::router(&app.http.config).with_state(app.clone());
        let _ = state.api.set(api);
        Ok(state)
    }

    /// Authenticates a hello: the key must exist, be live and hold `scope`.
    pub(crate) async fn hello(&self, api_key: &str, scope: Scope) -> Result<Principal, Status> {
        let p = self.auth.authenticate(api_key).await.map_err(auth_status)?;
        // Like HTTP: every authenticated request takes a token, allowed or not.
        self.rate_limit(&p)?;
        p.require(scope).map_err(auth_status)?;
        Ok(p)
    }

    /// Authenticates a unary call from its `authorization: Bearer <key>` metadata, as
    /// [`GrpcState::hello`] does a stream's hello.
    pub(crate) async fn authorize<T>(
        &self,
        req: &tonic::Request<T>,
        scope: Scope,
    ) -> Result<Principal, Status> {
        let header = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let key = header.strip_prefix("Bearer ").unwrap_or("").trim();
        self.hello(key, scope).await
    }

    // tonic's handlers return `Status` by value.
    #[allow(clippy::result_large_err)]
    /// Takes one of the key's tokens: RESOURCE_EXHAUSTED with a `retry-after` (seconds)
    /// in the status metadata when the bucket is empty, like HTTP's 429.
    pub(crate) fn rate_limit(&self, p: &Principal) -> Result<(), Status> {
        self.limiter.check(p.key_id).map_err(|e| {
            let mut s = Status::resource_exhausted(format!("{}: {}", e.code, e.message));
            if let Some(secs) = e.retry_after {
                s.metadata_mut()
                    .insert("retry-after", tonic::metadata::MetadataValue::from(secs));
            }
            s
        })
    }

    fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.clone()
    }
}

fn auth_status(e: AuthError) -> Status {
    match e {
        AuthError::Missing | AuthError::Malformed | AuthError::Invalid => {
            Status::unauthenticated(e.to_string())
        }
        AuthError::Forbidden { .. } => Status::permission_denied(e.to_string()),
        AuthError::Unavailable(_) => Status::unavailable(e.to_string()),
    }
}

/// A well-formed `traceparent` in a request's metadata (see [`crate::trace`]).
pub(crate) fn traceparent(md: &tonic::metadata::MetadataMap) -> Option<String> {
    let v = md.get(crate::trace::TRACEPARENT)?.to_str().ok()?;
    crate::trace::valid(v).map(str::to_string)
}

/// Gives a job the request's trace context unless it carries its own.
pub(crate) fn inherit_traceparent(spec: &mut pb::JobSpec, traceparent: &str) {
    spec.meta
        .entry(crate::trace::TRACEPARENT.to_string())
        .or_insert_with(|| traceparent.to_string());
}

/// A typed error for an ack.
pub(crate) fn pb_error(
    code: &str,
    message: impl Into<String>,
    field: impl Into<String>,
) -> pb::Error {
    pb::Error {
        code: code.to_string(),
        message: message.into(),
        field: field.into(),
    }
}

/// An engine error as a typed ack error; `prefix` locates the input (`jobs[3]`, `job`).
pub(crate) fn engine_error(e: &pgferry_core::Error, prefix: &str) -> pb::Error {
    use pgferry_core::Error as E;
    if let Some(user) = crate::auth::namespace::user_facing(e) {
        return engine_error(&user, prefix);
    }
    let join = |f: &str| {
        if prefix.is_empty() {
            f.to_string()
        } else {
            format!("{prefix}.{f}")
        }
    };
    let field = match e {
        E::InvalidName { field, .. } | E::InvalidArgument { field, .. } => join(field),
        E::PayloadTooLarge { .. } => join("args"),
        E::BatchTooLarge { .. } => "jobs".to_string(),
        _ => String::new(),
    };
    if !e.is_invalid_input() {
        tracing::error!(error = %e, sqlstate = e.sqlstate(), "gRPC request failed");
    }
    pb_error(e.code(), e.public_message(), field)
}

/// Runs a stream's task; if it panics, the stream ends with INTERNAL (logged) rather than
/// looking like a clean end to the client. The task keeps the call's span.
pub(crate) fn spawn_stream<T: Send + 'static>(
    task: impl Future<Output = ()> + Send + 'static,
    tx: tokio::sync::mpsc::UnboundedSender<Result<T, Status>>,
) {
    use futures_util::FutureExt;
    let task = std::panic::AssertUnwindSafe(tracing::Instrument::in_current_span(task));
    tokio::spawn(async move {
        if let Err(err) = task.catch_unwind().await {
            let _ = grpc_panic(err);
            let _ = tx.send(Err(Status::internal(
                "internal: internal error (logged on the server)",
            )));
        }
    });
}

/// How [`panic_guard`] answers a panic.
pub type PanicAnswer =
    fn(Box<dyn std::any::Any + Send>) -> tonic::codegen::http::Response<tonic::body::Body>;

/// The layer that answers a panicking gRPC handler with INTERNAL (and logs the panic)
/// instead of dropping the connection, like the HTTP API's panic guard.
pub fn panic_guard() -> tower_http::catch_panic::CatchPanicLayer<PanicAnswer> {
    tower_http::catch_panic::CatchPanicLayer::custom(grpc_panic as fn(_) -> _)
}

fn grpc_panic(
    err: Box<dyn std::any::Any + Send + 'static>,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    let detail = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "gRPC handler panicked");
    Status::internal("internal: internal error (logged on the server)").into_http()
}

/// Serves the Producer, Worker and Admin services on `listener` until `shutdown` resolves; then
/// ends every open stream (UNAVAILABLE, so clients reconnect elsewhere), hands back the
/// jobs dispatchers claimed but did not deliver, and returns.
pub async fn serve_grpc(
    listener: TcpListener,
    state: Arc<GrpcState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let max = state.config.max_message_bytes;
    let producer = pb::producer_server::ProducerServer::new(producer::ProducerService {
        state: state.clone(),
    })
    .max_decoding_message_size(max);
    let worker = pb::worker_server::WorkerServer::new(worker::WorkerService {
        state: state.clone(),
    })
    .max_decoding_message_size(max);
    let admin = pb::admin_server::AdminServer::new(admin::AdminService {
        state: state.clone(),
    })
    .max_decoding_message_size(max);
    let workflow_worker = pb::workflow_worker_server::WorkflowWorkerServer::new(
        workflow_worker::WorkflowWorkerService {
            state: state.clone(),
        },
    )
    .max_decoding_message_size(max);
    let workflow_admin =
        pb::workflow_admin_server::WorkflowAdminServer::new(workflow_admin::WorkflowAdminService {
            state: state.clone(),
        })
        .max_decoding_message_size(max);
    let ash = pb::ash_server::AshServer::new(ash::AshService {
        state: state.clone(),
    })
    .max_decoding_message_size(max);
    let scheduler_admin = pb::scheduler_admin_server::SchedulerAdminServer::new(
        scheduler_admin::SchedulerAdminService {
            state: state.clone(),
        },
    )
    .max_decoding_message_size(max);
    let stop = state.stop.clone();
    let signal = async move {
        shutdown.await;
        // Streams watch this and end, which lets the graceful shutdown below finish.
        let _ = stop.send(true);
    };
    let result = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(state.config.keepalive))
        .http2_keepalive_timeout(Some(state.config.keepalive))
        .tcp_nodelay(true)
        .layer(panic_guard())
        // Log lines of a call (errors, warnings) name its RPC and trace id.
        .trace_fn(|req| {
            let trace = req
                .headers()
                .get(crate::trace::TRACEPARENT)
                .and_then(|v| v.to_str().ok())
                .and_then(crate::trace::valid)
                .map(crate::trace::trace_id)
                .unwrap_or_default();
            let rpc = req.uri().path();
            tracing::info_span!("grpc", rpc = %rpc, role = rpc_role(rpc), trace_id = trace)
        })
        .add_service(producer)
        .add_service(worker)
        .add_service(admin)
        .add_service(workflow_worker)
        .add_service(workflow_admin)
        .add_service(ash)
        .add_service(scheduler_admin)
        .serve_with_incoming_shutdown(incoming(listener), signal)
        .await;
    let _ = state.stop.send(true);
    state.dispatchers.close_all().await;
    result
}

/// The pgferry role of an RPC for log lines (issue 27): enqueuer, claimer or admin.
fn rpc_role(path: &str) -> &'static str {
    let service = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match service.rsplit('.').next().unwrap_or("") {
        "Producer" => "enqueuer",
        "Worker" | "WorkflowWorker" => "claimer",
        _ => "admin",
    }
}

/// Accepted connections with TCP_NODELAY. `Server::tcp_nodelay` only reaches sockets tonic
/// binds itself, not those of a listener passed in; without it Nagle holds each small
/// JobBatch back until the previous segment is acked, which bounded every worker's round
/// trip (gRPC cycle 26-34k jobs/s with Nagle, 41-48k without; docs/performance.md).
fn incoming(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_have_nodelay() {
        use tokio_stream::StreamExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_panicking_stream_task_ends_its_stream_with_internal() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<(), Status>>();
        let task_tx = tx.clone();
        spawn_stream(
            async move {
                let _ = task_tx.send(Ok(()));
                panic!("stream bug");
            },
            tx,
        );
        assert!(rx.recv().await.unwrap().is_ok());
        let e = rx.recv().await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        assert!(rx.recv().await.is_none(), "the stream ends there");
    }

    #[test]
    fn log_lines_of_an_rpc_name_its_role() {
        assert_eq!(rpc_role("/pgferry.v1.Producer/Enqueue"), "enqueuer");
        assert_eq!(rpc_role("/pgferry.v1.Worker/Work"), "claimer");
        assert_eq!(rpc_role("/pgferry.v1.WorkflowWorker/Steps"), "claimer");
        assert_eq!(rpc_role("/pgferry.v1.Admin/ListQueues"), "admin");
        assert_eq!(rpc_role("/pgferry.v1.WorkflowAdmin/Start"), "admin");
        assert_eq!(rpc_role(""), "admin");
    }
}
