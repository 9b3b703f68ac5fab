//! Request rate per destination key (GCRA, the token bucket as one timestamp): a key with
//! rate `r`/s and burst `b` sends at most `b` at once and then one every `1/r` s. A job
//! whose turn is near waits for it in the worker; one whose turn is further off is snoozed
//! until then (without using an attempt) and asks again when it comes back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::settings::Rate;

/// Longest wait held inside a claimed batch; longer waits snooze the job.
pub const HOLD: Duration = Duration::from_secs(1);

/// What a job does about the rate now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Send after this wait (zero: at once); the slot is taken.
    SendAfter(Duration),
    /// Come back after this long; no slot taken.
    Snooze(Duration),
}

#[derive(Default)]
pub struct Limiter {
    /// Theoretical arrival time per (tenant, key).
    tat: Mutex<HashMap<(i64, String), Instant>>,
}

impl Limiter {
    pub fn turn(&self, tenant: i64, key: &str, rate: Rate, now: Instant) -> Turn {
        let interval = Duration::from_secs_f64(1.0 / rate.per_sec);
        let tolerance = interval * rate.burst.saturating_sub(1);
        let mut tat = self.tat.lock().expect("not poisoned");
        let t = tat.entry((tenant, key.to_string())).or_insert(now);
        let slot = t.checked_sub(tolerance).unwrap_or(now).max(now);
        let wait = slot - now;
        if wait > HOLD {
            return Turn::Snooze(wait);
        }
        *t = (*t).max(now) + interval;
        Turn::SendAfter(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_one_per_interval() {
        let l = Limiter::default();
        let rate = Rate {
            per_sec: 10.0,
            burst: 3,
        };
        let now = Instant::now();
        let turns: Vec<Turn> = (0..20).map(|_| l.turn(1, "k", rate, now)).collect();
        let ms = |t: &Turn| match t {
            Turn::SendAfter(d) => d.as_millis() as i64,
            Turn::Snooze(d) => -(d.as_millis() as i64),
        };
        // Three at once, then every 100 ms up to the hold of one second, then snoozes.
        let waits: Vec<i64> = turns.iter().map(ms).collect();
        assert_eq!(&waits[..3], &[0, 0, 0]);
        assert_eq!(waits[3], 100);
        assert_eq!(waits[12], 1000);
        assert!(waits[13] < 0, "{waits:?}");
        // Another tenant's same key has its own budget.
        assert_eq!(l.turn(2, "k", rate, now), Turn::SendAfter(Duration::ZERO));
    }
}
