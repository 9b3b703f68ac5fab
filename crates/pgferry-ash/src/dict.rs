//! The sampler's view of the dictionaries: names → ids cached in memory, so a steady
//! sample costs no dictionary statement at all. Unknown names are inserted (or found,
//! when another sampler got there first) with one statement per kind, at first sight.
//! Entries are never deleted, so a cached id stays right.

use std::collections::{HashMap, HashSet};

use tokio_postgres::Client;

use crate::error::Result;

const UPSERT_WAITS: &str = include_str!("../sql/upsert_waits.sql");
const UPSERT_LABELS: &str = include_str!("../sql/upsert_labels.sql");
const UPSERT_QUERIES: &str = include_str!("../sql/upsert_queries.sql");
const UPSERT_COMBOS: &str = include_str!("../sql/upsert_combos.sql");
const UPSERT_SERVING: &str = include_str!("../sql/upsert_serving.sql");
const STATEMENTS_TEXT: &str = include_str!("../sql/statements_text.sql");
const ACTIVITY_TEXT: &str = include_str!("../sql/activity_text.sql");

/// What a pgferry backend was serving: from this process's registry, or published by
/// another server (publish.rs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Serving {
    pub role: String,
    pub queue: String,
    pub kind: String,
}

impl From<pgferry_core::serving::Serving> for Serving {
    fn from(s: pgferry_core::serving::Serving) -> Serving {
        Serving {
            role: s.role.to_string(),
            queue: s.queue,
            kind: s.kind,
        }
    }
}

/// One backend as read from pg_stat_activity.
#[derive(Debug, Clone)]
pub(crate) struct Backend {
    pub pid: i32,
    pub database: String,
    pub user: String,
    pub application: String,
    pub backend_type: String,
    pub state: String,
    pub wait_type: Option<String>,
    pub wait_event: Option<String>,
    pub query_id: Option<i64>,
    /// When its current (or, idle in a transaction, last) statement began, epoch seconds.
    pub query_start: Option<f64>,
    /// Parallel workers: the pid of the backend they work for (pg_stat_activity.leader_pid).
    pub leader_pid: Option<i32>,
    pub blockers: Vec<i32>,
    /// false: returned only because it blocks a sampled backend.
    pub sampled: bool,
    /// What it was serving, when it is one of pgferry's pooled connections (this process's,
    /// or another server's that published it).
    pub serving: Option<Serving>,
}

impl Backend {
    /// The wait as ASH reports it: CPU when active without a wait event; IdleTx for a
    /// session idle inside a transaction (whatever it waits on, the client holds it).
    pub fn wait(&self) -> (String, String) {
        if self.state.starts_with("idle in transaction") {
            return ("IdleTx".into(), self.state.clone());
        }
        if self.state == "idle" {
            return ("Idle".into(), "idle".into());
        }
        match (&self.wait_type, &self.wait_event) {
            (Some(t), Some(e)) => (t.clone(), e.clone()),
            (Some(t), None) => (t.clone(), String::new()),
            _ => ("CPU".into(), "CPU".into()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ComboKey([i32; 7]);

#[derive(Default)]
pub(crate) struct Dict {
    waits: HashMap<(String, String), i32>,
    labels: HashMap<(char, String), i32>,
    queries: HashMap<i64, i32>,
    combos: HashMap<ComboKey, i32>,
    serving: HashMap<Serving, i32>,
}

impl Dict {
    /// The combo id of each backend (same order), inserting what is new.
    pub async fn resolve(
        &mut self,
        client: &Client,
        backends: &[Backend],
        statements: bool,
    ) -> Result<Vec<i32>> {
        self.add_waits(client, backends).await?;
        self.add_labels(client, backends).await?;
        self.add_queries(client, backends, statements).await?;
        self.add_serving(client, backends).await?;
        let keys: Vec<ComboKey> = backends.iter().map(|b| self.key(b)).collect();
        let missing: HashSet<ComboKey> = keys
            .iter()
            .filter(|k| !self.combos.contains_key(k))
            .copied()
            .collect();
        if !missing.is_empty() {
            let cols: Vec<Vec<i32>> = (0..7)
                .map(|i| missing.iter().map(|k| k.0[i]).collect())
                .collect();
            for row in client
                .query(
                    UPSERT_COMBOS,
                    &[
                        &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5], &cols[6],
                    ],
                )
                .await?
            {
                let key = ComboKey([
                    row.get("wait_id"),
                    row.get("query_ref"),
                    row.get("database_id"),
                    row.get("user_id"),
                    row.get("app_id"),
                    row.get("backend_id"),
                    row.get("serving_id"),
                ]);
                self.combos.insert(key, row.get("id"));
            }
        }
        Ok(keys.iter().map(|k| self.combos[k]).collect())
    }

    pub fn combos(&self) -> usize {
        self.combos.len()
    }

    fn key(&self, b: &Backend) -> ComboKey {
        let label = |kind: char, name: &str| {
            if name.is_empty() {
                0
            } else {
                self.labels[&(kind, name.to_string())]
            }
        };
        ComboKey([
            self.waits[&b.wait()],
            b.query_id
                .filter(|q| *q != 0)
                .map_or(0, |q| self.queries[&q]),
            label('d', &b.database),
            label('u', &b.user),
            label('a', &b.application),
            label('b', &b.backend_type),
            b.serving.as_ref().map_or(0, |s| self.serving[s]),
        ])
    }

    async fn add_serving(&mut self, client: &Client, backends: &[Backend]) -> Result<()> {
        let missing: HashSet<&Serving> = backends
            .iter()
            .filter_map(|b| b.serving.as_ref())
            .filter(|s| !self.serving.contains_key(*s))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let roles: Vec<&str> = missing.iter().map(|s| s.role.as_str()).collect();
        let queues: Vec<&str> = missing.iter().map(|s| s.queue.as_str()).collect();
        let kinds: Vec<&str> = missing.iter().map(|s| s.kind.as_str()).collect();
        let rows = client
            .query(UPSERT_SERVING, &[&roles, &queues, &kinds])
            .await?;
        for row in rows {
            let role: String = row.get("role");
            // The registry's roles are static names; keep ours (the row names the same).
            let Some(s) = missing.iter().find(|s| {
                s.role == role
                    && s.queue == row.get::<_, &str>("queue")
                    && s.kind == row.get::<_, &str>("kind")
            }) else {
                continue;
            };
            self.serving.insert((*s).clone(), row.get("id"));
        }
        Ok(())
    }

    async fn add_waits(&mut self, client: &Client, backends: &[Backend]) -> Result<()> {
        let missing: HashSet<(String, String)> = backends
            .iter()
            .map(Backend::wait)
            .filter(|w| !self.waits.contains_key(w))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let (types, events): (Vec<String>, Vec<String>) = missing.into_iter().unzip();
        for row in client.query(UPSERT_WAITS, &[&types, &events]).await? {
            self.waits
                .insert((row.get("type"), row.get("event")), row.get("id"));
        }
        Ok(())
    }

    async fn add_labels(&mut self, client: &Client, backends: &[Backend]) -> Result<()> {
        let mut missing = HashSet::new();
        for b in backends {
            for (kind, name) in [
                ('d', &b.database),
                ('u', &b.user),
                ('a', &b.application),
                ('b', &b.backend_type),
            ] {
                if !name.is_empty() && !self.labels.contains_key(&(kind, name.clone())) {
                    missing.insert((kind, name.clone()));
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let (kinds, names): (Vec<String>, Vec<String>) =
            missing.into_iter().map(|(k, n)| (k.to_string(), n)).unzip();
        for row in client.query(UPSERT_LABELS, &[&kinds, &names]).await? {
            let kind: String = row.get("kind");
            let kind = kind.chars().next().unwrap_or('?');
            self.labels.insert((kind, row.get("name")), row.get("id"));
        }
        Ok(())
    }

    async fn add_queries(
        &mut self,
        client: &Client,
        backends: &[Backend],
        statements: bool,
    ) -> Result<()> {
        let missing: Vec<i64> = backends
            .iter()
            .filter_map(|b| b.query_id)
            .filter(|q| *q != 0 && !self.queries.contains_key(q))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // Text at first sight: normalised from pg_stat_statements when it has the id,
        // else what a backend with that query id is running now.
        let mut texts: HashMap<i64, String> = HashMap::new();
        if statements {
            texts.extend(query_texts(client, STATEMENTS_TEXT, &missing).await);
        }
        let rest: Vec<i64> = missing
            .iter()
            .filter(|q| !texts.contains_key(q))
            .copied()
            .collect();
        if !rest.is_empty() {
            texts.extend(query_texts(client, ACTIVITY_TEXT, &rest).await);
        }
        let text: Vec<Option<String>> = missing.iter().map(|q| texts.get(q).cloned()).collect();
        for row in client.query(UPSERT_QUERIES, &[&missing, &text]).await? {
            self.queries.insert(row.get("query_id"), row.get("id"));
        }
        Ok(())
    }
}

/// (query id, text) rows of one text source; none when it fails (text is optional).
async fn query_texts(client: &Client, sql: &str, ids: &[i64]) -> Vec<(i64, String)> {
    match client.query(sql, &[&ids]).await {
        Ok(rows) => rows
            .iter()
            .map(|r| (r.get("query_id"), r.get("text")))
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "ash: query text unavailable");
            Vec::new()
        }
    }
}
