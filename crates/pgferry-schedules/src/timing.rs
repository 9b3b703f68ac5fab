//! When a schedule fires: a cron expression read in an IANA time zone, or a fixed interval.
//!
//! Daylight saving time. A cron time names a wall-clock time; it fires at the first instant
//! whose wall clock reads that time or later:
//! - a wall-clock time that happens twice (clocks go back) fires once, at its first
//!   occurrence;
//! - a wall-clock time that does not exist (clocks go forward) fires once, at the instant
//!   the clock jumps. Several such times (`*/15` in the skipped hour) land on that same
//!   instant and, fires being unique per (schedule, fire time), fire once together.
//!
//! That mapping never goes backwards as the wall-clock time grows, so the next fire after an
//! instant is the first matching wall-clock time whose instant is later.

use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use crate::cron::Cron;
use crate::error::{Result, ScheduleError};

/// How far before an instant's wall-clock time to start looking: more than any zone's
/// largest backwards jump (2 h), so a fold's first occurrence is never missed.
const FOLD_LOOKBACK: SignedDuration = SignedDuration::from_hours(3);

/// Longest interval: 366 days.
pub const MAX_INTERVAL_MS: i64 = 366 * 86_400_000;

#[derive(Debug, Clone)]
pub enum Timing {
    Cron {
        cron: Cron,
        tz: TimeZone,
    },
    /// Every `every`, counted from `anchor`.
    Interval {
        every: SignedDuration,
        anchor: Timestamp,
    },
}

impl Timing {
    pub fn cron(expr: &str, tz: &str) -> Result<Timing> {
        Ok(Timing::Cron {
            cron: Cron::parse(expr)?,
            tz: zone(tz)?,
        })
    }

    pub fn interval(every_ms: i64, anchor: Timestamp) -> Result<Timing> {
        if !(1000..=MAX_INTERVAL_MS).contains(&every_ms) {
            return Err(ScheduleError::Invalid {
                field: "interval_ms",
                reason: format!("must be 1000 (one second) to {MAX_INTERVAL_MS} (366 days)"),
            });
        }
        Ok(Timing::Interval {
            every: SignedDuration::from_millis(every_ms),
            anchor,
        })
    }

    /// The first fire strictly after `t`, if any.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Timing::Interval { every, anchor } => {
                if t < *anchor {
                    return Some(*anchor);
                }
                let since = t.duration_since(*anchor).as_millis();
                let step = every.as_millis();
                let n = since / step + 1;
                let ms = i64::try_from(n.checked_mul(step)?).ok()?;
                anchor.checked_add(SignedDuration::from_millis(ms)).ok()
            }
            Timing::Cron { tz, .. } => {
                // The lookback is needed only where the offset changes within it; elsewhere
                // every wall-clock time in it is an instant at or before `t`, which the loop
                // below would skip one by one (180 steps for `* * * * *`, for every schedule
                // at every fire).
                let lookback = if steady(tz, t) {
                    SignedDuration::ZERO
                } else {
                    FOLD_LOOKBACK
                };
                self.scan_from(tz.to_datetime(t).checked_sub(lookback).ok()?, t)
            }
        }
    }

    /// The first cron fire after `t`, scanning wall-clock matches from `civil`.
    fn scan_from(&self, mut civil: DateTime, t: Timestamp) -> Option<Timestamp> {
        match self {
            Timing::Interval { .. } => None,
            Timing::Cron { cron, tz } => {
                // Bounded: the lookback window holds at most a few hours of matches.
                for _ in 0..100_000 {
                    civil = cron.next_civil(civil)?;
                    let at = instant_of(tz, civil)?;
                    if at > t {
                        return Some(at);
                    }
                }
                None
            }
        }
    }

    /// Up to `n` fires after `t`, none after `until` when given.
    pub fn upcoming(&self, t: Timestamp, n: usize, until: Option<Timestamp>) -> Vec<Timestamp> {
        let mut out = Vec::with_capacity(n.min(1000));
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(next) if until.is_none_or(|u| next <= u) => {
                    out.push(next);
                    at = next;
                }
                _ => break,
            }
        }
        out
    }
}

/// Whether `tz` keeps one offset from a lookback (and an hour more) before `t` up to just
/// after it: then no wall-clock time of the lookback maps to an instant after `t` (no fold
/// repeats it, no gap moves it), and a scan may start at `t`'s own wall-clock time.
fn steady(tz: &TimeZone, t: Timestamp) -> bool {
    if tz.to_fixed_offset().is_ok() {
        return true;
    }
    let (Ok(after), Ok(since)) = (
        t.checked_add(SignedDuration::from_secs(1)),
        t.checked_sub(FOLD_LOOKBACK + SignedDuration::from_hours(1)),
    ) else {
        return false;
    };
    // The newest transition before `after`, if any, must be older than the window.
    tz.preceding(after)
        .next()
        .is_none_or(|tr| tr.timestamp() < since)
}

/// An IANA zone by name (from the system's tz database).
pub fn zone(name: &str) -> Result<TimeZone> {
    TimeZone::get(name).map_err(|e| ScheduleError::Invalid {
        field: "timezone",
        reason: format!("unknown IANA time zone {name:?}: {e}"),
    })
}

/// The first instant whose wall clock in `tz` reads `civil` or later (see the module doc).
pub fn instant_of(tz: &TimeZone, civil: DateTime) -> Option<Timestamp> {
    let amb = tz.to_ambiguous_timestamp(civil);
    match amb.offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok(),
        // Clocks went back: the first occurrence, under the offset before the change.
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(civil).ok(),
        // Clocks went forward over `civil`: the transition instant lies in (lo, hi].
        AmbiguousOffset::Gap { before, after } => {
            let mut lo = after.to_timestamp(civil).ok()?.as_second();
            let mut hi = before.to_timestamp(civil).ok()?.as_second();
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                let ts = Timestamp::from_second(mid).ok()?;
                if tz.to_offset(ts) == after {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            Timestamp::from_second(hi).ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starting the scan at `t` where the zone is steady finds the same fire as the full
    /// lookback, for instants every 11 minutes over days around DST transitions (both
    /// directions, a 30-minute one) and across hour and day crons.
    #[test]
    fn skipping_the_lookback_where_steady_changes_no_fire() {
        let zones = [
            "UTC",
            "Europe/Berlin",
            "America/New_York",
            "Australia/Lord_Howe",
        ];
        let exprs = [
            "* * * * *",
            "*/15 * * * *",
            "30 2 * * *",
            "0 * * * *",
            "5 1-3 * * *",
        ];
        // Spring and autumn transitions of 2026 in both hemispheres.
        let starts = [
            "2026-03-07T00:00:00Z",
            "2026-03-27T00:00:00Z",
            "2026-04-03T00:00:00Z",
            "2026-10-02T00:00:00Z",
            "2026-10-23T00:00:00Z",
            "2026-10-31T00:00:00Z",
        ];
        let mut skipped = 0;
        for zone in zones {
            for expr in exprs {
                let timing = Timing::cron(expr, zone).unwrap();
                let Timing::Cron { tz, .. } = &timing else {
                    unreachable!()
                };
                for start in starts {
                    let mut t = ts(start);
                    let end = t + SignedDuration::from_hours(48);
                    while t < end {
                        let full = tz.to_datetime(t).checked_sub(FOLD_LOOKBACK).unwrap();
                        let reference = timing.scan_from(full, t);
                        assert_eq!(timing.next_after(t), reference, "{expr} {zone} after {t}");
                        if steady(tz, t) {
                            skipped += 1;
                        }
                        t += SignedDuration::from_secs(11 * 60 + 13);
                    }
                }
            }
        }
        // Most instants are steady: the shortcut is taken, so the comparison tests it.
        assert!(skipped > 10_000, "{skipped}");
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn fires(expr: &str, tz: &str, from: &str, to: &str) -> Vec<String> {
        Timing::cron(expr, tz)
            .unwrap()
            .upcoming(ts(from), 1000, Some(ts(to)))
            .iter()
            .map(|t| t.to_string())
            .collect()
    }

    #[test]
    fn berlin_spring_forward_skipped_hour_fires_once() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        assert_eq!(
            fires(
                "30 2 * * *",
                "Europe/Berlin",
                "2026-03-27T12:00:00Z",
                "2026-03-30T12:00:00Z"
            ),
            // 02:30 CET, then the missing 02:30 at the jump, then 02:30 CEST.
            vec![
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z"
            ]
        );
        // Every 15 minutes: the four skipped times land on the jump once.
        assert_eq!(
            fires(
                "*/15 * * * *",
                "Europe/Berlin",
                "2026-03-29T00:40:00Z",
                "2026-03-29T01:20:00Z"
            ),
            vec![
                "2026-03-29T00:45:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:15:00Z"
            ]
        );
    }

    #[test]
    fn berlin_fall_back_repeated_hour_fires_once() {
        // 2026-10-25: 03:00 CEST goes back to 02:00 CET (01:00 UTC); 02:30 happens twice.
        assert_eq!(
            fires(
                "30 2 * * *",
                "Europe/Berlin",
                "2026-10-24T12:00:00Z",
                "2026-10-26T12:00:00Z"
            ),
            vec!["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
        // Hourly: 02:00 fires at its first occurrence only.
        assert_eq!(
            fires(
                "0 * * * *",
                "Europe/Berlin",
                "2026-10-24T23:30:00Z",
                "2026-10-25T03:30:00Z"
            ),
            vec![
                "2026-10-25T00:00:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-25T03:00:00Z"
            ]
        );
        // Asked from inside the second pass of the repeated hour, 02:30 is not fired again.
        assert_eq!(
            fires(
                "30 2 * * *",
                "Europe/Berlin",
                "2026-10-25T01:10:00Z",
                "2026-10-26T12:00:00Z"
            ),
            vec!["2026-10-26T01:30:00Z"]
        );
    }

    #[test]
    fn new_york_transitions() {
        // 2026-03-08: 02:00 EST -> 03:00 EDT (07:00 UTC).
        assert_eq!(
            fires(
                "30 2 * * *",
                "America/New_York",
                "2026-03-07T00:00:00Z",
                "2026-03-10T00:00:00Z"
            ),
            vec![
                "2026-03-07T07:30:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-09T06:30:00Z"
            ]
        );
        // 2026-11-01: 02:00 EDT -> 01:00 EST (06:00 UTC); 01:30 happens twice.
        assert_eq!(
            fires(
                "30 1 * * *",
                "America/New_York",
                "2026-10-31T00:00:00Z",
                "2026-11-03T00:00:00Z"
            ),
            vec![
                "2026-10-31T05:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-02T06:30:00Z"
            ]
        );
    }

    #[test]
    fn intervals_count_from_the_anchor() {
        let t = Timing::interval(90_000, ts("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(
            t.next_after(ts("2025-12-01T00:00:00Z")),
            Some(ts("2026-01-01T00:00:00Z"))
        );
        assert_eq!(
            t.next_after(ts("2026-01-01T00:00:00Z")),
            Some(ts("2026-01-01T00:01:30Z"))
        );
        assert_eq!(
            t.next_after(ts("2026-01-01T00:02:00Z")),
            Some(ts("2026-01-01T00:03:00Z"))
        );
        assert!(Timing::interval(999, ts("2026-01-01T00:00:00Z"))
            .unwrap_err()
            .to_string()
            .contains("interval_ms"));
    }

    #[test]
    fn unknown_zone_names_the_field() {
        let e = Timing::cron("@hourly", "Mars/Olympus")
            .unwrap_err()
            .to_string();
        assert!(e.contains("timezone"), "{e}");
    }
}
