//! Acknowledged means committed (architecture.md §1.6, issue 17): an enqueue returns ids only after
//! the COMMIT of the rows is confirmed by the server.
//!
//! The window this guards is the one between a statement's CommandComplete and its
//! transaction's commit: an implicit transaction commits at the following Sync, and a
//! backend terminated (or failing) in between rolls back rows that a client reading only
//! CommandComplete already reported. A deferred constraint trigger runs exactly there, at
//! commit, so it makes the window as wide as needed and the tests deterministic:
//! - one that sleeps while the test terminates the backend (the fault of issue 17);
//! - one that raises, so the commit itself fails on a live connection (the same window
//!   without a fault: a check that only "the connection is still there" would pass it).

mod common;

use std::time::Duration;

use pgferry_core::NewJob;
use serde_json::json;

fn batch(n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect()
}

/// Installs a deferred constraint trigger on every `ready` partition that runs `body` at
/// commit of any transaction that wrote a row.
async fn at_commit(admin: &tokio_postgres::Client, body: &str) {
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION public.at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN {body} RETURN NULL; END $$;
             DO $$ DECLARE p regclass; BEGIN
               FOR p IN SELECT inhrelid::regclass FROM pg_inherits
                        WHERE inhparent = 'pgferry.ready'::regclass LOOP
                 EXECUTE format('CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON %s
                   DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
                   EXECUTE FUNCTION public.at_commit()', p);
               END LOOP; END $$;"
        ))
        .await
        .expect("install commit-time trigger");
}

async fn rows_of(admin: &tokio_postgres::Client, ids: &[i64]) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pgferry.ready WHERE job_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .get(0)
}

// A batch of 50 is written by a COPY inside BEGIN … COMMIT, a batch of 1 by one INSERT in an
// implicit transaction (EngineConfig::insert_max_rows): both must wait for the commit.
#[tokio::test]
async fn a_backend_terminated_before_commit_fails_the_enqueue() {
    backend_terminated_before_commit(50).await;
}

#[tokio::test]
async fn a_backend_terminated_before_commit_fails_a_one_statement_enqueue() {
    backend_terminated_before_commit(1).await;
}

async fn backend_terminated_before_commit(n: usize) {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    // Warm: lanes, id blocks and the segment are known, the COPY is prepared.
    s.engine.enqueue(&batch(1)).await.unwrap();
    at_commit(&admin, "PERFORM pg_sleep(0.5);").await;

    let engine = s.engine.clone();
    let write = tokio::spawn(async move { engine.enqueue(&batch(n)).await });
    // Wait until the write sits in its commit-time trigger, then terminate its backend.
    let mut terminated = false;
    for _ in 0..200 {
        let n: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event = 'PgSleep'
                    AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            terminated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if !terminated {
        let seen: Vec<String> = admin
            .query("SELECT format('%s %s %s %s', application_name, state, wait_event, query) FROM pg_stat_activity WHERE datname = current_database()", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        panic!(
            "the enqueue never reached its commit: {:?} {seen:?}",
            write.is_finished()
        );
    }
    let answer = write.await.unwrap();
    match answer {
        Ok(ids) => {
            let found = rows_of(&admin, &ids).await;
            panic!(
                "enqueue acknowledged {} ids whose transaction was rolled back ({found} exist)",
                ids.len()
            );
        }
        Err(e) => assert!(e.is_unavailable(), "a lost session is unavailable: {e}"),
    }
}

#[tokio::test]
async fn a_commit_that_fails_fails_the_enqueue() {
    commit_that_fails(20).await;
}

#[tokio::test]
async fn a_commit_that_fails_fails_a_one_statement_enqueue() {
    commit_that_fails(1).await;
}

async fn commit_that_fails(n: usize) {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    s.engine.enqueue(&batch(1)).await.unwrap();
    at_commit(&admin, "RAISE EXCEPTION 'refused at commit';").await;
    let answer = s.engine.enqueue(&batch(n)).await;
    assert!(
        answer.is_err(),
        "enqueue acknowledged {:?} although its COMMIT failed",
        answer.map(|ids| ids.len())
    );
    // The connection it used is healthy again: the next write (no trigger) goes through.
    admin
        .batch_execute("DROP FUNCTION public.at_commit() CASCADE")
        .await
        .unwrap();
    for _ in 0..20 {
        let ids = s.engine.enqueue(&batch(3)).await.expect("enqueue after");
        assert_eq!(rows_of(&admin, &ids).await, 3);
    }
}
