//! The producer: one stream, many requests in flight, each answered after COMMIT.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
        };
        p.conn().await?;
        Ok(p)
    }

    /// The largest batch the server accepts.
    pub fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::Relaxed) as usize
    }

    /// Enqueues one job; its id once committed.
    pub async fn enqueue(&self, job: JobSpec) -> Result<i64> {
        let ack = self
            .request(|seq| {
                Msg::Enqueue(pb::Enqueue {
                    seq,
                    job: Some(job.into_proto()),
                })
            })
            .await?;
        ack.job_ids.first().copied().ok_or(Error::Disconnected)
    }

    /// Enqueues a batch, all or nothing; ids in order once committed.
    pub async fn enqueue_batch(&self, jobs: Vec<JobSpec>) -> Result<Vec<i64>> {
        let jobs: Vec<pb::JobSpec> = jobs.into_iter().map(JobSpec::into_proto).collect();
        let ack = self
            .request(|seq| Msg::Batch(pb::EnqueueBatch { seq, jobs }))
            .await?;
        Ok(ack.job_ids)
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
