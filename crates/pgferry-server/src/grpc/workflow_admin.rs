//! The unary WorkflowAdmin service: start, signal (by id or correlation key), cancel,
//! retry, get and list workflow instances, as the HTTP `/v1/workflows` routes do, and a
//! queue's retention of ended instances, as `/v1/queues/{name}/workflow-retention`.
//!
//! Same keys, scopes and tenant namespacing as HTTP: queues go through the tenant
//! namespace, concurrency and rate keys get the tenant's prefix, and another tenant's
//! instance is NOT_FOUND like an unknown id. Errors are statuses `code: message (field)`.

// tonic's service methods return `Status` by value; the helpers here feed them directly.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use pgferry_core::workflow::{
    ConcurrencyStrategy, InstanceFilter, InstanceInfo, Start, Target, Workflows,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::admin_pb::{from_unix_ms, invalid, not_found, status, unix_ms};
use super::convert::parse_json;
use super::GrpcState;
use crate::auth::namespace::tenant_prefix;
use crate::auth::{user_queue, Principal, Scope};
use crate::http::extract::has_nul;
use crate::proto::v1 as pb;
use crate::service::admin::{self as service, Via};
use crate::wfsteps::tenant_key;

pub struct WorkflowAdminService {
    pub state: Arc<GrpcState>,
}

impl WorkflowAdminService {
    /// The caller, from `authorization: Bearer <key>`, holding `scope`.
    async fn principal<T>(&self, req: &Request<T>, scope: Scope) -> Result<Principal, Status> {
        self.state.authorize(req, scope).await
    }

    fn wf(&self) -> Workflows {
        Workflows::of(&self.state.engine)
    }

    /// The instance, if it is the caller's tenant's.
    async fn own(&self, p: &Principal, id: i64) -> Result<InstanceInfo, Status> {
        if id <= 0 {
            return Err(invalid(
                "id",
                "a workflow instance id is a positive integer",
            ));
        }
        match self.wf().get(id).await {
            Ok(i) if user_queue(p.tenant_id, &i.queue).is_some() => Ok(i),
            Ok(_) | Err(pgferry_core::Error::NotFound { .. }) => {
                Err(not_found("workflow instance"))
            }
            Err(e) => Err(status(&e, "")),
        }
    }
}

/// JSON text of a request: parsed, no U+0000 (Postgres cannot store it).
fn json_field(field: &str, text: &str) -> Result<Value, Status> {
    let v = parse_json(text).map_err(|e| invalid(field, &format!("not JSON: {e}")))?;
    if has_nul(&v) {
        return Err(invalid(field, "strings may not contain U+0000"));
    }
    Ok(v)
}

fn key_field(field: &str, key: &str) -> Result<(), Status> {
    if key.is_empty() || key.chars().count() > 256 {
        return Err(invalid(field, "must be 1 to 256 characters"));
    }
    if key.contains('\0') {
        return Err(invalid(field, "may not contain U+0000"));
    }
    Ok(())
}

fn user_key(p: &Principal, key: Option<String>) -> String {
    let prefix = tenant_prefix(p.tenant_id);
    key.map(|k| k.strip_prefix(&prefix).map(str::to_string).unwrap_or(k))
        .unwrap_or_default()
}

fn instance_pb(p: &Principal, i: InstanceInfo) -> pb::WorkflowInstance {
    pb::WorkflowInstance {
        id: i.id,
        kind: i.kind,
        queue: user_queue(p.tenant_id, &i.queue)
            .unwrap_or_default()
            .to_string(),
        step: i.step,
        status: i.status,
        state: i.state.to_string(),
        input: i.input.to_string(),
        result: i.result.map(|r| r.to_string()).unwrap_or_default(),
        error: i.error.unwrap_or_default(),
        attempt: i.attempt,
        max_attempts: i.max_attempts,
        priority: i.priority.max(0) as u32,
        awaits: i.awaits.unwrap_or_default(),
        await_deadline_unix_ms: i.await_deadline.map(unix_ms),
        parent_id: i.parent_id,
        children_pending: i.children_pending,
        correlation_key: i.correlation_key.unwrap_or_default(),
        concurrency_key: user_key(p, i.concurrency_key),
        rate_key: user_key(p, i.rate_key),
        worker: i.worker.unwrap_or_default(),
        inbox_pending: i.inbox_pending,
        created_at_unix_ms: unix_ms(i.created_at),
        updated_at_unix_ms: unix_ms(i.updated_at),
        finished_at_unix_ms: i.finished_at.map(unix_ms),
        history: i
            .history
            .into_iter()
            .map(|h| pb::WorkflowStepRecord {
                step_seq: h.step_seq,
                step: h.step,
                attempt: h.attempt,
                outcome: h.outcome,
                error: h.error.unwrap_or_default(),
                worker: h.worker.unwrap_or_default(),
                started_at: h.started_at.unwrap_or_default(),
                finished_at: h.finished_at,
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl pb::workflow_admin_server::WorkflowAdmin for WorkflowAdminService {
    async fn start(
        &self,
        req: Request<pb::WorkflowStartRequest>,
    ) -> Result<Response<pb::WorkflowStarted>, Status> {
        let p = self.principal(&req, Scope::Produce).await?;
        let r = req.into_inner();
        let queue = p.queue(&r.queue).map_err(|e| status(&e, ""))?;
        let input = if r.input.trim().is_empty() {
            serde_json::json!({})
        } else {
            json_field("input", &r.input)?
        };
        let mut s = Start::new(r.kind, queue, input);
        if let Some(step) = r.step {
            s.step = step;
        }
        s.state = r.state.map(|t| json_field("state", &t)).transpose()?;
        if let Some(k) = &r.correlation_key {
            key_field("correlation_key", k)?;
        }
        s.correlation_key = r.correlation_key;
        for (field, key, slot) in [
            ("concurrency_key", r.concurrency_key, &mut s.concurrency_key),
            ("rate_key", r.rate_key, &mut s.rate_key),
        ] {
            if let Some(k) = key {
                key_field(field, &k)?;
                *slot = Some(tenant_key(&p, &k));
            }
        }
        s.concurrency_limit = r.concurrency_limit;
        s.concurrency_strategy = r
            .concurrency_strategy
            .as_deref()
            .map(ConcurrencyStrategy::parse)
            .transpose()
            .map_err(|e| status(&e, ""))?;
        s.priority = u8::try_from(r.priority).map_err(|_| invalid("priority", "must be 0 to 9"))?;
        if let Some(ms) = r.run_at_unix_ms {
            if !(0..=253_402_300_799_000).contains(&ms) {
                return Err(invalid(
                    "run_at_unix_ms",
                    "must be 0 to the end of the year 9999",
                ));
            }
            s.run_at = Some(from_unix_ms(ms));
        }
        s.max_attempts = r.max_attempts;
        let started = self.wf().start(&s).await.map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::WorkflowStarted {
            id: started.id,
            duplicate: started.duplicate,
        }))
    }

    async fn signal(
        &self,
        req: Request<pb::WorkflowSignalRequest>,
    ) -> Result<Response<pb::WorkflowSignalSent>, Status> {
        use pb::workflow_signal_request::Target as T;
        let p = self.principal(&req, Scope::Produce).await?;
        let r = req.into_inner();
        if r.name.contains('\0') {
            return Err(invalid("name", "may not contain U+0000"));
        }
        let payload = json_field("payload", &r.payload)?;
        let target = match r.target {
            Some(T::Id(id)) => Target::Id(self.own(&p, id).await?.id),
            Some(T::Correlation(c)) => {
                key_field("correlation.key", &c.key)?;
                Target::Correlation {
                    queue: p.queue(&c.queue).map_err(|e| status(&e, "correlation"))?,
                    key: c.key,
                }
            }
            None => return Err(invalid("target", "give id or correlation")),
        };
        let sent = self
            .wf()
            .signal(&target, &r.name, &payload)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::WorkflowSignalSent {
            signal_id: sent.signal_id,
            instance_id: sent.instance_id,
            delivered: sent.delivered,
        }))
    }

    async fn cancel(
        &self,
        req: Request<pb::WorkflowCancelRequest>,
    ) -> Result<Response<pb::WorkflowCancelled>, Status> {
        let p = self.principal(&req, Scope::Produce).await?;
        let r = req.into_inner();
        if r.reason.chars().count() > 1024 || r.reason.contains('\0') {
            return Err(invalid("reason", "at most 1024 characters, without U+0000"));
        }
        let id = self.own(&p, r.id).await?.id;
        let reason = (!r.reason.is_empty()).then_some(r.reason.as_str());
        let previous = self
            .wf()
            .cancel(id, reason)
            .await
            .map_err(|e| status(&e, ""))?;
        let i = self.own(&p, id).await?;
        Ok(Response::new(pb::WorkflowCancelled {
            previous_status: previous,
            instance: Some(instance_pb(&p, i)),
        }))
    }

    async fn retry(
        &self,
        req: Request<pb::WorkflowIdRequest>,
    ) -> Result<Response<pb::WorkflowRetried>, Status> {
        let p = self.principal(&req, Scope::Produce).await?;
        let id = self.own(&p, req.get_ref().id).await?.id;
        let step = self.wf().retry(id).await.map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::WorkflowRetried { id, step }))
    }

    async fn get(
        &self,
        req: Request<pb::WorkflowIdRequest>,
    ) -> Result<Response<pb::WorkflowInstance>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let i = self.own(&p, req.get_ref().id).await?;
        Ok(Response::new(instance_pb(&p, i)))
    }

    async fn list(
        &self,
        req: Request<pb::WorkflowListRequest>,
    ) -> Result<Response<pb::WorkflowList>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let r = req.into_inner();
        let mut f = InstanceFilter {
            queue: p.queue(&r.queue).map_err(|e| status(&e, ""))?,
            ..InstanceFilter::default()
        };
        if !r.kind.is_empty() {
            pgferry_core::job::validate_kind(&r.kind).map_err(|e| status(&e, ""))?;
            f.kind = Some(r.kind);
        }
        if !r.status.is_empty() {
            if !pgferry_core::workflow::STATUSES.contains(&r.status.as_str()) {
                return Err(invalid("status", "not a workflow status"));
            }
            f.status = Some(r.status);
        }
        if !r.correlation_key.is_empty() {
            key_field("correlation_key", &r.correlation_key)?;
            f.correlation_key = Some(r.correlation_key);
        }
        if r.before < 0 {
            return Err(invalid("before", "the `next` of the previous page"));
        }
        f.before = (r.before > 0).then_some(r.before);
        if r.limit > 1000 {
            return Err(invalid("limit", "must be 0 (50) to 1000"));
        }
        f.limit = r.limit as usize;
        let page = self.wf().list(&f).await.map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::WorkflowList {
            instances: page
                .instances
                .into_iter()
                .map(|i| pb::WorkflowSummary {
                    id: i.id,
                    kind: i.kind,
                    queue: r.queue.clone(),
                    step: i.step,
                    status: i.status,
                    attempt: i.attempt,
                    parent_id: i.parent_id,
                    correlation_key: i.correlation_key.unwrap_or_default(),
                    concurrency_key: user_key(&p, i.concurrency_key),
                    error: i.error.unwrap_or_default(),
                    created_at_unix_ms: unix_ms(i.created_at),
                    updated_at_unix_ms: unix_ms(i.updated_at),
                    finished_at_unix_ms: i.finished_at.map(unix_ms),
                })
                .collect(),
            has_more: page.has_more,
            next: page.next,
        }))
    }

    async fn get_retention(
        &self,
        req: Request<pb::WorkflowRetentionRequest>,
    ) -> Result<Response<pb::WorkflowRetention>, Status> {
        let p = self.principal(&req, Scope::Read).await?;
        let queue = req.into_inner().queue;
        let ms = service::workflow_retention(&self.state.engine, &p, &queue)
            .await
            .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::WorkflowRetention {
            queue,
            retention_ms: ms,
        }))
    }

    async fn set_retention(
        &self,
        req: Request<pb::WorkflowRetention>,
    ) -> Result<Response<pb::WorkflowRetention>, Status> {
        let p = self.principal(&req, Scope::Admin).await?;
        let r = req.into_inner();
        let ms = service::set_workflow_retention(
            &self.state.engine,
            &p,
            &r.queue,
            r.retention_ms,
            Via::Grpc,
        )
        .await
        .map_err(|e| status(&e, ""))?;
        Ok(Response::new(pb::WorkflowRetention {
            queue: r.queue,
            retention_ms: ms,
        }))
    }
}
