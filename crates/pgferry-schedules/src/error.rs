//! Errors of schedules: bad input names the field in the API's terms.

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("schedule {0:?} not found")]
    NotFound(String),
    #[error("a schedule named {0:?} already exists")]
    Exists(String),
    /// A fire row appeared under a pass that held its schedule locked (a writer of fires
    /// that did not lock the schedule: a bug); the pass is rolled back.
    #[error("fires of schedule {schedule} were written concurrently")]
    FireRaced { schedule: i64 },
    #[error(transparent)]
    Migrate(#[from] pgferry_core::migrate::MigrateError),
    #[error(transparent)]
    Engine(#[from] pgferry_core::Error),
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
}

pub type Result<T, E = ScheduleError> = std::result::Result<T, E>;

impl ScheduleError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> ScheduleError {
        ScheduleError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
