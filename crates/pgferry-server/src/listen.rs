//! The server's listening sockets, with an accept queue sized for bursts of new connections.
//!
//! `TcpListener::bind` (std, tokio through mio) listens with a backlog of 128. When more
//! handshakes complete than that before the accept loop takes them, Linux drops the next
//! SYNs (`ListenOverflows` in `nstat`), and each dropped client retries after one second:
//! a burst of connections — curl pings from cron jobs at the top of the minute, webhook
//! senders, a fleet of workers reconnecting, an HTTP client opening connections past its
//! pool — waits a second or more for nothing. `bench http-jobs` showed it as a 0.8–1.0 s API
//! p95 in two runs of seven (docs/performance.md, "A second per dropped SYN"). The kernel
//! caps the backlog at `net.core.somaxconn` (4096 by default since Linux 5.4).

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The accept queue asked for; the kernel caps it at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (address reuse on, as `TcpListener::bind` does) and listens with
/// [`LISTEN_BACKLOG`].
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// 300 clients (more than twice the 128 of `TcpListener::bind`) connect at once while
    /// nothing is accepted: every handshake completes (the accept queue holds them). With a
    /// backlog of 128 the connects past it would wait for the listener, which never
    /// accepts, and the timeout fails the test.
    #[tokio::test]
    async fn a_burst_of_connections_waits_in_the_accept_queue() {
        let listener = super::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..300).map(|_| tokio::net::TcpStream::connect(addr));
        let all = futures_util::future::try_join_all(connects);
        let streams = tokio::time::timeout(Duration::from_secs(20), all)
            .await
            .expect("every connect completed without an accept")
            .unwrap();
        assert_eq!(streams.len(), 300);
        drop(listener);
    }
}
