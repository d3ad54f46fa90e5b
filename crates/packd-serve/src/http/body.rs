//! A request body as a blocking [`Read`], for the threads of upload-pack and receive-pack:
//! read a frame at a time as it arrives, inflated on the way when it is gzip, never held whole.
//!
//! ```text
//! hyper frames ──> BodyReader (raw limit, pace) ──> [GzDecoder] ──> Capped (inflated limit)
//! ```
//!
//! What a connection holds for its body is hyper's read buffer, one frame, and the inflater's
//! state (a 32 KiB window and its tables), whatever the size of the body or what it inflates
//! to. The client must keep to the [`Pace`] (`--min-request-rate`, `--idle-timeout`).

use crate::pace::Pace;
use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::io::{ErrorKind, Read};
use std::time::Instant;

/// The request body, read on a blocking thread of `handle`'s runtime: each read takes the next
/// frame from hyper (waiting at most what the pace allows), so no more than a frame is held
/// here. More than `limit` bytes in all, a client too slow, or a broken connection make the
/// read fail, and every read after it.
pub(crate) struct BodyReader {
    body: Incoming,
    handle: tokio::runtime::Handle,
    pace: Pace,
    chunk: Bytes,
    /// Bytes taken from the body so far.
    received: u64,
    limit: u64,
    ended: bool,
    /// Turns true when the server stops waiting for requests in flight.
    cut: tokio::sync::watch::Receiver<bool>,
    /// Why the body failed, if it did: the kind is `InvalidData` past the limit, `TimedOut`
    /// for a slow client, `ConnectionAborted` for a broken connection.
    pub(crate) failed: Option<(ErrorKind, String)>,
}

impl BodyReader {
    /// A reader of `body`, at most `limit` bytes, at `pace`.
    pub(crate) fn new(
        body: Incoming,
        handle: tokio::runtime::Handle,
        pace: Pace,
        limit: u64,
        cut: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        BodyReader {
            body,
            handle,
            pace,
            chunk: Bytes::new(),
            received: 0,
            limit,
            ended: false,
            cut,
            failed: None,
        }
    }

    fn fail(&mut self, kind: ErrorKind, message: String) -> std::io::Error {
        self.failed = Some((kind, message.clone()));
        std::io::Error::new(kind, message)
    }

    /// Takes the next data frame into `chunk`; `false` at the end of the body.
    fn next_chunk(&mut self) -> std::io::Result<bool> {
        if let Some((kind, message)) = &self.failed {
            return Err(std::io::Error::new(*kind, message.clone()));
        }
        while self.chunk.is_empty() {
            if self.ended {
                return Ok(false);
            }
            let wait = self.pace.next_wait();
            if wait.is_zero() {
                let why = self.pace.too_slow();
                return Err(self.fail(ErrorKind::TimedOut, why));
            }
            let body = &mut self.body;
            let cut = &mut self.cut;
            let start = Instant::now();
            let frame = self.handle.block_on(async move {
                tokio::select! {
                    frame = tokio::time::timeout(wait, body.frame()) => Some(frame),
                    _ = crate::stopping::until_cut(cut) => None,
                }
            });
            let waited = start.elapsed();
            let Some(frame) = frame else {
                return Err(self.fail(
                    ErrorKind::ConnectionAborted,
                    "the server is stopping".to_string(),
                ));
            };
            match frame {
                Err(_) => {
                    self.pace.record(wait.max(waited), 0);
                    let why = self.pace.too_slow();
                    return Err(self.fail(ErrorKind::TimedOut, why));
                }
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => {
                    return Err(self.fail(
                        ErrorKind::ConnectionAborted,
                        format!("reading the request body: {e}"),
                    ))
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.pace.record(waited, data.len());
                        self.received = self.received.saturating_add(data.len() as u64);
                        if self.received > self.limit {
                            let limit = self.limit;
                            return Err(self.fail(
                                ErrorKind::InvalidData,
                                format!(
                                    "request body larger than the server's limit of {limit} bytes"
                                ),
                            ));
                        }
                        self.chunk = data;
                    }
                }
            }
        }
        Ok(true)
    }

    /// Reads the rest of the body and throws it away, at most `max` bytes; whether the body
    /// ended (a client still sending can then read the answer).
    pub(crate) fn drain(&mut self, max: u64) -> bool {
        let mut dropped = 0u64;
        loop {
            let len = self.chunk.len() as u64;
            dropped = dropped.saturating_add(len);
            self.chunk = Bytes::new();
            if dropped > max {
                return false;
            }
            match self.next_chunk() {
                Ok(true) => {}
                Ok(false) => return true,
                Err(_) => return false,
            }
        }
    }
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() || !self.next_chunk()? {
            return Ok(0);
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk.advance(n);
        Ok(n)
    }
}

/// The body as sent, or inflated on the way when it is gzip.
pub(crate) enum Input {
    Plain(BodyReader),
    Gzip(Box<flate2::read::GzDecoder<BodyReader>>),
}

impl Input {
    /// `raw`, inflated when `gzip`.
    pub(crate) fn new(raw: BodyReader, gzip: bool) -> Input {
        if gzip {
            Input::Gzip(Box::new(flate2::read::GzDecoder::new(raw)))
        } else {
            Input::Plain(raw)
        }
    }

    /// The body as it comes off the connection.
    pub(crate) fn raw(&mut self) -> &mut BodyReader {
        match self {
            Input::Plain(r) => r,
            Input::Gzip(r) => r.get_mut(),
        }
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::Plain(r) => r.read(buf),
            Input::Gzip(r) => r.read(buf),
        }
    }
}

/// A reader that fails (`InvalidData`) once more than `limit` bytes came out of it: the bound on
/// what a request body inflates to.
pub(crate) struct Capped<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> Capped<R> {
    /// `inner`, at most `limit` bytes of it.
    pub(crate) fn new(inner: R, limit: u64) -> Capped<R> {
        Capped {
            inner,
            left: limit,
            limit,
        }
    }

    /// The reader inside.
    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

/// The message of a body that inflates past its limit.
pub(crate) fn inflates_too_far(limit: u64) -> String {
    format!("request body inflates to more than the server's limit of {limit} bytes")
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // One byte past the limit tells a body that ends there from one that goes on.
        let room = usize::try_from(self.left.saturating_add(1)).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            self.left = 0;
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                inflates_too_far(self.limit),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn capped_stops_past_the_limit() {
        let data = vec![7u8; 1000];
        let mut out = Vec::new();
        Capped::new(&data[..], 1000).read_to_end(&mut out).unwrap();
        assert_eq!(out.len(), 1000);
        let e = Capped::new(&data[..], 999)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        assert!(e.to_string().contains("limit of 999"), "{e}");
    }

    #[test]
    fn a_gzip_bomb_inflates_no_further_than_the_limit() {
        // 64 MiB of zeros in about 64 KiB of gzip: read through the cap, memory stays at the
        // buffer's size.
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            enc.write_all(&zeros).unwrap();
        }
        let gz = enc.finish().unwrap();
        assert!(gz.len() < 1 << 20);
        let mut r = Capped::new(flate2::read::GzDecoder::new(&gz[..]), 4 << 20);
        let mut buf = [0u8; 8192];
        let mut total = 0u64;
        let e = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("ended after {total} bytes"),
                Ok(n) => total += n as u64,
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        assert!(total <= 4 << 20, "{total}");
    }
}
