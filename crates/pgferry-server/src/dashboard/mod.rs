//! The server's side of the web dashboard (`pgferry-dashboard`): who a key is, and its
//! tenant's keys and audit log, answered with the same auth code as the API. Everything
//! else the dashboard shows comes from the `/v1` router itself.

pub mod bulk;
mod search;
mod webhooks;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use pgferry_dashboard::{Backend, BackendError, BoxFut, Identity, JobSearch};
use serde_json::{json, Value};

use crate::auth::{admin, user_queue, AuthError, Principal, Scopes};
use crate::AppState;

const AUDIT_LIST: &str = include_str!("sql/audit_list.sql");
const WORKFLOW_CHILDREN: &str = include_str!("sql/workflow_children.sql");
const WORKFLOW_QUEUES: &str = include_str!("sql/workflow_queues.sql");
const QUEUE_ACTIVITY: &str = include_str!("sql/queue_activity.sql");

/// [`Backend`] over the server's state.
pub struct DashboardBackend {
    pub state: AppState,
    /// Runs bulk operations (this server's share of them).
    bulk: Arc<bulk::Runner>,
}

fn auth_error(e: AuthError) -> BackendError {
    match e {
        AuthError::Missing | AuthError::Malformed | AuthError::Invalid => {
            BackendError::unauthenticated(e.to_string())
        }
        AuthError::Forbidden { .. } => BackendError::forbidden(e.to_string()),
        AuthError::Unavailable(m) => BackendError::unavailable(m),
    }
}

fn admin_error(e: admin::AdminError) -> BackendError {
    match e {
        admin::AdminError::NoScopes => BackendError::bad_request("scopes", e.to_string()),
        admin::AdminError::NoSuchKey(_) => BackendError::not_found("key"),
        admin::AdminError::Db(e) => BackendError::unavailable(e.to_string()),
        e => BackendError::new(StatusCode::BAD_REQUEST, "invalid_argument", e.to_string()),
    }
}

fn unavailable(e: impl std::fmt::Display) -> BackendError {
    BackendError::unavailable(e.to_string())
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl DashboardBackend {
    /// The backend, with its bulk-operation runner started (inside a Tokio runtime).
    pub fn new(state: AppState) -> DashboardBackend {
        let bulk = bulk::Runner::start(Arc::clone(&state.engine));
        DashboardBackend { state, bulk }
    }

    /// The caller as the API sees it, required to hold `admin` (checked here again, not
    /// only by the dashboard's handlers).
    async fn admin_principal(&self, who: &Identity) -> Result<Principal, BackendError> {
        if !who.allows("admin") {
            return Err(BackendError::forbidden(
                "this API key lacks the `admin` scope",
            ));
        }
        Ok(Principal {
            tenant_id: who.tenant_id,
            tenant: who.tenant.clone(),
            key_id: who.key_id,
            scopes: Scopes::from_names(who.scopes.iter().map(String::as_str)).unwrap_or_default(),
        })
    }

    /// The caller as a principal, if its key has `scope`.
    fn principal_with(&self, who: &Identity, scope: &str) -> Result<Principal, BackendError> {
        if !who.allows(scope) {
            return Err(BackendError::forbidden(format!(
                "this API key lacks the `{scope}` scope"
            )));
        }
        Ok(Principal {
            tenant_id: who.tenant_id,
            tenant: who.tenant.clone(),
            key_id: who.key_id,
            scopes: Scopes::from_names(who.scopes.iter().map(String::as_str)).unwrap_or_default(),
        })
    }

    async fn tenant_keys(&self, tenant_id: i64) -> Result<Vec<admin::KeyInfo>, BackendError> {
        let client = self.state.engine.pool().get().await.map_err(unavailable)?;
        admin::list_keys(&client, tenant_id)
            .await
            .map_err(admin_error)
    }
}

impl Backend for DashboardBackend {
    fn identify<'a>(&'a self, api_key: &'a str) -> BoxFut<'a, Result<Identity, BackendError>> {
        Box::pin(async move {
            let p = self
                .state
                .auth
                .authenticate(api_key)
                .await
                .map_err(auth_error)?;
            let key_prefix = crate::auth::ApiKey::parse(api_key)
                .map(|k| k.prefix)
                .unwrap_or_default();
            Ok(Identity {
                tenant: p.tenant,
                tenant_id: p.tenant_id,
                key_id: p.key_id,
                key_prefix,
                scopes: p.scopes.names().into_iter().map(String::from).collect(),
            })
        })
    }

    fn list_keys<'a>(&'a self, who: &'a Identity) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.admin_principal(who).await?;
            let keys = self.tenant_keys(p.tenant_id).await?;
            Ok(json!({ "tenant": p.tenant, "keys": keys }))
        })
    }

    fn create_key<'a>(
        &'a self,
        who: &'a Identity,
        scopes: Vec<String>,
        label: Option<String>,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.admin_principal(who).await?;
            let scopes = Scopes::from_names(scopes.iter().map(String::as_str)).map_err(|bad| {
                BackendError::bad_request(
                    "scopes",
                    format!("unknown scope {bad:?}: produce, consume, read or admin"),
                )
            })?;
            let mut client = self.state.engine.pool().get().await.map_err(unavailable)?;
            let (key_id, key) = admin::create_key(&mut client, &p.tenant, scopes, label.as_deref())
                .await
                .map_err(admin_error)?;
            let detail = json!({ "key_id": key_id, "via": "dashboard" });
            admin::audit_api(&**client, &p, "key.create", &key.prefix, detail)
                .await
                .map_err(unavailable)?;
            Ok(json!({
                "key_id": key_id,
                "prefix": key.prefix,
                "scopes": scopes.names(),
                "label": label,
                "key": key.expose(),
            }))
        })
    }

    fn revoke_key<'a>(
        &'a self,
        who: &'a Identity,
        prefix: &'a str,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.admin_principal(who).await?;
            // Only this tenant's active keys: another tenant's prefix is "not found".
            let own = self
                .tenant_keys(p.tenant_id)
                .await?
                .into_iter()
                .any(|k| k.prefix == prefix && !k.revoked);
            if !own {
                return Err(BackendError::not_found("key"));
            }
            let mut client = self.state.engine.pool().get().await.map_err(unavailable)?;
            let key_id = admin::revoke_key(&mut client, prefix)
                .await
                .map_err(admin_error)?;
            admin::audit_api(
                &**client,
                &p,
                "key.revoke",
                prefix,
                json!({ "key_id": key_id, "via": "dashboard" }),
            )
            .await
            .map_err(unavailable)?;
            // This server stops accepting it now; others within their cache TTL.
            self.state.auth.clear_cache();
            Ok(json!({ "key_id": key_id, "prefix": prefix, "revoked": true }))
        })
    }

    fn audit_log<'a>(
        &'a self,
        who: &'a Identity,
        before: Option<i64>,
        limit: u32,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.admin_principal(who).await?;
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            let rows = client
                .query(AUDIT_LIST, &[&p.tenant_id, &before, &i64::from(limit)])
                .await
                .map_err(unavailable)?;
            let entries: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "audit_id": r.get::<_, i64>("audit_id"),
                        "at_unix_ms": unix_ms(r.get("at")),
                        "key_id": r.get::<_, Option<i64>>("key_id"),
                        "actor": r.get::<_, String>("actor"),
                        "action": r.get::<_, String>("action"),
                        "target": r.get::<_, Option<String>>("target"),
                        "detail": r.get::<_, Option<Value>>("detail"),
                    })
                })
                .collect();
            let next = (entries.len() == limit as usize)
                .then(|| entries.last().and_then(|e| e["audit_id"].as_i64()))
                .flatten();
            Ok(json!({ "entries": entries, "next_before": next }))
        })
    }

    fn workflow_children<'a>(
        &'a self,
        who: &'a Identity,
        id: i64,
        limit: u32,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            if !who.allows("read") {
                return Err(BackendError::forbidden(
                    "this API key lacks the `read` scope",
                ));
            }
            // The parent must be this tenant's (another tenant's id reads as missing).
            let wf = pgferry_core::workflow::Workflows::of(&self.state.engine);
            match wf.get(id).await {
                Ok(i) if user_queue(who.tenant_id, &i.queue).is_some() => {}
                Ok(_) | Err(pgferry_core::Error::NotFound { .. }) => {
                    return Err(BackendError::not_found("workflow instance"))
                }
                Err(e) => return Err(unavailable(e)),
            }
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            let rows = client
                .query(WORKFLOW_CHILDREN, &[&id, &(limit as i32 + 1)])
                .await
                .map_err(unavailable)?;
            let has_more = rows.len() > limit as usize;
            // Children are started in their parent's tenant; the queue check is a second
            // guard, not a filter that is expected to drop anything.
            let children: Vec<Value> = rows
                .iter()
                .take(limit as usize)
                .filter_map(|r| {
                    let queue: String = r.get("queue");
                    let queue = user_queue(who.tenant_id, &queue)?.to_string();
                    Some(json!({
                        "id": r.get::<_, i64>("id"),
                        "kind": r.get::<_, String>("kind"),
                        "queue": queue,
                        "step": r.get::<_, String>("step"),
                        "status": r.get::<_, String>("status"),
                        "attempt": r.get::<_, i32>("attempt"),
                        "error": r.get::<_, Option<String>>("error"),
                        "created_at_unix_ms": unix_ms(r.get("created_at")),
                        "finished_at_unix_ms": r.get::<_, Option<SystemTime>>("finished_at").map(unix_ms),
                    }))
                })
                .collect();
            Ok(json!({ "children": children, "has_more": has_more }))
        })
    }

    fn start_bulk<'a>(
        &'a self,
        who: &'a Identity,
        body: Value,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let (action, filter) =
                bulk::check(&body).map_err(|(f, m)| BackendError::bad_request(f, m))?;
            // A selection is the checked jobs' own actions, run as one operation: the scope
            // of one job's retry or cancel. Everything matching a filter takes `admin`.
            let p = if bulk::is_selection(&filter) {
                self.principal_with(who, "produce")?
            } else {
                self.admin_principal(who).await?
            };
            // The queue name is checked as the API would (the runner maps it again).
            if let Some(q) = filter["queue"].as_str() {
                crate::auth::engine_queue(p.tenant_id, q)
                    .map_err(|e| BackendError::bad_request("queue", e.to_string()))?;
            }
            if let Some(k) = filter["kind"].as_str() {
                pgferry_core::job::validate_kind(k)
                    .map_err(|e| BackendError::bad_request("kind", e.to_string()))?;
            }
            let op_id = self
                .bulk
                .insert(p.tenant_id, p.key_id, action, &filter)
                .await
                .map_err(unavailable)?;
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            admin::audit_api(
                &**client,
                &p,
                "bulk.start",
                &op_id.to_string(),
                json!({ "action": action, "filter": filter, "via": "dashboard" }),
            )
            .await
            .map_err(unavailable)?;
            Ok(json!({ "op_id": op_id }))
        })
    }

    fn get_bulk<'a>(
        &'a self,
        who: &'a Identity,
        op_id: Option<i64>,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            if !who.allows("read") {
                return Err(BackendError::forbidden(
                    "this API key lacks the `read` scope",
                ));
            }
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            match op_id {
                Some(id) => {
                    let row = client
                        .query_opt(bulk::GET, &[&id, &who.tenant_id])
                        .await
                        .map_err(unavailable)?
                        .ok_or_else(|| BackendError::not_found("bulk operation"))?;
                    Ok(bulk::op_json(&row))
                }
                None => {
                    let rows = client
                        .query(bulk::LIST, &[&who.tenant_id, &20i64])
                        .await
                        .map_err(unavailable)?;
                    Ok(json!({ "ops": rows.iter().map(bulk::op_json).collect::<Vec<_>>() }))
                }
            }
        })
    }

    fn cancel_bulk<'a>(
        &'a self,
        who: &'a Identity,
        op_id: i64,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.admin_principal(who).await?;
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            let stopped = client
                .query_opt(bulk::CANCEL, &[&op_id, &p.tenant_id])
                .await
                .map_err(unavailable)?
                .is_some();
            let row = client
                .query_opt(bulk::GET, &[&op_id, &p.tenant_id])
                .await
                .map_err(unavailable)?
                .ok_or_else(|| BackendError::not_found("bulk operation"))?;
            Ok(json!({ "stopped": stopped, "op": bulk::op_json(&row) }))
        })
    }

    fn queue_activity<'a>(
        &'a self,
        who: &'a Identity,
        queue: &'a str,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            if !who.allows("read") {
                return Err(BackendError::forbidden(
                    "this API key lacks the `read` scope",
                ));
            }
            // The tenant's own namespace: another tenant's queue cannot be named.
            let engine_queue = crate::auth::engine_queue(who.tenant_id, queue)
                .map_err(|e| BackendError::bad_request("queue", e.to_string()))?;
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            let row = client
                .query_one(QUEUE_ACTIVITY, &[&engine_queue])
                .await
                .map_err(unavailable)?;
            if !row.get::<_, bool>("exists") {
                return Err(BackendError::not_found("queue"));
            }
            let ms = |s: Option<f64>| s.map(|s| (s.max(0.0) * 1000.0).round() as u64);
            Ok(json!({
                "queue": queue,
                "oldest_pending_ms": ms(row.get("oldest_pending_s")),
                "start_wait_p50_ms": ms(row.get("start_wait_p50_s")),
                "start_wait_sample": row.get::<_, i64>("start_wait_sample"),
                "workers": row.get::<_, Value>("workers"),
            }))
        })
    }

    fn search_jobs<'a>(
        &'a self,
        who: &'a Identity,
        q: JobSearch,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.principal_with(who, "read")?;
            search::search_jobs(&self.state, &p, q).await
        })
    }

    fn webhook_events<'a>(
        &'a self,
        who: &'a Identity,
        slug: &'a str,
        before: Option<i64>,
        limit: u32,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.principal_with(who, "read")?;
            webhooks::events(&self.state, &p, slug, before, limit).await
        })
    }

    fn webhook_event<'a>(
        &'a self,
        who: &'a Identity,
        slug: &'a str,
        id: i64,
        cursor: Option<String>,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let p = self.principal_with(who, "read")?;
            webhooks::event(&self.state, &p, slug, id, cursor).await
        })
    }

    fn workflow_queues<'a>(&'a self, who: &'a Identity) -> BoxFut<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            if !who.allows("read") {
                return Err(BackendError::forbidden(
                    "this API key lacks the `read` scope",
                ));
            }
            let client = self.state.engine.pool().get().await.map_err(unavailable)?;
            // Every tenant's queues are walked (one probe each); only the caller's are kept.
            let rows = client
                .query(WORKFLOW_QUEUES, &[&10_000i64])
                .await
                .map_err(unavailable)?;
            let queues: Vec<String> = rows
                .iter()
                .filter_map(|r| {
                    let q: String = r.get("queue");
                    user_queue(who.tenant_id, &q).map(str::to_string)
                })
                .collect();
            Ok(json!({ "queues": queues }))
        })
    }
}
