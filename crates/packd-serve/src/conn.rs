//! Per-connection bookkeeping for the idle timeout: the socket wrapper that records when bytes
//! last moved, and the guard that marks a connection busy while a request is being answered.
//!
//! A connection is closed when no byte moved either way for the idle timeout and no request is
//! in flight. A request in flight has its own timeouts: each frame of the request body must
//! arrive within the idle timeout, and each chunk of a streamed response must be taken by the
//! client within it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// When a connection last moved bytes, and how many of its requests are in flight.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// A connection that has just been accepted.
    pub fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records that bytes moved now.
    pub fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Resolves once the connection has been idle (no bytes, no request in flight) for `idle`.
    pub async fn idle_expired(&self, idle: Duration) {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX).max(1);
        loop {
            let quiet = self
                .now_ms()
                .saturating_sub(self.last_ms.load(Ordering::Relaxed));
            let wait = if self.busy.load(Ordering::Relaxed) > 0 {
                idle_ms
            } else if quiet >= idle_ms {
                return;
            } else {
                idle_ms - quiet
            };
            tokio::time::sleep(Duration::from_millis(wait.max(20))).await;
        }
    }
}

/// Marks a connection busy for as long as it lives (a request is being answered).
#[derive(Debug)]
pub struct BusyGuard(Arc<Activity>);

impl BusyGuard {
    /// Marks `activity`'s connection busy.
    pub fn new(activity: Arc<Activity>) -> BusyGuard {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        BusyGuard(activity)
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket that records in an [`Activity`] whenever bytes are read or written.
#[derive(Debug)]
pub struct IdleIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> IdleIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, activity: Arc<Activity>) -> IdleIo<T> {
        activity.touch();
        IdleIo { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
