//! Tenant queue namespaces (docs/adr/0003-tenant-queue-namespacing.md).
//!
//! The engine keys queues by name and every hot statement filters by lane, so tenancy costs
//! nothing on the hot path if each tenant's queues simply have distinct engine names:
//! `t<tenant_id>.<queue>`. User queue names follow the engine's rules (a-z, 0-9, `_-.`,
//! starting with a letter or digit) but are at most 48 characters, so the prefix always
//! fits in the engine's 64 (tenant ids below 10^14). Every id-based lookup checks that the
//! job's engine queue carries the caller's prefix; a foreign job is reported as not found.
//!
//! HTTP and gRPC both use these functions; never build engine names any other way.

use pgferry_core::error::Error;

/// Longest user-visible queue name.
pub const MAX_QUEUE_NAME: usize = 48;

/// `t<tenant_id>.` — the prefix of every engine queue of a tenant.
pub fn tenant_prefix(tenant_id: i64) -> String {
    format!("t{tenant_id}.")
}

/// The scope of a tenant's idempotency keys (`t<tenant_id>`): two tenants may use one key.
pub fn tenant_scope(tenant_id: i64) -> String {
    format!("t{tenant_id}")
}

/// The engine's name of `queue` for `tenant_id`, after validating the user's name.
pub fn engine_queue(tenant_id: i64, queue: &str) -> Result<String, Error> {
    // The length first: the engine's own check would state its limit (64), not the API's.
    if queue.is_empty() || queue.len() > MAX_QUEUE_NAME {
        return Err(Error::InvalidName {
            field: "queue",
            value: queue.chars().take(80).collect(),
            reason: "must be 1 to 48 characters",
        });
    }
    pgferry_core::job::validate_queue_name(queue)?;
    Ok(format!("{}{queue}", tenant_prefix(tenant_id)))
}

/// The user's name of an engine queue if it belongs to `tenant_id`, else `None` (treat the
/// object as nonexistent).
pub fn user_queue(tenant_id: i64, engine_name: &str) -> Option<&str> {
    let rest = engine_name.strip_prefix('t')?;
    let (id, name) = rest.split_once('.')?;
    (id.parse::<i64>().ok()? == tenant_id && id == tenant_id.to_string() && !name.is_empty())
        .then_some(name)
}

/// The tenant id and user name of an engine queue, if it is a tenant's (ADR 0003).
pub fn split_engine_queue(engine_name: &str) -> Option<(i64, &str)> {
    let (id, _) = engine_name.strip_prefix('t')?.split_once('.')?;
    let tenant_id = id.parse::<i64>().ok()?;
    Some((tenant_id, user_queue(tenant_id, engine_name)?))
}

/// An engine error as a tenant's client may see it: engine queue names (`t<id>.<queue>`) in
/// it become the user's names (`None`: nothing to change). Every queue an API call names is the caller's own, so the
/// prefix carries nothing the caller does not know.
pub fn user_facing(e: &Error) -> Option<Error> {
    match e {
        Error::NotFound { what, id } if *what == "queue" && strip_tenant(id) != id => {
            Some(Error::NotFound {
                what,
                id: strip_tenant(id).to_string(),
            })
        }
        Error::InvalidName {
            field,
            value,
            reason,
        } if *field == "queue" && strip_tenant(value) != value => Some(Error::InvalidName {
            field,
            value: strip_tenant(value).to_string(),
            reason,
        }),
        _ => None,
    }
}

/// `t<digits>.<name>` → `<name>`; anything else unchanged.
fn strip_tenant(name: &str) -> &str {
    name.strip_prefix('t')
        .and_then(|rest| rest.split_once('.'))
        .filter(|(id, rest)| {
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && !rest.is_empty()
        })
        .map_or(name, |(_, rest)| rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_isolates() {
        let e = engine_queue(7, "emails.v2").unwrap();
        assert_eq!(e, "t7.emails.v2");
        assert_eq!(user_queue(7, &e), Some("emails.v2"));
        assert_eq!(user_queue(70, &e), None);
        assert_eq!(user_queue(7, "t70.emails"), None);
        assert_eq!(user_queue(7, "t07.emails"), None);
        assert_eq!(user_queue(7, "emails"), None);
        assert_eq!(user_queue(7, "t7."), None);
        assert_eq!(split_engine_queue(&e), Some((7, "emails.v2")));
        for other in ["t07.emails", "t7.", "emails", "tx.emails"] {
            assert_eq!(split_engine_queue(other), None, "{other}");
        }
    }

    #[test]
    fn engine_names_always_valid() {
        let longest = "a".repeat(MAX_QUEUE_NAME);
        let e = engine_queue(99_999_999_999_999, &longest).unwrap();
        pgferry_core::job::validate_queue_name(&e).unwrap();
        assert!(engine_queue(1, &format!("{longest}a")).is_err());
        for bad in ["", "Upper", "-lead", "sp ace", "slash/"] {
            assert!(engine_queue(1, bad).is_err(), "{bad:?}");
        }
    }
}
