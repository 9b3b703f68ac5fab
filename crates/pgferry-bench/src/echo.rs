//! The floor under any networked acknowledgement (issue 21): a request of a job's size sent
//! to a task of this process and a short reply read back, over TCP loopback (what gRPC
//! uses) and over a Unix socket pair (the cheapest local transport), on the same tokio
//! runtime as the gRPC client and server. No framing, parsing or database: only the two
//! socket hops and the task wake-ups every server pays.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::task::JoinHandle;

/// Bytes of the reply: about a gRPC acknowledgement's (ids, a status, HTTP/2 frames).
const REPLY_BYTES: usize = 32;

/// Which socket a round trip takes.
#[derive(Debug, Clone, Copy)]
pub enum Transport {
    Tcp,
    Unix,
}

/// Client ends of one TCP loopback and one Unix socket connection to echo tasks.
pub struct Echo {
    tcp: TcpStream,
    unix: UnixStream,
    request: Vec<u8>,
    reply: [u8; REPLY_BYTES],
    tasks: [JoinHandle<()>; 2],
}

impl Echo {
    /// Connects both transports; each request is `request_bytes` long.
    pub async fn start(request_bytes: usize) -> anyhow::Result<Echo> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let tcp = TcpStream::connect(listener.local_addr()?).await?;
        let (served, _) = listener.accept().await?;
        // As the gRPC server and client set it: without it Nagle holds the reply back.
        tcp.set_nodelay(true)?;
        served.set_nodelay(true)?;
        let (unix, unix_served) = UnixStream::pair()?;
        let request_bytes = request_bytes.max(1);
        Ok(Echo {
            tcp,
            unix,
            request: vec![7; request_bytes],
            reply: [0; REPLY_BYTES],
            tasks: [
                tokio::spawn(serve(served, request_bytes)),
                tokio::spawn(serve(unix_served, request_bytes)),
            ],
        })
    }

    /// One request and its reply over `transport`.
    pub async fn round_trip(&mut self, transport: Transport) -> anyhow::Result<Duration> {
        let t = Instant::now();
        match transport {
            Transport::Tcp => exchange(&mut self.tcp, &self.request, &mut self.reply).await?,
            Transport::Unix => exchange(&mut self.unix, &self.request, &mut self.reply).await?,
        }
        Ok(t.elapsed())
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    request: &[u8],
    reply: &mut [u8],
) -> std::io::Result<()> {
    s.write_all(request).await?;
    s.read_exact(reply).await?;
    Ok(())
}

/// Reads whole requests and answers each with a reply, until the client end closes.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request_bytes: usize) {
    let mut request = vec![0; request_bytes];
    let reply = [1u8; REPLY_BYTES];
    while s.read_exact(&mut request).await.is_ok() {
        if s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_round_trip_carries_a_whole_request_and_its_reply() {
        let mut echo = Echo::start(300).await.unwrap();
        for _ in 0..3 {
            for t in [Transport::Tcp, Transport::Unix] {
                echo.round_trip(t).await.unwrap();
                assert_eq!(echo.reply, [1u8; REPLY_BYTES]);
                echo.reply = [0; REPLY_BYTES];
            }
        }
    }
}
