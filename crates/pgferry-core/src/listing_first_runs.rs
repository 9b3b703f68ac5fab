//! A listing page's first runs, read whole from the scheduled phase's own rows.
//!
//! A job waiting in `scheduled` for its first run (`first_run`, migration 0025) has no row
//! in the log: what `jobs_detail.sql` would say of it — kind, args, meta, times, priority,
//! its unique key, whether a cancel is recorded, no attempts — is all in the row that
//! `list_scheduled.sql` already read, which returns it. The listing then reads only the
//! page's other jobs through `jobs_detail.sql`, and a page of delayed jobs (a queue with a
//! backlog of them, listed newest first) costs one statement instead of two; that second
//! statement's probes of every attached log partition per job were over half of the
//! database's time in `bench http-jobs` (docs/performance.md).
//!
//! Retries and snoozes waiting in `scheduled` have earlier attempts in the log; their rows
//! say `first_run = false` and they are read through `jobs_detail.sql` as before.

use tokio_postgres::Row;

use crate::lookup::{JobInfo, JobState};

/// The job of a row of `list_scheduled.sql` (not its mark) when the row is a first run;
/// None for a retry or a snooze.
pub(crate) fn whole_job(r: &Row, queue: &str) -> Option<JobInfo> {
    if !r.get::<_, bool>("first_run") {
        return None;
    }
    Some(JobInfo {
        id: r.get("job_id"),
        queue: queue.to_string(),
        kind: r.get("kind"),
        state: JobState::Scheduled,
        args: r.get("args"),
        meta: r.get("meta"),
        priority: r.get("priority"),
        max_attempts: r.get("max_attempts"),
        enqueued_at: r.get("enqueued_at"),
        run_at: r.get("run_at"),
        attempts: Vec::new(),
        cancel_requested: r.get("cancel_requested"),
        result: None,
        unique_key: r.get("unique_key"),
    })
}
