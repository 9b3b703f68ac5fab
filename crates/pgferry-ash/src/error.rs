//! Errors of the sampler and the readers.

#[derive(Debug, thiserror::Error)]
pub enum AshError {
    /// A configuration value or reader argument out of range, named as the user knows it.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error(transparent)]
    Migrate(#[from] pgferry_core::migrate::MigrateError),
    #[error("the ash schema is not installed (run `pgferry migrate up`)")]
    NotInstalled,
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("connecting: {0}")]
    Connect(#[from] pgferry_core::Error),
}

impl AshError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> AshError {
        AshError::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// Undefined table/function in schema pgferry_ash: the migrations were not applied.
    pub(crate) fn from_db(e: tokio_postgres::Error) -> AshError {
        use tokio_postgres::error::SqlState;
        match e.code() {
            Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::UNDEFINED_FUNCTION => {
                AshError::NotInstalled
            }
            Some(c) if *c == SqlState::INVALID_SCHEMA_NAME => AshError::NotInstalled,
            _ => AshError::Db(e),
        }
    }
}

pub type Result<T, E = AshError> = std::result::Result<T, E>;
