//! The scheduled phase of a listing without a kind or text filter: one index walk per lane
//! (`list_scheduled_lanes.sql`), merged here, instead of the general statement.
//!
//! `list_scheduled.sql` finds the "mark" — where the next round resumes without skipping a
//! row of any lane — with a window count, two sorts and an anti-join over a materialized
//! CTE of whole rows, because with a filter the rows read and the rows shown differ. Without
//! one every row read is shown: the newest `want` jobs of the queue are among the newest
//! `want` of each lane, so the walks' rows merged newest first are the page. No mark is
//! needed either: fewer than `want` rows means every lane gave less than it was asked (the
//! phase is done), and `want` rows fill the page, so the listing never asks for a second
//! round of this phase.
//! In `bench http-jobs` (every listing a page of 50 delayed jobs) the general statement was
//! over 40% of the database's statement time; the walk costs half as much per call
//! (docs/performance.md, "The scheduled phase as index walks, job args as text").

use tokio_postgres::Row;

use crate::error::Result;
use crate::listing_first_runs;
use crate::lookup::JobInfo;

const LIST_SCHEDULED_LANES: &str = include_str!("sql/list_scheduled_lanes.sql");

/// One round of the scheduled phase.
pub(crate) struct LanesRound {
    /// Ids shown, newest first (at most `want`).
    pub ids: Vec<i64>,
    /// Of `ids`, the first runs, read whole.
    pub whole: Vec<JobInfo>,
}

/// The newest `want` scheduled jobs of `queue` below `cursor`.
pub(crate) async fn read(
    client: &deadpool_postgres::Transaction<'_>,
    queue: &str,
    cursor: Option<i64>,
    want: i64,
) -> Result<LanesRound> {
    let stmt = client.prepare_cached(LIST_SCHEDULED_LANES).await?;
    let rows = client.query(&stmt, &[&queue, &cursor, &want]).await?;
    Ok(merge(&rows, queue, want))
}

/// The walks' rows merged into one round.
fn merge(rows: &[Row], queue: &str, want: i64) -> LanesRound {
    let mut read: Vec<(i64, &Row)> = rows.iter().map(|r| (r.get("job_id"), r)).collect();
    read.sort_unstable_by_key(|(id, _)| std::cmp::Reverse(*id));
    read.truncate(usize::try_from(want).unwrap_or(0));
    LanesRound {
        ids: read.iter().map(|(id, _)| *id).collect(),
        whole: read
            .iter()
            .filter_map(|(_, r)| listing_first_runs::whole_job(r, queue))
            .collect(),
    }
}
