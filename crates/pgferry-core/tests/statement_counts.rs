//! Statement counts of every public operation (pg_stat_statements, top level; the enqueue's
//! COPY through a statement trigger): enqueue of 1 or 1000 jobs (an INSERT, a COPY), claim, complete of 1 or
//! 1000 outcomes are one statement each.

mod common;

use pgferry_core::NewJob;
use serde_json::json;

/// pg_stat_statements is cluster-wide and a reset clears every database's counts: the tests
/// of this file take turns.
static COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn batch(n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect()
}

#[tokio::test]
async fn one_statement_per_operation() {
    let _turn = COUNTING.lock().await;
    let s = common::setup_with(common::quiet_counters()).await;
    let admin = s.db.connect().await;
    // Warm the lane cache and prepared statements: steady state is what is counted.
    // (A batch of 1 is written by an INSERT, one of 100 by a COPY: both are warmed.)
    s.engine.enqueue(&batch(1)).await.unwrap();
    s.engine.enqueue(&batch(100)).await.unwrap();
    s.tick().await;
    let warm = s.engine.claim("q", 10, "w").await.unwrap();
    s.engine.complete(&[warm[0].completed(None)]).await.unwrap();

    // pg_stat_statements does not see a COPY run through the extended protocol (how the
    // engine's enqueue runs), so writing statements on the log are also counted by a
    // statement-level trigger: it fires once per INSERT or COPY, whatever the row count.
    admin
        .batch_execute(
            "CREATE TABLE public.ready_statements (n int NOT NULL);
             INSERT INTO public.ready_statements VALUES (0);
             CREATE FUNCTION public.count_ready_statement() RETURNS trigger
               LANGUAGE plpgsql AS $$ BEGIN
                 UPDATE public.ready_statements SET n = n + 1; RETURN NULL; END $$;
             CREATE TRIGGER count_statements AFTER INSERT ON pgferry.ready
               FOR EACH STATEMENT EXECUTE FUNCTION public.count_ready_statement();",
        )
        .await
        .unwrap();
    for n in [1usize, 1000] {
        admin
            .batch_execute("UPDATE public.ready_statements SET n = 0")
            .await
            .unwrap();
        common::reset_statements(&admin).await;
        let ids = s.engine.enqueue(&batch(n)).await.unwrap();
        assert_eq!(ids.len(), n);
        let writes: i32 = admin
            .query_one("SELECT n FROM public.ready_statements", &[])
            .await
            .unwrap()
            .get(0);
        // The trigger's own UPDATE runs nested inside the write; top-level, nothing else
        // ran: no id-block reservation, no segment lookup, no lane lookup. A small batch is
        // one INSERT in an implicit transaction (one round trip, acknowledged at the
        // ReadyForQuery after its commit); a large one a COPY in a transaction pipelined with
        // it (BEGIN with its start, COMMIT with its end), so that the answer waits for
        // COMMIT's reply (issue 17).
        let stmts = common::statements(&admin).await;
        let control: Vec<_> = stmts
            .iter()
            .filter(|(q, _)| q == "BEGIN" || q == "COMMIT")
            .cloned()
            .collect();
        let others: Vec<_> = stmts
            .into_iter()
            .filter(|(q, _)| !q.contains("ready_statements") && q != "BEGIN" && q != "COMMIT")
            .collect();
        assert_eq!(writes, 1, "enqueue of {n}: {writes} writing statements");
        if n <= pgferry_core::EngineConfig::default().insert_max_rows {
            assert!(
                control.is_empty()
                    && others.len() == 1
                    && others[0].0.starts_with("-- enqueue of a small batch")
                    && others[0].1 == 1,
                "enqueue of {n}: one INSERT and nothing else, got {control:?} {others:?}"
            );
        } else {
            assert!(others.is_empty(), "enqueue of {n}: others {others:?}");
            assert_eq!(
                control,
                vec![("BEGIN".to_string(), 1), ("COMMIT".to_string(), 1)],
                "enqueue of {n}"
            );
        }
    }
    admin
        .batch_execute("DROP TRIGGER count_statements ON pgferry.ready")
        .await
        .unwrap();
    s.tick().await;
    for n in [1usize, 1000] {
        common::reset_statements(&admin).await;
        let claimed = s.engine.claim("q", n, "w").await.unwrap();
        assert_eq!(claimed.len(), n);
        assert_eq!(
            common::total_calls(&admin).await,
            1,
            "claim of {n}: {:?}",
            common::statements(&admin).await
        );
        let outcomes: Vec<_> = claimed.iter().map(|j| j.completed(None)).collect();
        common::reset_statements(&admin).await;
        let done = s.engine.complete(&outcomes).await.unwrap();
        assert_eq!(done.len(), n);
        assert_eq!(
            common::total_calls(&admin).await,
            1,
            "complete of {n}: {:?}",
            common::statements(&admin).await
        );
    }
    // What the operations did is counted apart: one statement per flush, for every lane.
    common::reset_statements(&admin).await;
    s.engine.flush_counters().await.unwrap();
    let stmts = common::statements(&admin).await;
    assert_eq!(stmts.len(), 1, "{stmts:?}");
    assert!(
        stmts[0].0.contains("lane_counters") && stmts[0].1 == 1,
        "{stmts:?}"
    );
}

/// Issue 4's operations on the hot side: a batch with scheduled jobs, heartbeats of a batch,
/// and the promoter moving a batch of due jobs are one statement each.
#[tokio::test]
async fn one_statement_for_scheduled_enqueue_heartbeat_and_promotion() {
    use pgferry_core::leader::promoter;
    use pgferry_core::AttemptRef;
    use std::time::{Duration, SystemTime};

    let _turn = COUNTING.lock().await;
    let s = common::setup_with(common::quiet_counters()).await;
    let admin = s.db.connect().await;
    s.engine.enqueue(&batch(1)).await.unwrap();
    // Half now, half "due" in the past (promoted at once), one far in the future.
    let past = SystemTime::now() - Duration::from_secs(1);
    let mut jobs = batch(1000);
    for (i, j) in jobs.iter_mut().enumerate() {
        if i % 2 == 0 {
            j.run_at = Some(past);
        }
    }
    jobs[1].run_at = Some(SystemTime::now() + Duration::from_secs(3600));
    // Warm: the statement is prepared once per connection.
    s.engine.enqueue(&jobs[..2]).await.unwrap();
    common::reset_statements(&admin).await;
    assert_eq!(s.engine.enqueue(&jobs).await.unwrap().len(), 1000);
    assert_eq!(
        common::total_calls(&admin).await,
        1,
        "{:?}",
        common::statements(&admin).await
    );

    // Promotion of many due jobs: one statement per batch.
    let client = s.db.connect().await;
    client
        .execute(
            "UPDATE pgferry.scheduled SET run_at = now() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    common::reset_statements(&admin).await;
    let moved = promoter::promote(&client, 1000).await.unwrap();
    assert_eq!(moved, 2, "the two far-future jobs made due");
    assert_eq!(
        common::total_calls(&admin).await,
        1,
        "{:?}",
        common::statements(&admin).await
    );

    s.tick().await;
    let claimed = s.engine.claim("q", 500, "w").await.unwrap();
    let refs: Vec<AttemptRef> = claimed.iter().map(AttemptRef::from).collect();
    s.engine
        .heartbeat(&refs[..1], Duration::from_secs(60), "w")
        .await
        .unwrap();
    common::reset_statements(&admin).await;
    let beats = s
        .engine
        .heartbeat(&refs, Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(beats.iter().all(|b| b.held));
    assert_eq!(
        common::total_calls(&admin).await,
        1,
        "{:?}",
        common::statements(&admin).await
    );
}
