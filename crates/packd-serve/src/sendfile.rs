//! Sending ranges of files on an HTTP connection without reading them (`sendfile`).
//!
//! A pack that is the whole answer to a fetch (a mirror clone after `repack -adb`, a clone
//! answered from the clone cache) is a file sent as it is. Read and written by packd, its
//! bytes cost two copies, a CRC check and the page faults of reading it: about a quarter of
//! the CPU of a mirror clone of git/git. `sendfile` hands the file's pages to the socket.
//!
//! hyper writes a response body handed to it as `Bytes`; it cannot be handed a file. So a
//! range goes through hyper as a stand-in: a slice of [`PLACEHOLDER`] (static zeros, never
//! read) as long as the range, while the range itself waits in the connection's
//! [`FileQueue`]. The connection's socket ([`FileRangeIo`]) recognises a stand-in by its
//! address when hyper writes it and sends the queued range in its place. hyper keeps the
//! body's pieces in order and writes them without copying them (its vectored write strategy,
//! which `http::serve_connection` sets), so the stand-ins it writes come in the order their
//! ranges were queued. A stand-in whose place or length does not match the front of the queue
//! fails the connection. That check cannot see everything: a stand-in hyper copied would go
//! out as zeros, and ranges of equal length cannot be told apart; the client's check of the
//! pack's trailer is what would catch either.
//!
//! ```text
//! ChannelWriter ── Piece::File(range) ──> ChannelBody ── FileQueue::stand_in ──> hyper
//!      hyper ── writev([chunk size, stand-in, CRLF]) ──> FileRangeIo ── sendfile(range) ──> socket
//! ```

use bytes::Bytes;
use packd_storage::FileRange;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The longest range one stand-in stands for (longer ranges are queued in pieces).
pub(crate) const PLACEHOLDER_LEN: usize = 64 * 1024;

/// The stand-ins' bytes: zeros, in memory of their own so that an address says a slice is one.
static PLACEHOLDER: [u8; PLACEHOLDER_LEN] = [0; PLACEHOLDER_LEN];

/// Whether `data` is (part of) a stand-in.
fn is_stand_in(data: &[u8]) -> bool {
    let start = PLACEHOLDER.as_ptr() as usize;
    let at = data.as_ptr() as usize;
    !data.is_empty() && at >= start && at < start + PLACEHOLDER_LEN
}

/// The file ranges of one connection whose stand-ins hyper has yet to write, in body order,
/// each with the bytes of it sent so far.
#[derive(Default)]
pub(crate) struct FileQueue {
    ranges: Mutex<VecDeque<(FileRange, u64)>>,
}

impl FileQueue {
    /// Queues `range` (at most [`PLACEHOLDER_LEN`] bytes) and returns its stand-in.
    pub(crate) fn stand_in(&self, range: FileRange) -> std::io::Result<Bytes> {
        let len = range.len as usize;
        if len == 0 || len > PLACEHOLDER_LEN {
            return Err(std::io::Error::other(format!(
                "a file range of {len} bytes cannot be sent in one piece"
            )));
        }
        self.ranges.lock().push_back((range, 0));
        Ok(Bytes::from_static(&PLACEHOLDER[..len]))
    }
}

/// A connection's socket that sends the queued file range wherever hyper writes its stand-in.
pub(crate) struct FileRangeIo {
    inner: TcpStream,
    queue: Arc<FileQueue>,
}

impl FileRangeIo {
    /// Wraps `inner`, whose file ranges `queue` holds.
    pub(crate) fn new(inner: TcpStream, queue: Arc<FileQueue>) -> FileRangeIo {
        FileRangeIo { inner, queue }
    }

    /// Sends (part of) the range at the front of the queue, for the stand-in `stand_in`.
    fn poll_send_range(
        &mut self,
        cx: &mut Context<'_>,
        stand_in: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let out_of_step = |why: &str| {
            Poll::Ready(Err(std::io::Error::other(format!(
                "a file range's stand-in {why}; the response is abandoned"
            ))))
        };
        let skip = (stand_in.as_ptr() as usize - PLACEHOLDER.as_ptr() as usize) as u64;
        let mut queue = self.queue.ranges.lock();
        let Some((range, sent)) = queue.front_mut() else {
            return out_of_step("was written with no range queued");
        };
        if *sent != skip || range.len - *sent != stand_in.len() as u64 {
            return out_of_step("does not match the range queued first");
        }
        loop {
            std::task::ready!(self.inner.poll_write_ready(cx))?;
            let sent_now = self.inner.try_io(tokio::io::Interest::WRITABLE, || {
                send_file(&self.inner, range, *sent)
            });
            match sent_now {
                Ok(n) => {
                    *sent += n as u64;
                    if *sent == range.len {
                        queue.pop_front();
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    // A client that went away is the usual end; anything else is the file's.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) {
                        tracing::warn!("sending a file range to the client: {e}");
                    }
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

/// One `sendfile` of `range` from `sent` bytes into it, to `socket`.
#[cfg(target_os = "linux")]
fn send_file(socket: &TcpStream, range: &FileRange, sent: u64) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    range.send_once(socket.as_raw_fd(), sent)
}

#[cfg(not(target_os = "linux"))]
fn send_file(_socket: &TcpStream, _range: &FileRange, _sent: u64) -> std::io::Result<usize> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "sendfile is used only on Linux",
    ))
}

impl AsyncRead for FileRangeIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FileRangeIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if is_stand_in(data) {
            return self.poll_send_range(cx, data);
        }
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    /// Writes the buffers before the first stand-in, or, when a stand-in comes first, sends its
    /// range.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let first = bufs.iter().position(|b| !b.is_empty());
        let stand_in = bufs.iter().position(|b| is_stand_in(b));
        match (first, stand_in) {
            (Some(first), Some(at)) if first == at => self.poll_send_range(cx, &bufs[at]),
            (_, Some(at)) => Pin::new(&mut self.inner).poll_write_vectored(cx, &bufs[..at]),
            (_, None) => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_are_known_by_their_address() {
        let queue = FileQueue::default();
        let file = Arc::new(tempfile::tempfile().unwrap());
        let range = FileRange {
            file,
            offset: 3,
            len: 100,
        };
        let stand_in = queue.stand_in(range.clone()).unwrap();
        assert_eq!(stand_in.len(), 100);
        assert!(is_stand_in(&stand_in));
        assert!(is_stand_in(&stand_in[40..]));
        assert!(!is_stand_in(&stand_in[..0]));
        assert!(!is_stand_in(&[0u8; 100]));
        assert!(queue.stand_in(range.sub(0, 0)).is_err());
        let too_long = FileRange {
            len: PLACEHOLDER_LEN as u64 + 1,
            ..range
        };
        assert!(queue.stand_in(too_long).is_err());
    }
}
