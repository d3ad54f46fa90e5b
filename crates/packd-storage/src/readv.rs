//! Coalesced reads of many ranges of one remote blob (`readv`, after bzr's, seed 004): the
//! ranges are sorted, neighbours whose gap costs less than a round trip are merged into one
//! request, a request's size is capped, several requests are kept in flight, and each range is
//! handed to the caller as soon as it and those before it have arrived.
//!
//! # The plan
//!
//! ```text
//! caller's ranges (any order, may overlap)   [9..12] [0..4] [2..6] [40..48] [14..20]
//! sorted, overlapping ones joined            [0..6] [9..12] [14..20] [40..48]
//! gaps under the break-even merged           [0........20]            [40..48]
//! cut at the request cap (max_request_bytes) one GET per piece ("chunk")
//! issued in the order the caller needs them  chunk of range 0 first, then of range 1, ...
//! ```
//!
//! The break-even gap is `latency × bandwidth` ([`LinkEstimate`]): fetching that many unused
//! bytes inside a request costs as long as one more round trip. Both figures are measured on
//! this store's own answers (time to the first byte; bytes per second over a body) and kept as
//! moving averages, since a store on the same rack and one across an ocean differ by a
//! hundredfold (the seed: 1.4 KB on a LAN, 17 KB over the internet).
//!
//! # Memory
//!
//! A chunk is kept until the last range that uses it has been yielded. Chunks are started in
//! the order they are first needed, while the bytes in flight or held stay under
//! `max_buffered_bytes`; a chunk the next range needs is started even past that bound, so
//! that a read always progresses. What is held is thus bounded by that bound plus the range
//! being yielded (which the caller asked for whole), never by the blob's size. Ranges much
//! smaller than their chunk are copied out of it, so that a caller keeping a small range does
//! not keep a megabytes-long request alive with it.

use crate::{check_range, StorageError};
use bytes::{Bytes, BytesMut};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// How [`crate::Blob::read_many`] of an object store turns ranges into requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coalescing {
    /// One `GET` per range, in request order (bzr's "original"): the baseline to compare with.
    Off,
    /// Ranges sorted; only overlapping or touching ones share a `GET` (bzr's "sorted, 0").
    SortOnly,
    /// Ranges sorted; neighbours whose gap costs less than a round trip share a `GET`.
    #[default]
    Merge,
}

/// How an object store's blobs are read: the coalescing rule and its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// How ranges become requests.
    pub coalescing: Coalescing,
    /// Requests one `read_many` keeps in flight at once (at least 1).
    pub max_in_flight: usize,
    /// The most bytes one request asks for: a longer range is read in pieces of this size.
    pub max_request_bytes: u64,
    /// The most bytes one `read_many` keeps in flight or waiting for the caller, beyond the
    /// range it is yielding.
    pub max_buffered_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            coalescing: Coalescing::Merge,
            max_in_flight: 8,
            max_request_bytes: 8 << 20,
            max_buffered_bytes: 32 << 20,
        }
    }
}

/// Counts of the reads of a store (all blobs of one [`crate::S3Storage`] and those
/// [`crate::S3Storage::at`] derives), for benchmarks and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Calls of `read_many` (and reads long enough to be cut into several requests).
    pub read_many_calls: u64,
    /// `GET` requests sent (not counting `object_store`'s own retries).
    pub gets: u64,
    /// Bytes those requests returned.
    pub bytes_fetched: u64,
    /// Bytes of the ranges callers asked for (a range asked twice counts twice).
    pub bytes_used: u64,
}

/// [`ReadStats`] as counters shared by the threads reading a store.
#[derive(Debug, Default)]
pub(crate) struct ReadCounters {
    read_many_calls: AtomicU64,
    gets: AtomicU64,
    bytes_fetched: AtomicU64,
    bytes_used: AtomicU64,
}

impl ReadCounters {
    /// Adds one call's figures.
    pub(crate) fn add(&self, s: &ReadStats) {
        self.read_many_calls
            .fetch_add(s.read_many_calls, Ordering::Relaxed);
        self.gets.fetch_add(s.gets, Ordering::Relaxed);
        self.bytes_fetched
            .fetch_add(s.bytes_fetched, Ordering::Relaxed);
        self.bytes_used.fetch_add(s.bytes_used, Ordering::Relaxed);
    }

    /// The figures so far.
    pub(crate) fn get(&self) -> ReadStats {
        ReadStats {
            read_many_calls: self.read_many_calls.load(Ordering::Relaxed),
            gets: self.gets.load(Ordering::Relaxed),
            bytes_fetched: self.bytes_fetched.load(Ordering::Relaxed),
            bytes_used: self.bytes_used.load(Ordering::Relaxed),
        }
    }
}

/// The latency and bandwidth of a store, estimated online from its answers: exponentially
/// weighted moving averages of each request's time to the first byte and of the bytes per
/// second of each long enough body.
#[derive(Debug)]
pub(crate) struct LinkEstimate(Mutex<Link>);

#[derive(Debug, Clone, Copy)]
struct Link {
    /// Seconds from a request's start to its answer's head.
    latency: f64,
    /// Bytes per second of a body.
    bandwidth: f64,
    latency_samples: u64,
    bandwidth_samples: u64,
}

/// Weight of a new sample in the moving averages.
const ALPHA: f64 = 0.2;
/// A body shorter than this says little about bandwidth (it arrives with the answer's head).
const MIN_BANDWIDTH_SAMPLE: u64 = 128 << 10;
/// What is assumed before the first answer: a store in the same region.
const INITIAL_LATENCY: f64 = 0.002;
const INITIAL_BANDWIDTH: f64 = 50e6;

impl Default for LinkEstimate {
    fn default() -> Self {
        LinkEstimate(Mutex::new(Link {
            latency: INITIAL_LATENCY,
            bandwidth: INITIAL_BANDWIDTH,
            latency_samples: 0,
            bandwidth_samples: 0,
        }))
    }
}

impl LinkEstimate {
    fn link(&self) -> Link {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one request's time to its answer's head (a `HEAD`'s whole time, a `GET`'s time
    /// until its body starts).
    pub(crate) fn observe_latency(&self, took: Duration) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let s = took.as_secs_f64();
        l.latency = if l.latency_samples == 0 {
            s
        } else {
            l.latency + ALPHA * (s - l.latency)
        };
        l.latency_samples += 1;
    }

    /// Takes one body of `bytes` that took `took` from its first byte to its last.
    pub(crate) fn observe_body(&self, bytes: u64, took: Duration) {
        if bytes < MIN_BANDWIDTH_SAMPLE {
            return;
        }
        // Bounded, so that a body that came whole with its head (a time near 0) does not
        // make the break-even unbounded.
        let s = (bytes as f64 / took.as_secs_f64().max(1e-6)).clamp(1e6, 1e10);
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.bandwidth = if l.bandwidth_samples == 0 {
            s
        } else {
            l.bandwidth + ALPHA * (s - l.bandwidth)
        };
        l.bandwidth_samples += 1;
    }

    /// The estimated latency and bandwidth (bytes per second).
    pub(crate) fn get(&self) -> (Duration, f64) {
        let l = self.link();
        (Duration::from_secs_f64(l.latency), l.bandwidth)
    }

    /// The gap, in bytes, that costs as long to fetch as one more round trip.
    pub(crate) fn break_even_gap(&self) -> u64 {
        let l = self.link();
        (l.latency * l.bandwidth) as u64
    }
}

/// One request of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The bytes it asks for.
    pub(crate) range: Range<u64>,
    /// The first caller range (by index) that needs it.
    first_need: usize,
    /// How many caller ranges use it.
    refs: u32,
}

/// How a list of ranges is read: the requests, which of them each range needs, and the order
/// to start them in.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The requests; by offset, except with [`Coalescing::Off`] (request order).
    pub(crate) chunks: Vec<Chunk>,
    /// For each caller range, the chunks that hold it (consecutive; none for an empty range or
    /// one outside the blob).
    pub(crate) of_range: Vec<Range<usize>>,
    /// Chunk indexes in the order they are first needed.
    pub(crate) order: Vec<usize>,
}

/// Pushes `range` cut into pieces of at most `cap` bytes.
fn push_cut(chunks: &mut Vec<Chunk>, range: Range<u64>, cap: u64) {
    let mut at = range.start;
    while at < range.end {
        let end = range.end.min(at.saturating_add(cap));
        chunks.push(Chunk {
            range: at..end,
            first_need: usize::MAX,
            refs: 0,
        });
        at = end;
    }
}

/// Plans the requests for `ranges` of a blob of `len` bytes: merging neighbours `gap` bytes
/// apart or less (with [`Coalescing::Merge`]), none longer than `cap` (unless one range
/// alone is: it is cut).
pub(crate) fn plan(ranges: &[Range<u64>], len: u64, mode: Coalescing, gap: u64, cap: u64) -> Plan {
    let cap = cap.max(1);
    let wanted = |r: &Range<u64>| r.start < r.end && r.end <= len;
    let mut chunks = Vec::new();
    let mut of_range = vec![0..0; ranges.len()];
    if mode == Coalescing::Off {
        for (i, r) in ranges.iter().enumerate().filter(|(_, r)| wanted(r)) {
            let first = chunks.len();
            push_cut(&mut chunks, r.clone(), cap);
            of_range[i] = first..chunks.len();
        }
    } else {
        let gap = if mode == Coalescing::SortOnly { 0 } else { gap };
        let mut sorted: Vec<usize> = (0..ranges.len()).filter(|&i| wanted(&ranges[i])).collect();
        sorted.sort_unstable_by_key(|&i| (ranges[i].start, ranges[i].end));
        // Disjoint spans by offset: overlapping or touching ranges always join; a gap joins
        // if it is under the break-even and the span stays under the cap.
        let mut spans: Vec<Range<u64>> = Vec::new();
        for r in sorted.iter().map(|&i| &ranges[i]) {
            if let Some(last) = spans.last_mut() {
                if r.start <= last.end {
                    last.end = last.end.max(r.end);
                    continue;
                }
                if r.start - last.end < gap && r.end - last.start <= cap {
                    last.end = r.end;
                    continue;
                }
            }
            spans.push(r.clone());
        }
        let mut first_chunk = Vec::with_capacity(spans.len());
        for span in &spans {
            first_chunk.push(chunks.len());
            push_cut(&mut chunks, span.clone(), cap);
        }
        for (i, r) in ranges.iter().enumerate().filter(|(_, r)| wanted(r)) {
            let s = spans.partition_point(|s| s.end <= r.start);
            let base = first_chunk[s];
            let from = spans[s].start;
            of_range[i] = base + ((r.start - from) / cap) as usize
                ..base + ((r.end - 1 - from) / cap) as usize + 1;
        }
    }
    let mut order = Vec::with_capacity(chunks.len());
    for (i, need) in of_range.iter().enumerate() {
        for c in need.clone() {
            let chunk = &mut chunks[c];
            if chunk.refs == 0 {
                chunk.first_need = i;
                order.push(c);
            }
            chunk.refs += 1;
        }
    }
    Plan {
        chunks,
        of_range,
        order,
    }
}

/// A finished request: its chunk's index and its bytes.
pub(crate) type Answer = (usize, Result<Bytes, StorageError>);

/// Starts the request for chunk `.0` (bytes `.1`), whose answer goes to `.2`; returns a handle
/// that cancels it.
pub(crate) type Start<'a> =
    Box<dyn Fn(usize, Range<u64>, mpsc::Sender<Answer>) -> tokio::task::AbortHandle + Send + 'a>;

/// The iterator [`crate::Blob::read_many`] returns for an object store: runs a [`Plan`] with
/// several requests in flight and yields the ranges in request order.
pub(crate) struct InOrder<'a> {
    name: &'a str,
    len: u64,
    ranges: &'a [Range<u64>],
    plan: Plan,
    options: ReadOptions,
    start: Start<'a>,
    counters: &'a ReadCounters,
    /// The break-even gap the plan was made with (for the log).
    gap: u64,
    next_issue: usize,
    next_yield: usize,
    in_flight: usize,
    /// Bytes of the chunks in flight or arrived and still needed.
    held: u64,
    arrived: Vec<Option<Bytes>>,
    running: Vec<Option<tokio::task::AbortHandle>>,
    tx: mpsc::Sender<Answer>,
    rx: mpsc::Receiver<Answer>,
    failed: bool,
    stats: ReadStats,
}

impl<'a> InOrder<'a> {
    /// Reads `ranges` of blob `name` (`len` bytes) as planned, starting requests with `start`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: &'a str,
        len: u64,
        ranges: &'a [Range<u64>],
        options: ReadOptions,
        gap: u64,
        start: Start<'a>,
        counters: &'a ReadCounters,
    ) -> InOrder<'a> {
        let plan = plan(
            ranges,
            len,
            options.coalescing,
            gap,
            options.max_request_bytes,
        );
        let (tx, rx) = mpsc::channel();
        let chunks = plan.chunks.len();
        InOrder {
            name,
            len,
            ranges,
            plan,
            options,
            start,
            counters,
            gap,
            next_issue: 0,
            next_yield: 0,
            in_flight: 0,
            held: 0,
            arrived: vec![None; chunks],
            running: vec![None; chunks],
            tx,
            rx,
            failed: false,
            stats: ReadStats {
                read_many_calls: 1,
                ..ReadStats::default()
            },
        }
    }

    /// Starts the requests the bounds allow, in the order they are needed; `now` is the range
    /// being yielded, whose chunks start even past the byte bound.
    fn issue(&mut self, now: usize) {
        while self.next_issue < self.plan.order.len()
            && self.in_flight < self.options.max_in_flight.max(1)
        {
            let c = self.plan.order[self.next_issue];
            let chunk = &self.plan.chunks[c];
            let bytes = chunk.range.end - chunk.range.start;
            if chunk.first_need > now && self.held + bytes > self.options.max_buffered_bytes {
                break;
            }
            self.running[c] = Some((self.start)(c, chunk.range.clone(), self.tx.clone()));
            self.next_issue += 1;
            self.in_flight += 1;
            self.held += bytes;
            self.stats.gets += 1;
        }
    }

    /// Waits until every chunk of `need` has arrived (the range being yielded is `now`).
    fn wait_for(&mut self, need: Range<usize>, now: usize) -> Result<(), StorageError> {
        loop {
            self.issue(now);
            if need.clone().all(|c| self.arrived[c].is_some()) {
                return Ok(());
            }
            let (c, got) = self
                .rx
                .recv()
                .expect("the iterator holds a sender of its own channel");
            self.in_flight -= 1;
            self.running[c] = None;
            let bytes = got?;
            let want = &self.plan.chunks[c].range;
            // The request checks this already; a wrong length here would be wrong bytes.
            if bytes.len() as u64 != want.end - want.start {
                return Err(length_error(self.name, want, bytes.len()));
            }
            self.stats.bytes_fetched += bytes.len() as u64;
            self.arrived[c] = Some(bytes);
        }
    }

    /// The bytes of range `i` from its arrived chunks, releasing those no later range needs.
    fn take(&mut self, i: usize) -> Bytes {
        let r = self.ranges[i].clone();
        let need = self.plan.of_range[i].clone();
        let out = if need.len() == 1 {
            let c = need.start;
            let chunk = &self.plan.chunks[c];
            let bytes = self.arrived[c].as_ref().expect("waited for");
            let from = (r.start - chunk.range.start) as usize;
            let to = (r.end - chunk.range.start) as usize;
            if (to - from) * 2 >= bytes.len() {
                bytes.slice(from..to)
            } else {
                Bytes::copy_from_slice(&bytes[from..to])
            }
        } else {
            let mut out = BytesMut::with_capacity((r.end - r.start) as usize);
            for c in need.clone() {
                let chunk = &self.plan.chunks[c].range;
                let bytes = self.arrived[c].as_ref().expect("waited for");
                let from = r.start.max(chunk.start) - chunk.start;
                let to = r.end.min(chunk.end) - chunk.start;
                out.extend_from_slice(&bytes[from as usize..to as usize]);
            }
            out.freeze()
        };
        for c in need {
            let chunk = &mut self.plan.chunks[c];
            chunk.refs -= 1;
            if chunk.refs == 0 {
                self.arrived[c] = None;
                self.held -= chunk.range.end - chunk.range.start;
            }
        }
        self.stats.bytes_used += r.end - r.start;
        out
    }
}

impl Iterator for InOrder<'_> {
    type Item = Result<Bytes, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next_yield >= self.ranges.len() {
            return None;
        }
        let i = self.next_yield;
        self.next_yield += 1;
        let r = &self.ranges[i];
        if let Err(e) = check_range(self.name, r, self.len) {
            return Some(Err(e));
        }
        if r.is_empty() {
            return Some(Ok(Bytes::new()));
        }
        if let Err(e) = self.wait_for(self.plan.of_range[i].clone(), i) {
            // Callers stop at the first error; so does the iterator.
            self.failed = true;
            return Some(Err(e));
        }
        Some(Ok(self.take(i)))
    }
}

impl Drop for InOrder<'_> {
    fn drop(&mut self) {
        for handle in self.running.iter().flatten() {
            handle.abort();
        }
        self.counters.add(&self.stats);
        tracing::debug!(
            blob = self.name,
            ranges = self.ranges.len(),
            yielded = self.next_yield,
            gets = self.stats.gets,
            bytes_fetched = self.stats.bytes_fetched,
            bytes_used = self.stats.bytes_used,
            coalescing = ?self.options.coalescing,
            break_even_gap = self.gap,
            "S3 read_many"
        );
    }
}

/// The error for an answer of `got` bytes to a request for `want`.
pub(crate) fn length_error(name: &str, want: &Range<u64>, got: usize) -> StorageError {
    StorageError::Io {
        name: name.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the store answered {got} bytes for bytes {}..{} ({} bytes)",
                want.start,
                want.end,
                want.end - want.start
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(p: &Plan) -> Vec<Range<u64>> {
        p.chunks.iter().map(|c| c.range.clone()).collect()
    }

    #[test]
    fn sorting_joins_overlaps_and_merging_joins_small_gaps() {
        let ranges = [9..12, 0..4, 2..6, 40..48, 14..20, 5..5, 90..200];
        let off = plan(&ranges, 100, Coalescing::Off, 10, 1 << 20);
        assert_eq!(spans(&off), vec![9..12, 0..4, 2..6, 40..48, 14..20]);
        assert_eq!(off.of_range[5], 0..0);
        assert_eq!(off.of_range[6], 0..0, "past the end: no request");
        let sorted = plan(&ranges, 100, Coalescing::SortOnly, 10, 1 << 20);
        assert_eq!(spans(&sorted), vec![0..6, 9..12, 14..20, 40..48]);
        // Needed first: range 0 (9..12) is in chunk 1.
        assert_eq!(sorted.order, vec![1, 0, 3, 2]);
        let merged = plan(&ranges, 100, Coalescing::Merge, 10, 1 << 20);
        assert_eq!(spans(&merged), vec![0..20, 40..48]);
        assert_eq!(merged.of_range[3], 1..2);
        assert_eq!(merged.chunks[0].refs, 4);
    }

    #[test]
    fn the_cap_bounds_merged_requests_and_cuts_long_ranges() {
        let ranges = [0..10, 12..20, 22..30, 0..35];
        let p = plan(&[0..10, 12..20, 22..30], 100, Coalescing::Merge, 5, 16);
        assert_eq!(spans(&p), vec![0..10, 12..20, 22..30]);
        let p = plan(&ranges, 100, Coalescing::Merge, 5, 16);
        // The whole range joins them all (overlaps always join), cut at 16 bytes.
        assert_eq!(spans(&p), vec![0..16, 16..32, 32..35]);
        assert_eq!(p.of_range[1], 0..2);
        assert_eq!(p.of_range[3], 0..3);
    }
}
