//! Cron expressions: 5 fields (minute hour day-of-month month day-of-week, seconds = 0) or
//! 6 fields (seconds first), and the `@yearly`, `@monthly`, `@weekly`, `@daily`,
//! `@midnight`, `@hourly` shorthands. Each field takes `*`, `?` (as `*`), numbers, names
//! (`JAN`, `MON`), ranges `a-b`, lists `a,b` and steps `*/n`, `a-b/n`, `a/n`. Day of week
//! 0-7 (0 and 7 are Sunday). As in Vixie cron, when both day fields are restricted a day
//! matches if either does.
//!
//! Matching is on the civil (wall-clock) date and time; the time zone mapping lives in
//! [`crate::timing`].

use jiff::civil::{Date, DateTime, Time};

use crate::error::{Result, ScheduleError};

/// A parsed expression: one bit set per field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// The day-of-month field was `*` (or `?`).
    any_day: bool,
    /// The day-of-week field was `*` (or `?`).
    any_weekday: bool,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Years searched for a match before giving up (`0 0 30 2 *` never matches).
const SEARCH_DAYS: i32 = 366 * 5;

impl Cron {
    pub fn parse(expr: &str) -> Result<Cron> {
        let expr = expr.trim();
        let expanded = match expr.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            s if s.starts_with('@') => return Err(bad(format!("unknown shorthand {expr:?}"))),
            _ => expr.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(bad(format!(
                    "expected 5 or 6 fields (or an @shorthand), got {n}"
                )))
            }
        };
        let weekdays = field(rest[4], 0, 7, &WEEKDAYS, "day of week")?;
        // 7 is Sunday too.
        let weekdays = (weekdays | (weekdays >> 7)) & 0x7f;
        Ok(Cron {
            seconds: field(sec, 0, 59, &[], "second")?,
            minutes: field(rest[0], 0, 59, &[], "minute")?,
            hours: field(rest[1], 0, 23, &[], "hour")?,
            days: field(rest[2], 1, 31, &[], "day of month")?,
            months: field(rest[3], 1, 12, &MONTHS, "month")?,
            weekdays,
            any_day: is_any(rest[2]),
            any_weekday: is_any(rest[4]),
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (false, true) => dom,
            (true, false) => dow,
            (false, false) => dom || dow,
        }
    }

    /// The first civil time strictly after `after` that matches, if any within five years.
    pub fn next_civil(&self, after: DateTime) -> Option<DateTime> {
        let mut date = after.date();
        for day in 0..SEARCH_DAYS {
            if self.day_matches(date) {
                // On the first day only times after `after` count.
                let floor = (day == 0).then(|| after.time());
                if let Some(t) = self.first_time(floor) {
                    return Some(date.to_datetime(t));
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    /// The first matching time of a day, strictly after `floor` when given.
    fn first_time(&self, floor: Option<Time>) -> Option<Time> {
        for h in bits(self.hours) {
            if floor.is_some_and(|f| h < f.hour() as u32) {
                continue;
            }
            for m in bits(self.minutes) {
                if floor.is_some_and(|f| (h, m) < (f.hour() as u32, f.minute() as u32)) {
                    continue;
                }
                for s in bits(self.seconds) {
                    let t = Time::new(h as i8, m as i8, s as i8, 0).ok()?;
                    if floor.is_none_or(|f| t > f) {
                        return Some(t);
                    }
                }
            }
        }
        None
    }
}

fn bits(set: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |i| set & (1u64 << i) != 0)
}

fn is_any(f: &str) -> bool {
    f == "*" || f == "?"
}

fn bad(reason: String) -> ScheduleError {
    ScheduleError::Invalid {
        field: "cron",
        reason,
    }
}

/// One field as a bit set over `lo..=hi`.
fn field(text: &str, lo: u32, hi: u32, names: &[&str], what: &str) -> Result<u64> {
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(format!("{what}: bad step {s:?}")))?;
                (r, step)
            }
            None => (part, 1),
        };
        let (a, b) = if is_any(range) {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (
                value(a, lo, hi, names, what)?,
                value(b, lo, hi, names, what)?,
            )
        } else {
            let a = value(range, lo, hi, names, what)?;
            // `a/n` runs from a to the end of the field.
            (a, if part.contains('/') { hi } else { a })
        };
        if a > b {
            return Err(bad(format!("{what}: range {range:?} runs backwards")));
        }
        let mut v = a;
        while v <= b {
            set |= 1u64 << v;
            v += step;
        }
    }
    Ok(set)
}

fn value(text: &str, lo: u32, hi: u32, names: &[&str], what: &str) -> Result<u32> {
    let upper = text.to_ascii_uppercase();
    // Names count from the field's lowest value (JAN = 1, SUN = 0).
    if let Some(i) = names.iter().position(|n| *n == upper) {
        return Ok(lo + i as u32);
    }
    let n: u32 = text
        .parse()
        .map_err(|_| bad(format!("{what}: {text:?} is not a number or name")))?;
    if n < lo || n > hi {
        return Err(bad(format!("{what}: {n} is outside {lo}-{hi}")));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn next(expr: &str, after: DateTime) -> DateTime {
        Cron::parse(expr).unwrap().next_civil(after).unwrap()
    }

    #[test]
    fn five_and_six_fields_and_shorthands() {
        let t = date(2026, 3, 10).at(10, 17, 5, 0);
        assert_eq!(next("*/15 * * * *", t), date(2026, 3, 10).at(10, 30, 0, 0));
        assert_eq!(
            next("30 */15 * * * *", t),
            date(2026, 3, 10).at(10, 30, 30, 0)
        );
        assert_eq!(next("@hourly", t), date(2026, 3, 10).at(11, 0, 0, 0));
        assert_eq!(next("@daily", t), date(2026, 3, 11).at(0, 0, 0, 0));
        assert_eq!(next("@monthly", t), date(2026, 4, 1).at(0, 0, 0, 0));
        assert_eq!(next("@yearly", t), date(2027, 1, 1).at(0, 0, 0, 0));
        // 2026-03-10 is a Tuesday; next Sunday is the 15th.
        assert_eq!(next("@weekly", t), date(2026, 3, 15).at(0, 0, 0, 0));
        assert_eq!(next("0 9 * * MON-FRI", t), date(2026, 3, 11).at(9, 0, 0, 0));
        assert_eq!(next("0 9 * * 7", t), date(2026, 3, 15).at(9, 0, 0, 0));
        assert_eq!(next("0 0 1 FEB *", t), date(2027, 2, 1).at(0, 0, 0, 0));
        // Both day fields restricted: either matches (the 13th, or Friday the 13th's Friday).
        assert_eq!(next("0 0 20 * FRI", t), date(2026, 3, 13).at(0, 0, 0, 0));
        assert_eq!(next("5/20 * * * *", t), date(2026, 3, 10).at(10, 25, 0, 0));
        assert_eq!(next("0 0 29 2 *", t), date(2028, 2, 29).at(0, 0, 0, 0));
    }

    #[test]
    fn bad_expressions_name_the_problem() {
        for (expr, needle) in [
            ("* * * *", "5 or 6 fields"),
            ("60 * * * *", "minute: 60 is outside"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day of month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day of week"),
            ("*/0 * * * *", "bad step"),
            ("5-1 * * * *", "backwards"),
            ("@fortnightly", "unknown shorthand"),
            ("x * * * *", "not a number"),
        ] {
            let e = Cron::parse(expr).unwrap_err().to_string();
            assert!(e.contains(needle), "{expr}: {e}");
            assert!(e.contains("cron"), "{expr}: {e}");
        }
        assert!(Cron::parse("0 0 30 2 *")
            .unwrap()
            .next_civil(date(2026, 1, 1).at(0, 0, 0, 0))
            .is_none());
    }
}
