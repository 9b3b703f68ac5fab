//! The producer: one stream, many requests in flight, each answered after COMMIT.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::proto::v1 as pb;
use crate::{channel, Error, JobSpec, Result};
use pb::producer_request::Msg;
use pb::producer_response::Msg as In;

type Waiter = oneshot::Sender<Result<pb::EnqueueAck>>;

/// One open Producer stream.
struct Conn {
    tx: mpsc::UnboundedSender<pb::ProducerRequest>,
    pending: Arc<Mutex<HashMap<u64, Waiter>>>,
    alive: Arc<AtomicBool>,
}

/// A producer over one long-lived stream. Cheap to share (`Arc`); calls may run
/// concurrently. A broken stream fails the requests in flight with
/// [`Error::Disconnected`] (their fate is unknown) and the next call reconnects.
pub struct Producer {
    url: String,
    api_key: String,
    client_name: String,
    seq: AtomicU64,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// Told by the server in HelloAck.
    max_batch: AtomicU64,
    retry: RetryPolicy,
}

/// How a producer retries a request whose fate it cannot know (the stream broke, the
/// server was unavailable): every request carries an idempotency key, so a retry that
/// reaches a server which had committed the first attempt answers its ids and writes
/// nothing (docs/protocol.md).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all (1: no retry).
    pub attempts: u32,
    /// Pause before the first retry; doubled each time, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// One attempt: an ambiguous failure is returned to the caller.
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        }
    }
}

/// The answer to an enqueue, after COMMIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueAck {
    /// Job ids in request order (a unique key's holder for a duplicate).
    pub ids: Vec<i64>,
    /// Per job: not written by this request.
    pub duplicates: Vec<bool>,
    /// Answered from the idempotency key: an earlier attempt had committed the jobs.
    pub replayed: bool,
}

/// Failures after which the request may or may not have been committed, or that a later
/// attempt may get past: worth a retry with the same key.
fn retryable(e: &Error) -> bool {
    match e {
        Error::Disconnected | Error::Connect { .. } => true,
        Error::Refused(s) => s.code() == tonic::Code::Unavailable,
        Error::Api { code, .. } => code == "unavailable",
    }
}

/// A fresh random key (128 bits, hex).
fn new_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Producer {
    /// Connects and authenticates (fails fast on a bad key).
    pub async fn connect(url: &str, api_key: &str) -> Result<Producer> {
        let p = Producer {
            url: url.to_string(),
            api_key: api_key.to_string(),
            client_name: format!("pgferry-client-rust@{}", std::process::id()),
            seq: AtomicU64::new(1),
            conn: tokio::sync::Mutex::new(None),
            max_batch: AtomicU64::new(1000),
            retry: RetryPolicy::default(),
        };
        p.conn().await?;
        Ok(p)
    }

    /// The largest batch the server accepts.
    pub fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::Relaxed) as usize
    }

    /// Sets how ambiguous failures are retried (default: [`RetryPolicy::default`]).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Producer {
        self.retry = retry;
        self
    }

    /// Enqueues one job; its id once committed. Sent with an idempotency key of its own and
    /// retried with it after an ambiguous failure (see [`RetryPolicy`]).
    pub async fn enqueue(&self, job: JobSpec) -> Result<i64> {
        let key = new_key();
        let job = job.into_proto();
        let ack = self
            .with_retries(|| {
                let (job, key) = (job.clone(), key.clone());
                move |seq| {
                    Msg::Enqueue(pb::Enqueue {
                        seq,
                        job: Some(job),
                        idempotency_key: key,
                    })
                }
            })
            .await?;
        ack.ids.first().copied().ok_or(Error::Disconnected)
    }

    /// Enqueues a batch, all or nothing; ids in order once committed. Sent with an
    /// idempotency key of its own and retried with it after an ambiguous failure.
    pub async fn enqueue_batch(&self, jobs: Vec<JobSpec>) -> Result<Vec<i64>> {
        Ok(self.enqueue_batch_keyed(&new_key(), jobs).await?.ids)
    }

    /// Enqueues a batch under the caller's idempotency key (1 to 255 visible ASCII
    /// characters): any number of calls with the key, from this process or another, write
    /// the jobs once. Ambiguous failures are retried per the [`RetryPolicy`].
    pub async fn enqueue_batch_keyed(&self, key: &str, jobs: Vec<JobSpec>) -> Result<EnqueueAck> {
        let jobs: Vec<pb::JobSpec> = jobs.into_iter().map(JobSpec::into_proto).collect();
        self.with_retries(|| {
            let (jobs, key) = (jobs.clone(), key.to_string());
            move |seq| {
                Msg::Batch(pb::EnqueueBatch {
                    seq,
                    jobs,
                    idempotency_key: key,
                })
            }
        })
        .await
    }

    async fn with_retries<F, M>(&self, make: F) -> Result<EnqueueAck>
    where
        F: Fn() -> M,
        M: FnOnce(u64) -> Msg,
    {
        let mut backoff = self.retry.backoff;
        let mut attempt = 1;
        loop {
            match self.request(make()).await {
                Ok(ack) => {
                    return Ok(EnqueueAck {
                        ids: ack.job_ids,
                        duplicates: ack.duplicates,
                        replayed: ack.replayed,
                    })
                }
                Err(e) if retryable(&e) && attempt < self.retry.attempts => {
                    tracing::debug!(attempt, error = %e, "enqueue failed ambiguously; retrying with its key");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.retry.max_backoff);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn request(&self, msg: impl FnOnce(u64) -> Msg) -> Result<pb::EnqueueAck> {
        let conn = self.conn().await?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().expect("pending").insert(seq, tx);
        // The reader marks the stream dead before failing what is pending; a request that
        // registered after that must not wait forever.
        if !conn.alive.load(Ordering::Acquire) {
            conn.pending.lock().expect("pending").remove(&seq);
            return Err(Error::Disconnected);
        }
        let req = pb::ProducerRequest {
            msg: Some(msg(seq)),
        };
        if conn.tx.send(req).is_err() {
            conn.pending.lock().expect("pending").remove(&seq);
            return Err(Error::Disconnected);
        }
        let ack = rx.await.map_err(|_| Error::Disconnected)??;
        match ack.error {
            Some(e) => Err(e.into()),
            None => Ok(ack),
        }
    }

    /// The live stream, opening a new one if there is none.
    async fn conn(&self) -> Result<Arc<Conn>> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if c.alive.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
        }
        let c = Arc::new(self.open().await?);
        *slot = Some(c.clone());
        Ok(c)
    }

    async fn open(&self) -> Result<Conn> {
        let mut client = pb::producer_client::ProducerClient::new(channel(&self.url).await?)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let (tx, rx) = mpsc::unbounded_channel();
        let hello = pb::ProducerRequest {
            msg: Some(Msg::Hello(pb::Hello {
                api_key: self.api_key.clone(),
                client_name: self.client_name.clone(),
            })),
        };
        tx.send(hello).map_err(|_| Error::Disconnected)?;
        let mut inbound = client
            .stream(UnboundedReceiverStream::new(rx))
            .await
            .map_err(Error::Refused)?
            .into_inner();
        match inbound.next().await {
            Some(Ok(pb::ProducerResponse {
                msg: Some(In::HelloAck(ack)),
            })) => {
                self.max_batch
                    .store(u64::from(ack.max_batch.max(1)), Ordering::Relaxed);
            }
            Some(Err(status)) => return Err(Error::Refused(status)),
            _ => return Err(Error::Disconnected),
        }
        let pending: Arc<Mutex<HashMap<u64, Waiter>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (p, a) = (pending.clone(), alive.clone());
        tokio::spawn(async move {
            while let Some(Ok(msg)) = inbound.next().await {
                if let Some(In::Ack(ack)) = msg.msg {
                    if let Some(w) = p.lock().expect("pending").remove(&ack.seq) {
                        let _ = w.send(Ok(ack));
                    }
                }
            }
            a.store(false, Ordering::Release);
            for (_, w) in p.lock().expect("pending").drain() {
                let _ = w.send(Err(Error::Disconnected));
            }
        });
        Ok(Conn { tx, pending, alive })
    }
}
