//! The SchedulerAdmin service (proto/pgferry/v1/scheduler.proto): schedules, monitors,
//! notification targets, alerts, inbound webhook endpoints and HTTP-job settings. Each RPC
//! authenticates like every Admin call (key, rate limit, scope), then runs its HTTP
//! operation's handler in process ([`super::scheduler_bridge`]), so validation, tenant
//! scoping and audit are the HTTP API's own.

// tonic's service methods return `Status` by value.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::http::Method;
use tonic::{Request, Response, Status};

use super::scheduler_bridge::{run, segment, Call};
use super::GrpcState;
use crate::auth::Scope;
use crate::proto::v1 as pb;

pub struct SchedulerAdminService {
    pub state: Arc<GrpcState>,
}

type Reply = Result<Response<pb::JsonDocument>, Status>;

impl SchedulerAdminService {
    /// Authorizes `req` for `scope`, builds its operation and runs it.
    async fn call<T>(&self, req: Request<T>, scope: Scope, op: impl FnOnce(T) -> Call) -> Reply {
        let p = self.state.authorize(&req, scope).await?;
        let router = self.state.api.get().ok_or_else(|| {
            Status::unimplemented("not_implemented: this server has no HTTP API to run it on")
        })?;
        Ok(Response::new(run(router, p, op(req.into_inner())).await?))
    }
}

fn get(path: String) -> Call {
    Call::new(Method::GET, path)
}

fn post(path: String) -> Call {
    Call::new(Method::POST, path)
}

fn delete(path: String) -> Call {
    Call::new(Method::DELETE, path)
}

fn named(base: &str, name: &str, tail: &str) -> String {
    format!("{base}/{}{tail}", segment(name))
}

fn page(c: Call, p: pb::NamePage) -> Call {
    c.param("after", &p.after, !p.after.is_empty())
        .param("limit", p.limit, p.limit > 0)
}

const SCHEDULES: &str = "/v1/schedules";
const MONITORS: &str = "/v1/monitors";
const TARGETS: &str = "/v1/notification-targets";
const ENDPOINTS: &str = "/v1/webhook-endpoints";

#[tonic::async_trait]
impl pb::scheduler_admin_server::SchedulerAdmin for SchedulerAdminService {
    async fn create_schedule(&self, req: Request<pb::JsonBody>) -> Reply {
        self.call(req, Scope::Admin, |r| post(SCHEDULES.into()).body(r.json))
            .await
    }
    async fn list_schedules(&self, req: Request<pb::NamePage>) -> Reply {
        self.call(req, Scope::Read, |r| page(get(SCHEDULES.into()), r))
            .await
    }
    async fn get_schedule(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Read, |r| get(named(SCHEDULES, &r.name, "")))
            .await
    }
    async fn delete_schedule(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| delete(named(SCHEDULES, &r.name, "")))
            .await
    }
    async fn pause_schedule(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(SCHEDULES, &r.name, "/pause"))
        })
        .await
    }
    async fn resume_schedule(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(SCHEDULES, &r.name, "/resume"))
        })
        .await
    }
    async fn preview_schedule(&self, req: Request<pb::PreviewScheduleRequest>) -> Reply {
        self.call(req, Scope::Read, |r| {
            get(named(SCHEDULES, &r.name, "/preview")).param("n", r.n, r.n > 0)
        })
        .await
    }
    async fn list_schedule_fires(&self, req: Request<pb::ListScheduleFiresRequest>) -> Reply {
        self.call(req, Scope::Read, |r| {
            get(named(SCHEDULES, &r.name, "/fires"))
                .param("before", &r.before, !r.before.is_empty())
                .param("limit", r.limit, r.limit > 0)
        })
        .await
    }
    async fn backfill_schedule(&self, req: Request<pb::ObjectBody>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(SCHEDULES, &r.name, "/backfill")).body(r.json)
        })
        .await
    }

    async fn create_monitor(&self, req: Request<pb::JsonBody>) -> Reply {
        self.call(req, Scope::Admin, |r| post(MONITORS.into()).body(r.json))
            .await
    }
    async fn list_monitors(&self, req: Request<pb::NamePage>) -> Reply {
        self.call(req, Scope::Read, |r| page(get(MONITORS.into()), r))
            .await
    }
    async fn get_monitor(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Read, |r| get(named(MONITORS, &r.name, "")))
            .await
    }
    async fn delete_monitor(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| delete(named(MONITORS, &r.name, "")))
            .await
    }
    async fn pause_monitor(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(MONITORS, &r.name, "/pause"))
        })
        .await
    }
    async fn resume_monitor(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(MONITORS, &r.name, "/resume"))
        })
        .await
    }
    async fn list_monitor_pings(&self, req: Request<pb::ListPingsRequest>) -> Reply {
        self.call(req, Scope::Read, |r| {
            get(named(MONITORS, &r.name, "/pings")).param("limit", r.limit, r.limit > 0)
        })
        .await
    }
    async fn list_alerts(&self, req: Request<pb::ListAlertsRequest>) -> Reply {
        self.call(req, Scope::Read, |r| {
            get("/v1/alerts".into())
                .param("type", &r.r#type, !r.r#type.is_empty())
                .param("subject", &r.subject, !r.subject.is_empty())
                .param("before", r.before, r.before != 0)
                .param("limit", r.limit, r.limit > 0)
        })
        .await
    }

    async fn create_notification_target(&self, req: Request<pb::JsonBody>) -> Reply {
        self.call(req, Scope::Admin, |r| post(TARGETS.into()).body(r.json))
            .await
    }
    async fn list_notification_targets(&self, req: Request<pb::NamePage>) -> Reply {
        self.call(req, Scope::Read, |r| page(get(TARGETS.into()), r))
            .await
    }
    async fn get_notification_target(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Read, |r| get(named(TARGETS, &r.name, "")))
            .await
    }
    async fn update_notification_target(&self, req: Request<pb::ObjectBody>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            Call::new(Method::PATCH, named(TARGETS, &r.name, "")).body(r.json)
        })
        .await
    }
    async fn delete_notification_target(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| delete(named(TARGETS, &r.name, "")))
            .await
    }

    async fn create_webhook_endpoint(&self, req: Request<pb::JsonBody>) -> Reply {
        self.call(req, Scope::Admin, |r| post(ENDPOINTS.into()).body(r.json))
            .await
    }
    async fn list_webhook_endpoints(&self, req: Request<pb::NamePage>) -> Reply {
        self.call(req, Scope::Read, |r| page(get(ENDPOINTS.into()), r))
            .await
    }
    async fn get_webhook_endpoint(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Read, |r| get(named(ENDPOINTS, &r.name, "")))
            .await
    }
    async fn delete_webhook_endpoint(&self, req: Request<pb::ObjectName>) -> Reply {
        self.call(req, Scope::Admin, |r| delete(named(ENDPOINTS, &r.name, "")))
            .await
    }
    async fn list_webhook_events(&self, req: Request<pb::ListWebhookEventsRequest>) -> Reply {
        self.call(req, Scope::Read, |r| {
            get(named(ENDPOINTS, &r.slug, "/events"))
                .param("after", r.after, r.after != 0)
                .param("limit", r.limit, r.limit > 0)
        })
        .await
    }
    async fn replay_webhook_event(&self, req: Request<pb::ReplayWebhookEventRequest>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(
                ENDPOINTS,
                &r.slug,
                &format!("/events/{}/replay", r.id),
            ))
        })
        .await
    }
    async fn replay_webhook_events(&self, req: Request<pb::ObjectBody>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(ENDPOINTS, &r.name, "/replay")).body(r.json)
        })
        .await
    }
    async fn rotate_webhook_endpoint_address(&self, req: Request<pb::ObjectBody>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            post(named(ENDPOINTS, &r.name, "/rotate-address")).body(r.json)
        })
        .await
    }

    async fn create_signing_secret(&self, req: Request<pb::NoArguments>) -> Reply {
        self.call(req, Scope::Admin, |_| post("/v1/http-jobs/secrets".into()))
            .await
    }
    async fn list_signing_secrets(&self, req: Request<pb::NoArguments>) -> Reply {
        self.call(req, Scope::Read, |_| get("/v1/http-jobs/secrets".into()))
            .await
    }
    async fn rotate_signing_secret(&self, req: Request<pb::NoArguments>) -> Reply {
        self.call(req, Scope::Admin, |_| {
            post("/v1/http-jobs/secrets/rotate".into())
        })
        .await
    }
    async fn delete_signing_secret(&self, req: Request<pb::SecretId>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            delete(format!("/v1/http-jobs/secrets/{}", r.id))
        })
        .await
    }
    async fn get_http_allow_list(&self, req: Request<pb::NoArguments>) -> Reply {
        self.call(req, Scope::Read, |_| get("/v1/http-jobs/allow".into()))
            .await
    }
    async fn put_http_allow_list(&self, req: Request<pb::JsonBody>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            Call::new(Method::PUT, "/v1/http-jobs/allow".into()).body(r.json)
        })
        .await
    }
    async fn delete_http_allow_list(&self, req: Request<pb::NoArguments>) -> Reply {
        self.call(req, Scope::Admin, |_| delete("/v1/http-jobs/allow".into()))
            .await
    }
    async fn list_http_rates(&self, req: Request<pb::NoArguments>) -> Reply {
        self.call(req, Scope::Read, |_| get("/v1/http-jobs/rates".into()))
            .await
    }
    async fn put_http_rate(&self, req: Request<pb::JsonBody>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            Call::new(Method::PUT, "/v1/http-jobs/rates".into()).body(r.json)
        })
        .await
    }
    async fn delete_http_rate(&self, req: Request<pb::Destination>) -> Reply {
        self.call(req, Scope::Admin, |r| {
            delete("/v1/http-jobs/rates".into()).param("destination", &r.destination, true)
        })
        .await
    }
    async fn list_http_transitions(&self, req: Request<pb::ListTransitionsRequest>) -> Reply {
        self.call(req, Scope::Read, |r| {
            get("/v1/http-jobs/transitions".into())
                .param("before", r.before, r.before != 0)
                .param("limit", r.limit, r.limit > 0)
        })
        .await
    }
}
