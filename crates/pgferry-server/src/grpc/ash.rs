//! The unary Ash service (proto/pgferry/v1/ash.proto): the active session history readers of
//! HTTP `/v1/ash/*` (docs/ash.md). Database-wide data, so every call needs the admin scope;
//! the handlers only convert, the answers come from `pgferry_ash::read`.

// tonic's service methods return `Status` by value; the helpers here feed them directly.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgferry_ash::read::{self, Dimension, Window};
use pgferry_ash::AshError;
use tonic::{Request, Response, Status};

use super::admin_pb::invalid;
use super::GrpcState;
use crate::auth::{Principal, Scope};
use crate::proto::v1 as pb;

/// Latest time a request may name (the year 9999).
const MAX_MS: i64 = 253_402_300_799_999;

pub struct AshService {
    pub state: Arc<GrpcState>,
}

fn ash_status(e: AshError) -> Status {
    match e {
        // The timeline's bucket is a width in seconds in the protocol.
        AshError::InvalidArgument {
            field: "bucket",
            reason,
        } => invalid("bucket_s", &reason),
        AshError::InvalidArgument {
            field: field @ ("since_ms" | "until_ms"),
            reason,
        } => invalid(&format!("window.{field}"), &reason),
        AshError::InvalidArgument { field, reason } => invalid(field, &reason),
        AshError::NotInstalled => Status::unavailable(
            "unavailable: active session history is not installed (run `pgferry migrate up`)",
        ),
        e => {
            tracing::error!(error = %e, "ash reader failed");
            Status::internal("internal: reading active session history failed")
        }
    }
}

fn window(w: Option<pb::AshWindow>) -> Result<Window, Status> {
    let w = w.unwrap_or_default();
    let until = w.until_ms.unwrap_or_else(|| read::ms(SystemTime::now()));
    let since = w.since_ms.unwrap_or((until - 3_600_000).max(0));
    Window::from_ms(since, until).map_err(ash_status)
}

fn window_pb(w: Window) -> pb::AshWindow {
    pb::AshWindow {
        since_ms: Some(read::ms(w.since)),
        until_ms: Some(read::ms(w.until)),
    }
}

impl AshService {
    /// The caller (admin scope) and a pooled connection.
    async fn client<T>(
        &self,
        req: &Request<T>,
    ) -> Result<(Principal, deadpool_postgres::Object), Status> {
        let who = self.state.authorize(req, Scope::Admin).await?;
        let c = self.state.engine.pool().get().await.map_err(|e| {
            tracing::warn!(error = %e, "ash: no database connection");
            Status::unavailable("unavailable: no database connection")
        })?;
        Ok((who, c))
    }
}

#[tonic::async_trait]
impl pb::ash_server::Ash for AshService {
    async fn aas(
        &self,
        req: Request<pb::AshAasRequest>,
    ) -> Result<Response<pb::AshAasResponse>, Status> {
        let (who, c) = self.client(&req).await?;
        let r = req.into_inner();
        let by: Dimension = match r.by.as_str() {
            "" => Dimension::WaitType,
            s => s.parse().map_err(ash_status)?,
        };
        let w = window(r.window)?;
        let slices = read::aas_by_tenant(&c, by, w, who.tenant_id)
            .await
            .map_err(ash_status)?;
        let slices = crate::ash_scope::slices(who.tenant_id, by, slices);
        Ok(Response::new(pb::AshAasResponse {
            window: Some(window_pb(w)),
            by: by.as_str().to_string(),
            slices: slices
                .into_iter()
                .map(|s| pb::AshSlice {
                    key: s.key,
                    seconds: s.seconds,
                    aas: s.aas,
                    db_time_pct: s.db_time_pct,
                })
                .collect(),
        }))
    }

    async fn top_waits(
        &self,
        req: Request<pb::AshTopRequest>,
    ) -> Result<Response<pb::AshTopWaitsResponse>, Status> {
        let (_, c) = self.client(&req).await?;
        let r = req.into_inner();
        let w = window(r.window)?;
        let waits = read::top_waits(&c, w, r.limit.unwrap_or(10))
            .await
            .map_err(ash_status)?;
        Ok(Response::new(pb::AshTopWaitsResponse {
            window: Some(window_pb(w)),
            waits: waits
                .into_iter()
                .map(|x| pb::AshWait {
                    wait_type: x.wait_type,
                    wait_event: x.wait_event,
                    seconds: x.seconds,
                    aas: x.aas,
                    db_time_pct: x.db_time_pct,
                })
                .collect(),
        }))
    }

    async fn top_queries(
        &self,
        req: Request<pb::AshTopRequest>,
    ) -> Result<Response<pb::AshTopQueriesResponse>, Status> {
        let (_, c) = self.client(&req).await?;
        let r = req.into_inner();
        let w = window(r.window)?;
        let queries = read::top_queries(&c, w, r.limit.unwrap_or(10))
            .await
            .map_err(ash_status)?;
        Ok(Response::new(pb::AshTopQueriesResponse {
            window: Some(window_pb(w)),
            queries: queries
                .into_iter()
                .map(|q| pb::AshQuery {
                    query_id: q.query_id,
                    query_text: q.query_text,
                    seconds: q.seconds,
                    aas: q.aas,
                    db_time_pct: q.db_time_pct,
                    top_wait: q.top_wait,
                })
                .collect(),
        }))
    }

    async fn cpu_vs_waiting(
        &self,
        req: Request<pb::AshWindow>,
    ) -> Result<Response<pb::AshCpuVsWaitingResponse>, Status> {
        let (_, c) = self.client(&req).await?;
        let w = window(Some(req.into_inner()))?;
        let s = read::cpu_vs_waiting(&c, w).await.map_err(ash_status)?;
        Ok(Response::new(pb::AshCpuVsWaitingResponse {
            window: Some(window_pb(w)),
            cpu: s.cpu,
            waiting: s.waiting,
            idle_in_transaction: s.idle_in_transaction,
            covered_seconds: s.covered_seconds,
            window_seconds: s.window_seconds,
        }))
    }

    async fn timeline(
        &self,
        req: Request<pb::AshTimelineRequest>,
    ) -> Result<Response<pb::AshTimelineResponse>, Status> {
        let (_, c) = self.client(&req).await?;
        let r = req.into_inner();
        let w = window(r.window)?;
        let bucket_s = r.bucket_s.unwrap_or(60);
        if !(1..=31_536_000).contains(&bucket_s) {
            return Err(invalid(
                "bucket_s",
                "must be 1 to 31536000 seconds (a year)",
            ));
        }
        let points = read::timeline(&c, w, Duration::from_secs(bucket_s))
            .await
            .map_err(ash_status)?;
        Ok(Response::new(pb::AshTimelineResponse {
            window: Some(window_pb(w)),
            bucket_s,
            vcpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            points: points
                .into_iter()
                .map(|p| pb::AshTimelinePoint {
                    bucket_start_ms: p.bucket_start_ms,
                    wait_type: p.wait_type,
                    aas: p.aas,
                    coverage: p.coverage,
                })
                .collect(),
        }))
    }

    async fn at(
        &self,
        req: Request<pb::AshAtRequest>,
    ) -> Result<Response<pb::AshAtResponse>, Status> {
        let (who, c) = self.client(&req).await?;
        let t = req
            .into_inner()
            .time_ms
            .unwrap_or_else(|| read::ms(SystemTime::now()));
        if !(0..=MAX_MS).contains(&t) {
            return Err(invalid("time_ms", "must be a unix time in ms"));
        }
        let moment = UNIX_EPOCH + Duration::from_millis(t as u64);
        let activity = read::activity_at(&c, moment).await.map_err(ash_status)?;
        let activity = crate::ash_scope::activity(who.tenant_id, activity);
        let blocking = read::blocking_at(&c, moment).await.map_err(ash_status)?;
        Ok(Response::new(pb::AshAtResponse {
            time_ms: t,
            activity: activity
                .into_iter()
                .map(|a| pb::AshActivity {
                    sample_at_ms: a.sample_at_ms,
                    sessions: a.sessions,
                    wait_type: a.wait_type,
                    wait_event: a.wait_event,
                    query_id: a.query_id,
                    query_text: a.query_text,
                    database: a.database,
                    user_name: a.user_name,
                    application: a.application,
                    pgferry_role: a.pgferry_role,
                    backend_type: a.backend_type,
                    queue: a.queue,
                    job_kind: a.job_kind,
                })
                .collect(),
            blocking: blocking
                .into_iter()
                .map(|b| pb::AshBlocking {
                    sample_at_ms: b.sample_at_ms,
                    pid: b.pid,
                    sessions: b.sessions,
                    blocked_by: b.blocked_by,
                    depth: b.depth,
                    root_pid: b.root_pid,
                    wait_type: b.wait_type,
                    wait_event: b.wait_event,
                    query_id: b.query_id,
                    application: b.application,
                    pgferry_role: b.pgferry_role,
                })
                .collect(),
        }))
    }
}
