//! Typed errors of the engine. Validation errors are raised before anything is written, so a
//! rejected batch leaves no trace.

/// What went wrong, with enough context to answer a client precisely.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidName {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error("payload of job {index} is {size} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge {
        index: usize,
        size: usize,
        limit: usize,
    },
    #[error("batch of {size} jobs is over the limit of {limit}")]
    BatchTooLarge { size: usize, limit: usize },
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    #[error("{0}")]
    Conflict(String),
    /// Displayed with its whole cause: the server's message, SQLSTATE, detail and hint, or
    /// the I/O error under a lost connection (tokio-postgres alone prints "db error").
    #[error("database: {}", describe_db(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("connection pool: {}", describe_pool(.0))]
    Pool(#[from] deadpool_postgres::PoolError),
}

impl Error {
    /// A stable machine-readable code for APIs.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidName { .. } => "invalid_name",
            Error::InvalidArgument { .. } => "invalid_argument",
            Error::PayloadTooLarge { .. } => "payload_too_large",
            Error::BatchTooLarge { .. } => "batch_too_large",
            Error::NotFound { .. } => "not_found",
            Error::Conflict(_) => "conflict",
            Error::Db(e) if connection_lost(e) => "unavailable",
            Error::Db(_) => "database",
            Error::Pool(_) => "unavailable",
        }
    }

    /// True when the database could not be reached or the session was lost (the server
    /// is down, restarting or refusing connections): retrying later may succeed.
    pub fn is_unavailable(&self) -> bool {
        self.code() == "unavailable"
    }

    /// True when a statement gave up waiting for a lock (`lock_timeout`).
    pub fn is_lock_timeout(&self) -> bool {
        matches!(self, Error::Db(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE))
    }

    /// What an API may tell a client: the whole message for the client's own errors; for
    /// infrastructure failures a plain sentence and the SQLSTATE, never the server's text
    /// (which names tables and constraints). Logs keep the whole cause (Display).
    pub fn public_message(&self) -> String {
        match self {
            Error::Db(e) if connection_lost(e) => {
                "the database connection was lost or the database is unavailable; retry later"
                    .to_string()
            }
            Error::Db(e) => match e.code() {
                Some(state) => format!("database error (SQLSTATE {})", state.code()),
                None => "database error".to_string(),
            },
            Error::Pool(_) => "the database is unavailable; retry later".to_string(),
            other => other.to_string(),
        }
    }

    /// The SQLSTATE of a database error, if the server sent one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// True for bad input (the caller's fault), false for infrastructure failures.
    pub fn is_invalid_input(&self) -> bool {
        !matches!(self, Error::Db(_) | Error::Pool(_))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure of the connection rather than of the statement: the session closed, an I/O
/// error, SQLSTATE class 08 (connection exception) or 57P01-57P03 (the server is shutting
/// down, crashed, or not yet accepting connections).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(state) = e.code() {
        let c = state.code();
        return c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03");
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// A database error with everything Postgres said, or the cause under it.
fn describe_db(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        if let Some(d) = db.detail() {
            out.push_str(&format!("; detail: {d}"));
        }
        if let Some(h) = db.hint() {
            out.push_str(&format!("; hint: {h}"));
        }
        return out;
    }
    // "connection closed", "error communicating with the server", ...: then what lies under.
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        out.push_str(&format!(": {c}"));
        cause = c.source();
    }
    out
}

fn describe_pool(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(db) => describe_db(db),
        other => other.to_string(),
    }
}
