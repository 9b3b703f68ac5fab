//! Active session history as one tenant's key may read it (docs/ash.md, "Tenants").
//!
//! The samples are database-wide: every tenant's backends, and any other application's. A
//! tenant's admin may see how loaded the database is and on what it waits, but not another
//! tenant's queue or job names: the breakdowns by queue, job kind and tenant are scoped in
//! SQL ([`read::aas_by_tenant`]), and here the tenant's own queues get the names the tenant
//! uses (`mail`, not the engine's `t7.mail`) and each sampled session of another tenant keeps
//! its wait and role but loses its queue and kind.

use pgferry_ash::read::{self, Activity, Dimension, Slice};

use crate::auth::namespace::user_queue;

/// A tenant-scoped breakdown with the tenant's own queues under their user names.
pub fn slices(tenant_id: i64, by: Dimension, mut slices: Vec<Slice>) -> Vec<Slice> {
    if by == Dimension::Queue {
        for s in &mut slices {
            if let Some(name) = user_queue(tenant_id, &s.key) {
                s.key = name.to_string();
            }
        }
    }
    slices
}

/// Sessions sampled at a moment: the tenant's own queues by their user names; a session that
/// served another tenant (or a queue of no tenant) shows [`read::OTHER_TENANTS`] as its queue
/// and no job kind.
pub fn activity(tenant_id: i64, mut rows: Vec<Activity>) -> Vec<Activity> {
    for a in &mut rows {
        let own = a
            .queue
            .as_deref()
            .and_then(|q| user_queue(tenant_id, q))
            .map(str::to_string);
        match own {
            Some(name) => a.queue = Some(name),
            None => {
                if a.queue.is_some() {
                    a.queue = Some(read::OTHER_TENANTS.to_string());
                }
                a.job_kind = None;
            }
        }
    }
    rows
}
