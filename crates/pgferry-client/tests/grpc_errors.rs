//! Every error class of the gRPC front over a real socket: undecodable protobuf and invalid
//! fields (INVALID_ARGUMENT naming the field, nothing written), size limits
//! (RESOURCE_EXHAUSTED), keys (UNAUTHENTICATED, PERMISSION_DENIED, revocation within the
//! auth cache's TTL), per-key rate limits (RESOURCE_EXHAUSTED with `retry-after`).

mod common;

use std::time::Duration;

use common::{loopback, tenant_key, Server};
use pgferry_client::proto::v1 as pb;
use pgferry_server::ServerConfig;
use prost::bytes::{Buf, BufMut};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Request, Status};

const PATIENCE: Duration = Duration::from_secs(30);

/// Sends bytes as they are and returns the answer's bytes: lets a test put anything on the
/// wire, including messages that are not valid protobuf.
#[derive(Default, Clone)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

async fn raw_client(url: &str) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn spec(queue: &str) -> pb::JobSpec {
    pb::JobSpec {
        queue: queue.into(),
        kind: "k".into(),
        args: "{}".into(),
        ..Default::default()
    }
}

async fn pending_ids(db: &pgferry_testkit::TestDb) -> i64 {
    let c = db.connect().await;
    c.query_one("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap()
        .get(0)
}

/// A Producer stream opened with `key`; the first answer (hello_ack or the error).
async fn producer_hello(
    url: &str,
    key: &str,
) -> (
    mpsc::UnboundedSender<pb::ProducerRequest>,
    Result<tonic::Streaming<pb::ProducerResponse>, Status>,
) {
    let mut client = pb::producer_client::ProducerClient::connect(url.to_string())
        .await
        .unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Hello(pb::Hello {
            api_key: key.into(),
            client_name: "t".into(),
        })),
    })
    .unwrap();
    let mut stream = match client.stream(UnboundedReceiverStream::new(rx)).await {
        Ok(s) => s.into_inner(),
        Err(s) => return (tx, Err(s)),
    };
    match tokio::time::timeout(PATIENCE, stream.next()).await.unwrap() {
        Some(Ok(pb::ProducerResponse {
            msg: Some(pb::producer_response::Msg::HelloAck(_)),
        })) => (tx, Ok(stream)),
        Some(Err(s)) => (tx, Err(s)),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_protobuf_and_invalid_fields_are_invalid_argument() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), Default::default()).await;
    let mut raw = raw_client(&server.url).await;

    // GetJobRequest.id (field 1, int64) sent as a length-delimited field.
    raw.ready().await.unwrap();
    let e = raw
        .unary(
            authed(&key, vec![0x0a, 0x01, 0x00]),
            "/pgferry.v1.Admin/GetJob".parse().unwrap(),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("GetJobRequest.id"), "{}", e.message());

    // A JobSpec whose args is not UTF-8 inside an Admin enqueue: refused, nothing written.
    let mut good = pb::EnqueueRequest {
        jobs: vec![spec("q")],
    }
    .encode_to_vec();
    let bad_job = {
        let mut j = Vec::new();
        j.put_u8(0x0a); // queue = "q"
        j.put_u8(1);
        j.put_u8(b'q');
        j.put_u8(0x1a); // args (field 3) = invalid UTF-8
        j.put_u8(2);
        j.put_slice(&[0xff, 0xfe]);
        j
    };
    good.put_u8(0x0a); // jobs (field 1): a second, broken job
    good.put_u8(bad_job.len() as u8);
    good.put_slice(&bad_job);
    raw.ready().await.unwrap();
    let e = raw
        .unary(
            authed(&key, good),
            "/pgferry.v1.Admin/Enqueue".parse().unwrap(),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("JobSpec.args"), "{}", e.message());
    assert_eq!(
        pending_ids(&db).await,
        0,
        "nothing of the request was written"
    );

    // The Producer stream: a valid hello, a valid enqueue, then bytes that do not decode.
    // The enqueue is acknowledged; the stream then ends with INVALID_ARGUMENT.
    let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tx.send(
        pb::ProducerRequest {
            msg: Some(pb::producer_request::Msg::Hello(pb::Hello {
                api_key: key.clone(),
                client_name: "raw".into(),
            })),
        }
        .encode_to_vec(),
    )
    .unwrap();
    tx.send(
        pb::ProducerRequest {
            msg: Some(pb::producer_request::Msg::Enqueue(pb::Enqueue {
                seq: 1,
                job: Some(spec("q")),
                ..Default::default()
            })),
        }
        .encode_to_vec(),
    )
    .unwrap();
    tx.send(vec![0x12, 0x05, 0x08]).unwrap(); // enqueue (field 2) cut short
    raw.ready().await.unwrap();
    let mut answers = raw
        .streaming(
            Request::new(UnboundedReceiverStream::new(rx)),
            "/pgferry.v1.Producer/Stream".parse().unwrap(),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let mut acked = 0;
    let end = loop {
        match tokio::time::timeout(PATIENCE, answers.next())
            .await
            .unwrap()
        {
            Some(Ok(bytes)) => {
                let m = pb::ProducerResponse::decode(bytes.as_slice()).unwrap();
                if let Some(pb::producer_response::Msg::Ack(a)) = m.msg {
                    assert!(a.error.is_none(), "{a:?}");
                    acked += a.job_ids.len();
                }
            }
            Some(Err(s)) => break s,
            None => panic!("the stream ended without a status"),
        }
    };
    drop(tx);
    assert_eq!(end.code(), Code::InvalidArgument, "{end:?}");
    assert!(end.message().contains("malformed protobuf"), "{end:?}");
    assert_eq!(
        acked, 1,
        "the enqueue before the bad message was acknowledged"
    );

    // Invalid fields in well-formed messages name the field; nothing is written.
    let (tx, stream) = producer_hello(&server.url, &key).await;
    let mut stream = stream.unwrap();
    let mut bad = spec("q");
    bad.priority = 9;
    tx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Batch(pb::EnqueueBatch {
            seq: 7,
            jobs: vec![spec("q"), bad],
            ..Default::default()
        })),
    })
    .unwrap();
    match tokio::time::timeout(PATIENCE, stream.next()).await.unwrap() {
        Some(Ok(pb::ProducerResponse {
            msg: Some(pb::producer_response::Msg::Ack(a)),
        })) => {
            let e = a.error.expect("refused");
            assert_eq!(
                (e.code.as_str(), e.field.as_str()),
                ("invalid_argument", "jobs[1].priority")
            );
            assert!(a.job_ids.is_empty());
        }
        other => panic!("expected an ack, got {other:?}"),
    }
    assert_eq!(pending_ids(&db).await, 1, "only the acknowledged job");

    let mut admin = pb::admin_client::AdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let mut bad = spec("q");
    bad.args = "{not json".into();
    let e = admin
        .enqueue(authed(&key, pb::EnqueueRequest { jobs: vec![bad] }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("(jobs[0].args)"), "{}", e.message());

    // Size limits: RESOURCE_EXHAUSTED with the typed code.
    let mut big = spec("q");
    big.args = format!("\"{}\"", "x".repeat(2 << 20));
    let e = admin
        .enqueue(authed(&key, pb::EnqueueRequest { jobs: vec![big] }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().starts_with("payload_too_large"),
        "{}",
        e.message()
    );
    let e = admin
        .enqueue(authed(
            &key,
            pb::EnqueueRequest {
                jobs: vec![spec("q"); 1001],
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().starts_with("batch_too_large"),
        "{}",
        e.message()
    );
    assert_eq!(pending_ids(&db).await, 1, "nothing more was written");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_scopes_revocation_and_rate_limits() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let mut client = db.connect().await;
    let read = pgferry_server::auth::admin::create_key(
        &mut client,
        "acme",
        pgferry_server::auth::Scopes::from_names(["read"]).unwrap(),
        None,
    )
    .await
    .unwrap()
    .1
    .expose();
    let mut config = ServerConfig::default();
    config.auth.cache_ttl = Duration::from_millis(200);
    // Five at once, then one per ~17 minutes: the sixth call of a key inside this test
    // is refused.
    config.http.rate_burst = 5.0;
    config.http.rate_per_sec = 0.001;
    let server = Server::start_with(&db, loopback(), Default::default(), config).await;

    // UNAUTHENTICATED: no key, an unknown key; PERMISSION_DENIED: a read key producing.
    let (_, r) = producer_hello(&server.url, "pgf_000000000000_00").await;
    assert_eq!(r.unwrap_err().code(), Code::Unauthenticated);
    let (_, r) = producer_hello(&server.url, &read).await;
    assert_eq!(r.unwrap_err().code(), Code::PermissionDenied);
    let mut wc = pb::worker_client::WorkerClient::connect(server.url.clone())
        .await
        .unwrap();
    let (wtx, wrx) = mpsc::unbounded_channel();
    wtx.send(pb::WorkerRequest {
        msg: Some(pb::worker_request::Msg::Hello(pb::WorkerHello {
            api_key: read.clone(),
            queues: vec!["q".into()],
            ..Default::default()
        })),
    })
    .unwrap();
    let e = match wc.stream(UnboundedReceiverStream::new(wrx)).await {
        Ok(s) => s.into_inner().next().await.unwrap().unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let mut admin = pb::admin_client::AdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let e = admin
        .list_queues(Request::new(pb::ListQueuesRequest {}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    // The rate limit of the read key (two stream opens above used two of its five tokens):
    // three more calls, then RESOURCE_EXHAUSTED with retry-after.
    for _ in 0..3 {
        admin
            .list_queues(authed(&read, pb::ListQueuesRequest {}))
            .await
            .unwrap();
    }
    let e = admin
        .list_queues(authed(&read, pb::ListQueuesRequest {}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().starts_with("rate_limited"), "{}", e.message());
    let retry: u64 = e
        .metadata()
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    // ...and its stream opens too, over HTTP as well (one budget per key).
    let (_, r) = producer_hello(&server.url, &read).await;
    assert_eq!(r.unwrap_err().code(), Code::ResourceExhausted);
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/v1/queues", server.http_url))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);

    // Revocation: the admin key works, is revoked, and within the cache TTL Admin calls
    // and new streams are refused.
    admin
        .list_queues(authed(&key, pb::ListQueuesRequest {}))
        .await
        .unwrap();
    let prefix = pgferry_server::auth::ApiKey::parse(&key).unwrap().prefix;
    pgferry_server::auth::admin::revoke_key(&mut client, &prefix)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let e = loop {
        match admin
            .list_queues(authed(&key, pb::ListQueuesRequest {}))
            .await
        {
            Err(e) => break e,
            Ok(_) if tokio::time::Instant::now() > deadline => panic!("still accepted"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let (_, r) = producer_hello(&server.url, &key).await;
    assert_eq!(r.unwrap_err().code(), Code::Unauthenticated);
    server.stop().await;
}

/// A service whose handler panics, named like the Admin service.
#[derive(Clone)]
struct Boom;

impl tonic::server::NamedService for Boom {
    const NAME: &'static str = "pgferry.v1.Admin";
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for Boom {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        panic!("handler bug")
    }
}

/// The server's gRPC panic guard (installed by `serve_grpc`) answers a panicking handler
/// with INTERNAL, and the connection keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_answers_internal() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(pgferry_server::grpc::panic_guard())
            .add_service(Boom)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut admin = pb::admin_client::AdminClient::connect(url).await.unwrap();
    for _ in 0..2 {
        let e = admin
            .get_job(Request::new(pb::GetJobRequest { id: 1 }))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Internal, "{e:?}");
        assert!(e.message().starts_with("internal"), "{e:?}");
    }
}
