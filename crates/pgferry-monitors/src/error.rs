//! Errors of monitors, targets and webhooks: bad input names the field as the API spells it.

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// `what` is the kind of object (monitor, notification target, webhook endpoint, event).
    #[error("{what} not found")]
    NotFound { what: &'static str },
    #[error("a {what} named {name:?} already exists")]
    Exists { what: &'static str, name: String },
    /// An inbound webhook's signature is missing or wrong.
    #[error("signature: {0}")]
    Signature(String),
    #[error(transparent)]
    Schedule(#[from] pgferry_schedules::ScheduleError),
    #[error(transparent)]
    Migrate(#[from] pgferry_core::migrate::MigrateError),
    #[error(transparent)]
    Engine(#[from] pgferry_core::Error),
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
}

pub type Result<T, E = MonitorError> = std::result::Result<T, E>;

impl MonitorError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> MonitorError {
        MonitorError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn not_found(what: &'static str) -> MonitorError {
        MonitorError::NotFound { what }
    }
}

impl From<deadpool_postgres::PoolError> for MonitorError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        MonitorError::Engine(pgferry_core::Error::from(e))
    }
}

/// A name of a monitor, target or endpoint slug: 1 to 128 of a-z, 0-9, `_-.`, starting
/// with a letter or digit (safe in a URL path segment).
pub fn validate_name(field: &'static str, name: &str) -> Result<()> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c);
    if name.is_empty() || name.len() > 128 {
        return Err(MonitorError::invalid(field, "must be 1 to 128 characters"));
    }
    if !name.chars().all(ok) || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(MonitorError::invalid(
            field,
            "only a-z, 0-9, '_', '-' and '.', starting with a letter or digit",
        ));
    }
    Ok(())
}
