//! The accept loop: HTTP/1 connections driven by hyper with a header-read timeout (hyper's,
//! on its timer), a cap on open connections, and an idle watchdog for kept-alive ones.
//! `axum::serve` has none of these knobs; every request goes to the same axum router.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::Metrics;
use super::limits::{Limits, MAX_READ_BUFFER};

/// What a connection over the cap gets before it is closed: no request of it is read.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
    retry-after: 1\r\nconnection: close\r\ncontent-length: 32\r\n\r\n\
    too many connections; try again\n";

/// Accept connections on `listener` and serve each with `routes` until `shutdown`; then
/// stop accepting, let in-flight requests finish, and return once every connection is closed.
pub(super) async fn accept_loop(
    listener: TcpListener,
    routes: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_READ_BUFFER)
        .keep_alive(true);
    let builder = Arc::new(builder);
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // listener itself is fine; pause briefly so a full table can drain.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.http_refused(Refusal::Connections);
            // A fresh socket's send buffer is empty: the answer fits without waiting, and a
            // client that does not read it only loses it.
            let _ = stream.try_write(BUSY);
            continue;
        };
        connections.spawn(connection(
            stream,
            slot,
            builder.clone(),
            routes.clone(),
            limits.idle_timeout,
            metrics.clone(),
            shutdown.clone(),
        ));
    }
    while connections.join_next().await.is_some() {}
}

/// Why a connection or a request was refused, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The connection cap was reached.
    Connections,
    /// The body budget was spent.
    BodyMemory,
}

/// Which timeout closed a connection or ended a request, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// The request head did not arrive in time.
    Header,
    /// The body did not arrive in time.
    Body,
    /// A kept-alive connection stayed silent.
    Idle,
}

/// What the watchdog knows of a connection.
#[derive(Debug, Default)]
struct Activity {
    /// Bytes read from the socket so far.
    read: AtomicU64,
    state: Mutex<Phase>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Phase {
    /// Requests being handled.
    in_flight: u32,
    /// When the last response was handed to hyper and how many bytes had been read then;
    /// `None` before the first response (the header timeout covers that wait).
    idle_since: Option<(Instant, u64)>,
}

impl Activity {
    fn phase(&self) -> Phase {
        match self.state.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn update(&self, f: impl FnOnce(&mut Phase)) {
        let mut g = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut g);
    }

    /// When the watchdog should look again, and whether the connection is idle past `idle`.
    fn check(&self, idle: Duration) -> (Instant, bool) {
        let now = Instant::now();
        let phase = self.phase();
        match phase.idle_since {
            Some((since, read)) if phase.in_flight == 0 => {
                if self.read.load(Ordering::Relaxed) != read {
                    // The next request is on its way: hyper's header timeout has it.
                    (now + idle, false)
                } else if now >= since + idle {
                    (now, true)
                } else {
                    (since + idle, false)
                }
            }
            _ => (now + idle, false),
        }
    }
}

/// Marks a request handled when dropped (also when hyper drops it unfinished).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let read = self.0.read.load(Ordering::Relaxed);
        self.0.update(|p| {
            p.in_flight = p.in_flight.saturating_sub(1);
            p.idle_since = Some((Instant::now(), read));
        });
    }
}

/// The socket, counting what it reads so the watchdog can tell silence from a slow request.
struct Counted {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before) as u64;
        if n > 0 {
            self.activity.read.fetch_add(n, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serve one connection until the client closes it, a timeout cuts it off, or shutdown has
/// let its in-flight request finish. `_slot` is its place under the cap.
async fn connection(
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    builder: Arc<http1::Builder>,
    routes: Router,
    idle: Duration,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let _open = metrics.http_connection();
    let activity = Arc::new(Activity::default());
    let io = TokioIo::new(Counted {
        inner: stream,
        activity: activity.clone(),
    });
    let seen = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        seen.update(|p| p.in_flight += 1);
        let guard = InFlight(seen.clone());
        let handled = routes.clone().oneshot(request.map(Body::new));
        async move {
            let response = handled.await;
            drop(guard);
            response
        }
    });
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut draining = false;
    let (mut next, _) = activity.check(idle);
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    if e.is_timeout() {
                        metrics.http_timeout(Timeout::Header);
                    } else {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                return;
            }
            () = tokio::time::sleep_until(next) => {
                let (again, idle_past) = activity.check(idle);
                if idle_past {
                    metrics.http_timeout(Timeout::Idle);
                    // Dropping the connection closes the socket.
                    return;
                }
                next = again;
            }
            () = shutdown.cancelled(), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}
