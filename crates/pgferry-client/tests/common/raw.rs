//! A raw worker stream: sends what the test says, returns what the server sends (exact
//! control over the protocol, which the client library hides).

use std::time::Duration;

use pb::worker_request::Msg as Req;
use pb::worker_response::Msg as Resp;
use pgferry_client::proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use super::PATIENCE;

pub struct RawWorker {
    tx: mpsc::UnboundedSender<pb::WorkerRequest>,
    rx: tonic::Streaming<pb::WorkerResponse>,
}

impl RawWorker {
    /// A worker as written before batching existed (no `max_batch` in its hello).
    pub async fn open(url: &str, key: &str, queues: &[&str]) -> RawWorker {
        let (w, ack) = RawWorker::open_batched(url, key, queues, 0).await;
        assert_eq!(ack.max_batch, 0, "batches only for workers that ask");
        w
    }

    /// A worker asking for batches of up to `max_batch`; returns the server's hello_ack.
    pub async fn open_batched(
        url: &str,
        key: &str,
        queues: &[&str],
        max_batch: u32,
    ) -> (RawWorker, pb::WorkerHelloAck) {
        let mut client = pb::worker_client::WorkerClient::connect(url.to_string())
            .await
            .expect("connect");
        let (tx, rx) = mpsc::unbounded_channel();
        RawWorker::send_on(
            &tx,
            Req::Hello(pb::WorkerHello {
                api_key: key.to_string(),
                worker_id: "raw".into(),
                queues: queues.iter().map(|q| q.to_string()).collect(),
                kinds: vec![],
                max_batch,
            }),
        );
        let mut rx = client
            .stream(UnboundedReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        match rx.next().await {
            Some(Ok(pb::WorkerResponse {
                msg: Some(Resp::HelloAck(ack)),
            })) => (RawWorker { tx, rx }, ack),
            other => panic!("expected hello_ack, got {other:?}"),
        }
    }

    fn send_on(tx: &mpsc::UnboundedSender<pb::WorkerRequest>, m: Req) {
        tx.send(pb::WorkerRequest { msg: Some(m) }).expect("send");
    }

    pub fn send(&self, m: Req) {
        RawWorker::send_on(&self.tx, m);
    }

    /// The next message, or None when nothing came within `within`; panics if the stream
    /// ended.
    pub async fn next(&mut self, within: Duration) -> Option<Resp> {
        match tokio::time::timeout(within, self.rx.next()).await {
            Ok(Some(Ok(m))) => m.msg,
            Ok(other) => panic!("stream ended: {other:?}"),
            Err(_) => None,
        }
    }

    /// The status the stream ends with.
    pub async fn ended(&mut self) -> tonic::Status {
        loop {
            match tokio::time::timeout(PATIENCE, self.rx.next()).await {
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(st))) => return st,
                Ok(None) => panic!("stream ended without a status"),
                Err(_) => panic!("stream did not end"),
            }
        }
    }

    /// The next message, which must be a single job.
    pub async fn job(&mut self) -> pb::Job {
        match self.next(PATIENCE).await {
            Some(Resp::Job(j)) => j,
            other => panic!("expected a job, got {other:?}"),
        }
    }

    /// The next message, which must be a JobBatch.
    pub async fn job_batch(&mut self) -> Vec<pb::Job> {
        match self.next(PATIENCE).await {
            Some(Resp::Jobs(b)) => b.jobs,
            other => panic!("expected a job batch, got {other:?}"),
        }
    }

    /// The next message, which must be a ResultAckBatch.
    pub async fn ack_batch(&mut self) -> Vec<pb::ResultAck> {
        match self.next(PATIENCE).await {
            Some(Resp::ResultAcks(b)) => b.acks,
            other => panic!("expected a result ack batch, got {other:?}"),
        }
    }
}
