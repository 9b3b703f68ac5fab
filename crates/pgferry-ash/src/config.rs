//! The sampler's settings, validated before anything runs.

use std::time::Duration;

use crate::error::{AshError, Result};

#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Time between two samples; stored with every sample (its cadence), so changing it
    /// never rescales history.
    pub interval: Duration,
    /// Databases to sample (by name); `None`: all of the cluster's backends.
    pub databases: Option<Vec<String>>,
    /// How long a ring rotation may wait for readers before it gives up and retries on
    /// the next tick (it never blocks readers longer than this).
    pub rotate_lock_timeout: Duration,
    /// How long 1-minute rollups are kept.
    pub minute_retention: Duration,
    /// How long 1-hour rollups are kept.
    pub hour_retention: Duration,
    /// How long the sampler waits, after its read of pg_stat_activity, for the other servers'
    /// snapshots of the same tick (publish.rs); only when it sampled backends of pgferry it
    /// does not serve itself.
    pub publish_grace: Duration,
    /// A server's published snapshot older than this is deleted (its server died; an old
    /// snapshot never misattributes, this only keeps the table small). At least two
    /// intervals and two publish heartbeats are kept whatever this says ([`Self::ttl`]).
    pub publish_ttl: Duration,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: Duration::from_secs(1),
            databases: None,
            rotate_lock_timeout: Duration::from_millis(50),
            minute_retention: Duration::from_secs(8 * 86_400),
            hour_retention: Duration::from_secs(400 * 86_400),
            publish_grace: Duration::from_millis(25),
            publish_ttl: Duration::from_secs(10),
        }
    }
}

impl SamplerConfig {
    /// How old a published snapshot may get before the sampler deletes it: `publish_ttl`, but
    /// never so short that a live server's row (rewritten at least every interval while busy
    /// and every heartbeat while idle) would be pruned.
    pub fn ttl(&self) -> Duration {
        self.publish_ttl
            .max(self.interval * 2)
            .max(crate::publish::HEARTBEAT * 2)
    }

    pub fn validate(&self) -> Result<()> {
        if self.interval < Duration::from_millis(100) || self.interval > Duration::from_secs(60) {
            return Err(AshError::invalid(
                "ash interval",
                format!("{} ms is outside 100 ms..=60 s", self.interval.as_millis()),
            ));
        }
        if let Some(dbs) = &self.databases {
            if dbs.is_empty() {
                return Err(AshError::invalid(
                    "ash databases",
                    "an empty list would sample nothing (leave it unset to sample all)",
                ));
            }
            if let Some(bad) = dbs.iter().find(|d| d.is_empty() || d.len() > 63) {
                return Err(AshError::invalid(
                    "ash databases",
                    format!("{bad:?} is not a database name (1 to 63 bytes)"),
                ));
            }
        }
        if self.rotate_lock_timeout.is_zero() || self.rotate_lock_timeout > Duration::from_secs(1) {
            return Err(AshError::invalid(
                "ash rotate lock timeout",
                "must be between 1 ms and 1 s (readers wait behind it)",
            ));
        }
        if self.minute_retention < Duration::from_secs(3600) {
            return Err(AshError::invalid(
                "ash minute retention",
                "must be at least an hour (hour rollups are built from it)",
            ));
        }
        if self.hour_retention < self.minute_retention {
            return Err(AshError::invalid(
                "ash hour retention",
                "must be at least the minute retention",
            ));
        }
        if self.publish_grace * 2 >= self.interval {
            return Err(AshError::invalid(
                "ash publish grace",
                "must be under half the interval (the sampler waits it every tick)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_each_bound_is_named() {
        SamplerConfig::default().validate().unwrap();
        let cases: Vec<(SamplerConfig, &str)> = vec![
            (
                SamplerConfig {
                    interval: Duration::from_millis(10),
                    ..Default::default()
                },
                "ash interval",
            ),
            (
                SamplerConfig {
                    databases: Some(vec![]),
                    ..Default::default()
                },
                "ash databases",
            ),
            (
                SamplerConfig {
                    databases: Some(vec![String::new()]),
                    ..Default::default()
                },
                "ash databases",
            ),
            (
                SamplerConfig {
                    rotate_lock_timeout: Duration::ZERO,
                    ..Default::default()
                },
                "ash rotate lock timeout",
            ),
            (
                SamplerConfig {
                    minute_retention: Duration::from_secs(60),
                    ..Default::default()
                },
                "ash minute retention",
            ),
            (
                SamplerConfig {
                    hour_retention: Duration::from_secs(3600),
                    ..Default::default()
                },
                "ash hour retention",
            ),
            (
                SamplerConfig {
                    publish_grace: Duration::from_millis(600),
                    ..Default::default()
                },
                "ash publish grace",
            ),
        ];
        for (c, field) in cases {
            match c.validate() {
                Err(AshError::InvalidArgument { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
