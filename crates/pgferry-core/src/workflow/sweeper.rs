//! The key sweeper: no concurrency-key waiter is left waiting beside a free slot.
//!
//! A slot given back goes to the key's oldest waiter in the same statement
//! (`wf_free_slot`), but waiters another transaction holds are skipped, never waited for:
//! a late, stale outcome of a child locks its parent's chain, and a parent queued on a key
//! may be that waiter. When it was the key's only waiter, the slot stayed free and the
//! waiter would wait for the key's next outcome or start, which may never come. The leader
//! walks the keys that have waiters (a loose scan of `wf_key_waiters`, which holds only the
//! waiting, so an idle pass is one index probe and reads no instance) and hands each free
//! slot nobody took back through `wf_free_slot` (`wf_sweep_key`, which NOTIFYs idle
//! workers of the queue as a delivered signal does). It also promotes waiters after a
//! key's limit was raised. Never on the hot path: claims and outcomes do nothing for it,
//! and a key row someone else holds is skipped.

use std::time::Duration;

use tokio_postgres::{Client, GenericClient};

use crate::error::Result;
use crate::leader::duty::{Duty, DutyFuture, Next};
use crate::leader::LeaderConfig;

const SWEEP: &str = include_str!("../sql/workflow/sweep_keys.sql");

/// One statement of a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Keys with waiters looked at.
    pub walked: i32,
    /// The last of them: the next statement goes on after it (`None`: none was walked).
    pub last: Option<String>,
    /// Waiters that took a free slot.
    pub promoted: i32,
}

/// Looks at up to `batch` keys with waiters after `after` (`""`: from the first) and
/// promotes waiters into their free slots, exactly as a slot given back would.
pub async fn sweep<C: GenericClient>(client: &C, after: &str, batch: i32) -> Result<Swept> {
    let stmt = client.prepare(SWEEP).await?;
    let row = client.query_one(&stmt, &[&after, &batch]).await?;
    Ok(Swept {
        walked: row.try_get("walked")?,
        last: row.try_get("last")?,
        promoted: row.try_get("promoted")?,
    })
}

/// The key sweeper duty.
pub struct KeySweeper {
    pub batch: i32,
    pub every: Duration,
    /// Where the walk goes on: a pass that walked a full batch leaves the rest to the next
    /// statement, at once.
    after: String,
}

impl KeySweeper {
    pub fn new(config: &LeaderConfig) -> KeySweeper {
        KeySweeper {
            batch: config.key_sweep_batch as i32,
            every: config.key_sweep_interval,
            after: String::new(),
        }
    }
}

impl Duty for KeySweeper {
    fn name(&self) -> &'static str {
        "workflow-key-sweeper"
    }

    fn interval(&self) -> Duration {
        self.every
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            let s = sweep(client, &self.after, self.batch).await?;
            if s.promoted > 0 {
                tracing::info!(promoted = s.promoted, "waiters promoted into free slots");
            }
            Ok(match s.last {
                Some(last) if s.walked >= self.batch => {
                    self.after = last;
                    Next::Now
                }
                _ => {
                    self.after.clear();
                    Next::Idle
                }
            })
        })
    }
}
