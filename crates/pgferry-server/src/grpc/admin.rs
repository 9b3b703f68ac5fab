//! The unary Admin service: the HTTP `/v1` operations over gRPC (docs/protocol.md).
//!
//! Same keys (`authorization: Bearer <key>` metadata), same scopes, same tenant namespacing
//! as HTTP: a job or queue of another tenant is NOT_FOUND. Errors carry the typed code and
//! the offending field in the status message as `code: message (field)`.

// tonic's service methods return `Status` by value; the helpers here feed them directly.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use pgferry_core::{DeadFilter, JobFilter, JobInfo, QueueSettings};
use tonic::{Request, Response, Status};

use super::admin_pb::{
    durability_setting, from_unix_ms, invalid, job_pb, ms_setting, not_found, page_limit,
    parse_state, queue_pb, status, unix_ms,
};
use super::convert::new_job;
use super::GrpcState;
use crate::auth::namespace::tenant_prefix;
use crate::auth::{user_queue, Principal, Scope};
use crate::proto::v1 as pb;
use crate::service::admin::{self, Via};

/// The tenant's queues with their settings (shared with the HTTP queue listing).
const QUEUES_LIST: &str = include_str!("../http/sql/queues_list.sql");
const QUEUE_GET: &str = include_str!("../http/sql/queue_get.sql");

pub struct AdminService {
    pub state: Arc<GrpcState>,
}

impl AdminService {
    /// The caller, from `authorization: Bearer <key>`, holding `scope`.
    async fn principal<T>(&self, req: &Request<T>, scope: Scope) -> Result<Principal, Status> {
        self.state.authorize(req, scope).await
    }

    /// The job, if it belongs to the caller's tenant (else NOT_FOUND, like an unknown id).
    async fn job_info(&self, p: &Principal, id: i64) -> Result<pb::JobInfo, Status> {
        let info = admin::own_job(&self.state.engine, p, id)
            .await
            .map_err(job_status)?;
        Ok(own_job_pb(p, info))
    }

    async fn db(&self) -> Result<deadpool_postgres::Object, Status> {
        self.state
            .engine
            .pool()
            .get()
            .await
            .map_err(|e| status(&e.into(), ""))
    }

    async fn queue_info(&self, p: &Principal, engine_name: &str) -> Result<pb::QueueInfo, Status> {
        let client = self.db().await?;
        let row = client
            .query_opt(QUEUE_GET, &[&engine_name])
            .await
            .map_err(|e| status(&e.into(), ""))?
            .ok_or_else(|| not_found("queue"))?;
        let counts = self
            .state
            .engine
            .queue_counts(&[engine_name.to_string()])
            .await
            .map_err(|e| status(&e, ""))?;
        queue_pb(p, &row, &counts).ok_or_else(|| not_found("queue"))
    }

    /// A dead-letter filter limited to the caller's queues.
    async fn dead_filter(&self, p: &Principal, f: pb::DeadFilter) -> Result<DeadFilter, Status> {
        let q = admin::DeadQuery {
            queue: (!f.queue.is_empty()).then_some(f.queue),
            kind: (!f.kind.is_empty()).then_some(f.kind),
            error_contains: (!f.error_contains.is_empty()).then_some(f.error_contains),
            ids: (!f.ids.is_empty()).then_some(f.ids),
        };
        admin::dead_filter(&self.state.engine, p, q)
            .await
            .map_err(|e| status(&e, ""))
    }
}

/// One of the caller's jobs on the wire (its queue by the name the tenant knows).
fn own_job_pb(p: &Principal, info: JobInfo) -> pb::JobInfo {
    let queue = user_queue(p.tenant_id, &info.queue)
        .unwrap_or_default()
        .to_string();
    job_pb(info, queue)
}

/// An admin use case's error: an unknown (or another tenant's) job is the plain
/// `not_found: job not found`.
fn job_status(e: pgferry_core::Error) -> Status {
    match e {
        pgferry_core::Error::NotFound { what: "job", .. } => not_found("job"),
        e => status(&e, ""),
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn enqueue(
        &self,
        req: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let p = self.principal(&req, Scope::Produce).await?;
        let traceparent = super::traceparent(req.metadata());
        let mut specs = req.into_inner().jobs;
        if let Some(tp) = &traceparent {
            specs
                .iter_mut()
                .for_each(|s| super::inherit_traceparent(s, tp));
        }
        let max = self.state.config.max_batch;
        if specs.is_empty() {
            return Err(invalid("jobs", "must hold at least one job"));
        }
        if specs.len() > max {
            return Err(Status::resource_exhausted(format!(
                "batch_too_large: batch of {} jobs is over the limit of {max} (jobs)",
                specs.len()
            )));
        }
        let max_payload = self.state.engine.config().max_payload_bytes;
        let queues: Vec<String> = specs.iter().map(|s| s.queue.clone()).collect();
        let mut jobs = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let job = new_job(&p, spec, &format!("jobs[{i}]"), i, max_payload).map_err(|e| {
                let msg = format!("{}: {} ({})", e.code, e.message, e.field);
                match e.code.as_str() {
                    "payload_too_large" | "batch_too_large" => Status::resource_exhausted(msg),
                    _ => Status::invalid_argument(msg),
                }
            })?;
            jobs.push(job);
        }
        // The server's one enqueue use case, as HTTP and the Producer stream.
        let (coalescers, request) = (
            &self.state.coalescers,
            pgferry_core::EnqueueRequest::new(jobs),
        );
        let acked =
            crate::service::enqueue(coalescers, &self.state.metrics, &p.tenant, request, &queues)
                .await
                .map_err(|e| match e.engine() {
                    Some(e) => status(e, ""),
                    None => Status::unavailable(format!("{}: {e}", e.code())),
                })?;
        let done: Vec<(i64, bool)> = acked.ids.into_iter().zip(acked.duplicates).collect();
        Ok(Response::new(pb::EnqueueResponse {
            job_ids: done.iter().map(|e| e.0).collect(),
            duplicates: done.iter().map(|e| e.1).collect(),
        }))
    }

    async fn get_job(
        &self,
        req: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::JobInfo>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let id = req.into_inner().id;
        Ok(Response::new(self.job_info(&p, id).await?))
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let r = req.into_inner();
        if r.queue.is_empty() {
            return Err(invalid("queue", "is required"));
        }
        let queue = p.queue(&r.queue).map_err(|e| status(&e, ""))?;
        let filter = JobFilter {
            state: parse_state(&r.state)?,
            kind: (!r.kind.is_empty()).then_some(r.kind),
            since: r.since_unix_ms.map(from_unix_ms),
        };
        let limit = page_limit(r.limit, pgferry_core::listing::MAX_LIST_PAGE)?;
        let page = self
            .state
            .engine
            .list_jobs(&queue, &filter, Some(r.cursor.as_str()), limit)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::ListJobsResponse {
            jobs: page
                .jobs
                .into_iter()
                .map(|j| job_pb(j, r.queue.clone()))
                .collect(),
            has_more: page.has_more,
            next_cursor: page.next.unwrap_or_default(),
        }))
    }

    async fn cancel_job(
        &self,
        req: Request<pb::JobIdRequest>,
    ) -> Result<Response<pb::JobInfo>, Status> {
        let p = self.principal(&req, Scope::Produce).await?;
        let id = req.into_inner().id;
        let info = admin::cancel_job(&self.state.engine, &p, id, "cancelled over gRPC")
            .await
            .map_err(job_status)?;
        Ok(Response::new(own_job_pb(&p, info)))
    }

    async fn retry_job(
        &self,
        req: Request<pb::JobIdRequest>,
    ) -> Result<Response<pb::JobInfo>, Status> {
        let p = self.principal(&req, Scope::Produce).await?;
        let id = req.into_inner().id;
        let info = admin::retry_job(&self.state.engine, &p, id)
            .await
            .map_err(job_status)?;
        Ok(Response::new(own_job_pb(&p, info)))
    }

    async fn list_queues(
        &self,
        req: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let client = self.db().await?;
        let rows = client
            .query(QUEUES_LIST, &[&tenant_prefix(p.tenant_id)])
            .await
            .map_err(|e| status(&e.into(), ""))?;
        drop(client);
        let names: Vec<String> = rows.iter().map(|r| r.get("name")).collect();
        let counts = self
            .state
            .engine
            .queue_counts(&names)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::ListQueuesResponse {
            queues: rows
                .iter()
                .filter_map(|r| queue_pb(&p, r, &counts))
                .collect(),
        }))
    }

    async fn update_queue(
        &self,
        req: Request<pb::UpdateQueueRequest>,
    ) -> Result<Response<pb::QueueInfo>, Status> {
        let p = self.principal(&req, Scope::Admin).await?;
        let r = req.into_inner();
        let name = p.queue(&r.name).map_err(|e| status(&e, ""))?;
        let s = r.settings.unwrap_or_default();
        let settings = QueueSettings {
            max_attempts: s.max_attempts,
            lease: ms_setting("settings.lease_ms", s.lease_ms, 100, 86_400_000)?,
            backoff_base: ms_setting("settings.backoff_base_ms", s.backoff_base_ms, 0, 86_400_000)?,
            backoff_cap: ms_setting("settings.backoff_cap_ms", s.backoff_cap_ms, 0, 604_800_000)?,
            retention: ms_setting("settings.retention_ms", s.retention_ms, 0, 31_536_000_000)?,
            aging: ms_setting("settings.aging_ms", s.aging_ms, 0, 86_400_000)?,
            paused: None,
            concurrency: s.concurrency,
            durability: durability_setting(s.durability.as_deref())?,
        };
        // A queue is created on first use; an update may be that first use.
        self.state
            .engine
            .ensure_queue(&name)
            .await
            .map_err(|e| status(&e, "settings"))?;
        self.state
            .engine
            .update_queue(&name, &settings)
            .await
            .map_err(|e| status(&e, "settings"))?;
        self.audit(&p, "queue.update", &r.name).await?;
        Ok(Response::new(self.queue_info(&p, &name).await?))
    }

    async fn pause_queue(
        &self,
        req: Request<pb::QueueNameRequest>,
    ) -> Result<Response<pb::QueueInfo>, Status> {
        self.set_paused(req, true).await
    }

    async fn resume_queue(
        &self,
        req: Request<pb::QueueNameRequest>,
    ) -> Result<Response<pb::QueueInfo>, Status> {
        self.set_paused(req, false).await
    }

    async fn list_dead(
        &self,
        req: Request<pb::ListDeadRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let r = req.into_inner();
        let f = self.dead_filter(&p, r.filter.unwrap_or_default()).await?;
        let limit = page_limit(r.limit, pgferry_core::dlq::MAX_PAGE)?;
        let page = self
            .state
            .engine
            .list_dead(&f, Some(r.cursor.as_str()), limit)
            .await
            .map_err(|e| status(&e, ""))?;
        let jobs = page
            .jobs
            .into_iter()
            .filter_map(|d| {
                let queue = user_queue(p.tenant_id, &d.queue)?.to_string();
                Some(pb::JobInfo {
                    id: d.id,
                    queue,
                    kind: d.kind,
                    state: "dead".into(),
                    args: d.args.to_string(),
                    priority: u32::try_from(d.priority).unwrap_or(0),
                    max_attempts: d.max_attempts,
                    enqueued_at_unix_ms: d.enqueued_at.map_or(0, unix_ms),
                    attempts: vec![pb::AttemptInfo {
                        attempt: d.attempt,
                        outcome: "dead".into(),
                        error: d.error.unwrap_or_default(),
                        finished_at_unix_ms: unix_ms(d.died_at),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
            })
            .collect();
        Ok(Response::new(pb::ListJobsResponse {
            jobs,
            has_more: page.has_more,
            next_cursor: page.next.unwrap_or_default(),
        }))
    }

    async fn retry_dead(
        &self,
        req: Request<pb::DeadFilter>,
    ) -> Result<Response<pb::CountResponse>, Status> {
        let p = self.principal(&req, Scope::Admin).await?;
        let f = self.dead_filter(&p, req.into_inner()).await?;
        let count = admin::retry_dead(&self.state.engine, &p, &f, Via::Grpc)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::CountResponse { count }))
    }

    async fn purge_dead(
        &self,
        req: Request<pb::DeadFilter>,
    ) -> Result<Response<pb::CountResponse>, Status> {
        let p = self.principal(&req, Scope::Admin).await?;
        let f = self.dead_filter(&p, req.into_inner()).await?;
        let count = admin::purge_dead(&self.state.engine, &p, &f, Via::Grpc)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::CountResponse { count }))
    }

    async fn cancel_jobs(
        &self,
        req: Request<pb::CancelJobsRequest>,
    ) -> Result<Response<pb::CancelJobsResponse>, Status> {
        let p = self.principal(&req, Scope::Admin).await?;
        let r = req.into_inner();
        p.queue(&r.queue).map_err(|e| status(&e, "queue"))?;
        let (f, limit) = super::cancel::filter(&r)?;
        // An unknown queue is NOT_FOUND, as for its other RPCs (decided by the use case).
        let done = admin::cancel_matching(&self.state.engine, &p, &r.queue, &f, limit, Via::Grpc)
            .await
            .map_err(|e| match e {
                pgferry_core::Error::NotFound { .. } => not_found("queue"),
                e => status(&e, ""),
            })?;
        Ok(Response::new(pb::CancelJobsResponse {
            scheduled: done.scheduled,
            pending: done.pending,
            running: done.running,
            has_more: done.has_more,
        }))
    }
}

impl AdminService {
    async fn set_paused(
        &self,
        req: Request<pb::QueueNameRequest>,
        paused: bool,
    ) -> Result<Response<pb::QueueInfo>, Status> {
        let p = self.principal(&req, Scope::Admin).await?;
        let user = req.into_inner().name;
        let name = admin::set_paused(&self.state.engine, &p, &user, paused, Via::Grpc)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(self.queue_info(&p, &name).await?))
    }

    async fn audit(&self, p: &Principal, action: &str, target: &str) -> Result<(), Status> {
        let client = self.db().await?;
        crate::auth::admin::audit_api(
            &**client,
            p,
            action,
            target,
            serde_json::json!({"via": "grpc"}),
        )
        .await
        .map_err(|e| status(&e.into(), ""))
    }
}
