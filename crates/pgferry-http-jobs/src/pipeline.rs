//! One `http` queue's pipeline (ADR 0020): claims keep coming while earlier batches are
//! still being sent, and outcomes are written apart from both.
//!
//! - The claim loop claims as soon as the queue has room in its in-flight budget
//!   ([`WorkerConfig::queue_in_flight`]) and the server in its own
//!   ([`WorkerConfig::max_in_flight`]), at most a batch, as many jobs as it holds room for.
//!   A claimed job holds its room until its outcome is handed to the flusher.
//! - Each claimed batch runs in a task of its own: the tenant's settings are read for it,
//!   then every job is sent on its own (per-destination parallelism, rate and `Retry-After`
//!   pause are the worker's, shared by all batches) and hands its outcome over the moment it
//!   finishes — a slow request holds back only itself.
//! - The flusher writes outcomes in batches (callbacks first, then one `complete`), while
//!   the claim loop goes on; a write that fails is retried (the first outcome of an attempt
//!   wins, a callback's unique key answers its first enqueue), and given up after a few
//!   tries: those jobs run again once their leases end.
//!
//! - Every job is held ([`crate::lease`]) from its claim until its outcome is written: a
//!   keeper heartbeats the held attempts at a third of their lease, so a job waiting for
//!   its destination's turn or a slow answer is not rescued and sent again meanwhile.
//!
//! On stop: no more claims; requests in flight get [`SHUTDOWN_GRACE`] to finish and their
//! outcomes are written; what is still running then is left to its lease.

use std::sync::Arc;
use std::time::Duration;

use pgferry_core::ClaimedJob;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::lease::{self, Held};
use crate::rescued;
use crate::worker::{tenant_of, HttpWorker, Ran};

/// Longest pause of an idle queue between claims when no tick wakes it sooner.
const IDLE: Duration = Duration::from_millis(100);
/// Pause after a failed claim.
const CLAIM_ERROR_PAUSE: Duration = Duration::from_secs(1);
/// Outcomes written by one statement at most.
const FLUSH_ROWS: usize = 500;
/// How long the flusher waits for more outcomes after the first of a write.
const FLUSH_WAIT: Duration = Duration::from_millis(2);
/// Tries of one write of outcomes before its jobs are left to their leases (a database
/// that answers with errors). While the database is unavailable the flusher keeps trying
/// until stop: see [`flush_loop`].
const FLUSH_TRIES: u32 = 8;
/// How long requests in flight may finish after stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The worker name claims carry.
const WORKER: &str = "pgferry-http";

/// Room for one job: a place in its queue's budget and one in the server's.
struct Room {
    _queue: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

/// Runs `queue` until `stop` turns true.
pub async fn run_queue(worker: Arc<HttpWorker>, queue: String, mut stop: watch::Receiver<bool>) {
    let queue_slots = Arc::new(Semaphore::new(worker.config.queue_in_flight.max(1)));
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Ran>();
    let held = Arc::new(Held::default());
    let (keeper_stop, keeper_rx) = watch::channel(false);
    let keeper = tokio::spawn(lease::keep(
        worker.engine.clone(),
        held.clone(),
        WORKER,
        keeper_rx,
    ));
    let flusher = tokio::spawn(flush_loop(
        worker.clone(),
        done_rx,
        held.clone(),
        stop.clone(),
    ));
    let sweeper = tokio::spawn(sweep_loop(worker.clone(), queue.clone(), stop.clone()));
    let mut batches: JoinSet<()> = JoinSet::new();
    let mut ticks = worker.engine.signals().subscribe_ticks();
    loop {
        while batches.try_join_next().is_some() {}
        let mut room = tokio::select! {
            r = room(&worker, &queue_slots) => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        ticks.borrow_and_update();
        let jobs = match worker.engine.claim(&queue, room.len(), WORKER).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(queue, error = %e, "HTTP job claim failed");
                drop(room);
                if pause(&mut stop, CLAIM_ERROR_PAUSE).await {
                    break;
                }
                continue;
            }
        };
        if jobs.is_empty() {
            drop(room);
            // Nothing visible: the next tick may bring some; waiting, this claimer asks the
            // ticker to tick as soon as the log grows.
            let _waiting = worker.engine.signals().waiting_for_tick();
            tokio::select! {
                _ = ticks.changed() => {}
                _ = tokio::time::sleep(IDLE) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            continue;
        }
        room.truncate(jobs.len());
        held.hold(&jobs);
        batches.spawn(run_batch(
            worker.clone(),
            queue.clone(),
            jobs,
            room,
            done_tx.clone(),
            held.clone(),
        ));
    }
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while batches.join_next().await.is_some() {}
    })
    .await
    .is_ok();
    if !drained {
        tracing::warn!(
            queue,
            "HTTP jobs still running at stop are left to their leases"
        );
        batches.abort_all();
    }
    drop(done_tx);
    let _ = flusher.await;
    // What is still held now was not written: left to its leases.
    let _ = keeper_stop.send(true);
    let _ = keeper.await;
    let _ = sweeper.await;
}

/// Sends the callbacks of the queue's jobs that the rescuer made dead ([`crate::rescued`]),
/// every [`WorkerConfig::rescued_sweep`](crate::worker::WorkerConfig::rescued_sweep).
async fn sweep_loop(worker: Arc<HttpWorker>, queue: String, mut stop: watch::Receiver<bool>) {
    let mut window = rescued::Window::new();
    loop {
        let now = std::time::SystemTime::now();
        match rescued::sweep_once(&worker.engine, &queue, window.since(now)).await {
            Ok(_) => window.swept(now),
            Err(e) => tracing::warn!(queue, error = %e, "sweep for rescued jobs' callbacks failed"),
        }
        if pause(&mut stop, worker.config.rescued_sweep).await {
            return;
        }
    }
}

/// Waits for room for a claim worth its statement, then takes what more is free at once,
/// up to a batch.
///
/// A claim is one statement whatever its size. A queue with its in-flight budget full of
/// jobs waiting for their destination's turn (one busy destination: `per_destination` at
/// once, the rest queued in memory) frees its room one job at a time; claiming at each
/// freed job made a claim statement per one to four deliveries (`bench http-jobs`: 4,242
/// claims for 16,000 jobs, a quarter of the database's time). So a queue claims once
/// [`low_water`] jobs fit: while it waits, at least seven eighths of its budget are still
/// in flight, enough to keep its destinations busy. An idle or lightly loaded queue has its
/// room free and claims at once, as before.
async fn room(worker: &HttpWorker, queue_slots: &Arc<Semaphore>) -> Vec<Room> {
    let batch = worker.config.batch.max(1);
    let mut queue = queue_slots
        .clone()
        .acquire_many_owned(low_water(&worker.config) as u32)
        .await
        .expect("never closed");
    while queue.num_permits() < batch {
        match queue_slots.clone().try_acquire_owned() {
            Ok(p) => queue.merge(p),
            Err(_) => break,
        }
    }
    // The server's budget: one place at least (waited for), then what is free.
    let mut server = worker
        .server_slots
        .clone()
        .acquire_owned()
        .await
        .expect("never closed");
    while server.num_permits() < queue.num_permits() {
        match worker.server_slots.clone().try_acquire_owned() {
            Ok(p) => server.merge(p),
            Err(_) => break,
        }
    }
    // One room per job: each job frees its own places as it finishes.
    let n = server.num_permits();
    let mut room = Vec::with_capacity(n);
    for _ in 1..n {
        room.push(Room {
            _queue: queue.split(1).expect("counted"),
            _server: server.split(1).expect("counted"),
        });
    }
    // The last place of each; queue places beyond the server's are given back here.
    let _ = queue.split(queue.num_permits() - 1);
    room.push(Room {
        _queue: queue,
        _server: server,
    });
    room
}

/// Free places a queue waits for before it claims: an eighth of its in-flight budget, at
/// most a batch, at least one.
fn low_water(config: &crate::worker::WorkerConfig) -> usize {
    (config.queue_in_flight / 8).clamp(1, config.batch.max(1))
}

/// Runs one claimed batch: each job hands its outcome to the flusher, and frees its room,
/// as soon as it is done.
async fn run_batch(
    worker: Arc<HttpWorker>,
    queue: String,
    jobs: Vec<ClaimedJob>,
    room: Vec<Room>,
    done: mpsc::UnboundedSender<Ran>,
    held: Arc<Held>,
) {
    let tenant = tenant_of(&queue);
    let (settings, executor) = match worker.context(tenant).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(queue, error = %e, "HTTP job settings not read; batch handed back");
            if let Err(e) = worker.hand_back(&jobs).await {
                tracing::warn!(queue, error = %e, "batch not handed back; left to its leases");
            }
            held.release(jobs.iter().map(|j| (j.job_id, j.attempt)));
            return;
        }
    };
    let runs = jobs.iter().zip(room).map(|(job, room)| {
        let (worker, queue, settings, executor, done) =
            (&worker, &queue, &settings, &executor, &done);
        async move {
            let ran = worker.run_job(queue, tenant, settings, executor, job).await;
            let _ = done.send(ran);
            drop(room);
        }
    });
    futures_util::future::join_all(runs).await;
}

/// Writes outcomes as they come: up to [`FLUSH_ROWS`] at once, [`FLUSH_WAIT`] after the
/// first of them at most.
///
/// A write refused because the database is unavailable (its connection lost, Postgres
/// restarting) is tried again, with a pause growing to 5 s, for as long as that lasts —
/// until stop. Giving up after [`FLUSH_TRIES`] (about 6 s) left every request sent during
/// a longer outage to run again once its lease lapsed: the destination got it twice. The
/// rescuer needs the database too, so the first write after it is back normally wins.
async fn flush_loop(
    worker: Arc<HttpWorker>,
    mut done: mpsc::UnboundedReceiver<Ran>,
    held: Arc<Held>,
    mut stop: watch::Receiver<bool>,
) {
    while let Some(first) = done.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
        while batch.len() < FLUSH_ROWS {
            match done.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => match tokio::time::timeout_at(deadline, done.recv()).await {
                    Ok(Some(r)) => batch.push(r),
                    _ => break,
                },
            }
        }
        let mut backoff = Duration::from_millis(50);
        let mut tries = 0;
        loop {
            tries += 1;
            let e = match worker.record(&batch).await {
                Ok(()) => break,
                Err(e) => e,
            };
            let stopping = *stop.borrow();
            let waiting = e.is_unavailable() && !stopping;
            if e.is_invalid_input() || (!waiting && (tries >= FLUSH_TRIES || stopping)) {
                tracing::error!(error = %e, n = batch.len(), "HTTP job outcomes not written; their jobs run again after their leases");
                break;
            }
            tracing::warn!(error = %e, tries, "writing HTTP job outcomes failed; retrying");
            // Stop ends the pause: one more try, then (still failing) the leases decide.
            let _ = pause(&mut stop, backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        // Written, or given up on (then the lease decides, as without the keeper).
        held.release(batch.iter().map(Ran::attempt));
    }
}

/// Sleeps `d`; true when stop came first.
async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    }
}
