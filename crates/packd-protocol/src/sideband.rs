//! Side-band multiplexing of the pack stream, progress and errors, and git-style progress lines.
//!
//! ```text
//! <4-hex length> <band byte> <payload>
//!   band 1: pack data     (side-band-64k: payload <= 65515 bytes; side-band: <= 995)
//!   band 2: progress      "Counting objects:  45% (45/100)\r" ... "Counting objects: 100% (100/100), done.\n"
//!   band 3: fatal error   the client prints it and gives up
//! "0005\x01"              keepalive: an empty band-1 packet while the server is counting
//! ```

use crate::pkt_line;
use packd_pack::{FileRange, PackSink};
use packd_reach::progress::Progress;
use std::io::Write;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Band 1: pack data.
pub const BAND_DATA: u8 = 1;
/// Band 2: progress messages.
pub const BAND_PROGRESS: u8 = 2;
/// Band 3: a fatal error.
pub const BAND_ERROR: u8 = 3;

/// The keepalive git sends while it has nothing to say: an empty band-1 packet.
pub const KEEPALIVE: &[u8] = b"0005\x01";

/// How the pack reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sideband {
    /// Raw pack bytes on the connection (v0/v1 clients without side-band).
    None,
    /// `side-band`: packets of at most 1000 bytes.
    Small,
    /// `side-band-64k` (and always in protocol v2): packets of at most 65520 bytes.
    Large,
}

impl Sideband {
    /// The most payload bytes (band byte excluded) one packet carries.
    pub fn max_payload(self) -> usize {
        match self {
            Sideband::None => usize::MAX,
            Sideband::Small => 1000 - 5,
            Sideband::Large => pkt_line::MAX_PACKET - 5,
        }
    }
}

/// Writes `data` on `band`, split into packets of at most `max` payload bytes.
pub fn write_band(out: &mut dyn Write, band: u8, data: &[u8], max: usize) -> std::io::Result<()> {
    let max = max.clamp(1, pkt_line::MAX_PAYLOAD - 1);
    let mut packet = Vec::with_capacity(data.len().min(max) + 5);
    for chunk in data.chunks(max) {
        packet.clear();
        packet.extend_from_slice(&pkt_line::length_header(chunk.len() + 5));
        packet.push(band);
        packet.extend_from_slice(chunk);
        out.write_all(&packet)?;
    }
    Ok(())
}

/// A writer that sends what is written to it as band-1 packets (or raw), sending queued
/// progress messages on band 2 in between.
///
/// Data is copied once on its way through: small writes are gathered into a buffer that keeps
/// room for the packet header in front, and a write of a whole packet's worth goes out with
/// its header straight from the caller's bytes.
pub struct SidebandWriter<'a> {
    out: &'a mut dyn PackSink,
    mode: Sideband,
    /// The packet being gathered: `head` bytes of room for its header, then its payload.
    buf: Vec<u8>,
    /// Header bytes in front of the payload: 5 (length and band), or 0 without side-band.
    head: usize,
    progress: Option<&'a Receiver<Vec<u8>>>,
}

impl<'a> SidebandWriter<'a> {
    /// A writer over `out` in `mode`; progress messages queued on `progress` are forwarded.
    pub fn new(
        out: &'a mut dyn PackSink,
        mode: Sideband,
        progress: Option<&'a Receiver<Vec<u8>>>,
    ) -> SidebandWriter<'a> {
        let head = if mode == Sideband::None { 0 } else { 5 };
        SidebandWriter {
            out,
            mode,
            buf: vec![0; head],
            head,
            progress,
        }
    }

    /// Sends the progress messages queued so far.
    pub fn forward_progress(&mut self) -> std::io::Result<()> {
        if let (Some(rx), true) = (self.progress, self.mode != Sideband::None) {
            while let Ok(msg) = rx.try_recv() {
                write_band(self.out, BAND_PROGRESS, &msg, self.mode.max_payload())?;
            }
        }
        Ok(())
    }

    /// The packet header for `payload` bytes of data.
    fn header(payload: usize) -> [u8; 5] {
        let mut head = [0u8; 5];
        head[..4].copy_from_slice(&pkt_line::length_header(payload + 5));
        head[4] = BAND_DATA;
        head
    }

    fn send_buffered(&mut self) -> std::io::Result<()> {
        let payload = self.buf.len() - self.head;
        if payload == 0 {
            return Ok(());
        }
        self.forward_progress()?;
        if self.head > 0 {
            self.buf[..5].copy_from_slice(&Self::header(payload));
        }
        self.out.write_all(&self.buf)?;
        self.buf.truncate(self.head);
        Ok(())
    }

    fn max_payload(&self) -> usize {
        match self.mode {
            Sideband::None => 64 * 1024,
            mode => mode.max_payload(),
        }
    }
}

/// File ranges go out in packets as bytes do, each packet's header written before its piece
/// of the range, when the writer below takes ranges and packets are large (side-band's
/// 1000-byte packets would make a range of every kilobyte).
impl PackSink for SidebandWriter<'_> {
    fn takes_file_ranges(&self) -> bool {
        self.max_payload() >= 32 * 1024 && self.out.takes_file_ranges()
    }

    fn send_file_range(&mut self, range: &FileRange) -> std::io::Result<()> {
        self.send_buffered()?;
        self.forward_progress()?;
        let max = self.max_payload() as u64;
        let mut at = 0;
        while at < range.len {
            let piece = range.sub(at, max);
            if self.head > 0 {
                self.out.write_all(&Self::header(piece.len as usize))?;
            }
            self.out.send_file_range(&piece)?;
            at += piece.len;
        }
        Ok(())
    }
}

impl Write for SidebandWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let max = self.max_payload();
        if self.buf.len() == self.head && data.len() >= max {
            // A whole packet's worth: its header, then the caller's bytes.
            self.forward_progress()?;
            if self.head > 0 {
                self.out.write_all(&Self::header(max))?;
            }
            self.out.write_all(&data[..max])?;
            return Ok(max);
        }
        let room = max - (self.buf.len() - self.head);
        let take = data.len().min(room);
        self.buf.extend_from_slice(&data[..take]);
        if self.buf.len() - self.head >= max {
            self.send_buffered()?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_buffered()?;
        self.forward_progress()?;
        self.out.flush()
    }
}

/// A [`Progress`] that formats git-like progress lines and queues them for band 2,
/// at most one update every 100 ms per stage.
///
/// A stage's `, done.` line takes the form of the lines before it: a percentage when updates
/// with a known total were shown, a bare count when none were (a pack sent whole before its
/// first update, a stage with no total).
pub struct ChannelProgress {
    tx: Option<Sender<Vec<u8>>>,
    stage: Mutex<Stage>,
}

/// The stage a [`ChannelProgress`] reports.
#[derive(Default)]
struct Stage {
    label: String,
    /// 0: not known.
    total: u64,
    /// Whether an update came since the stage started.
    updated: bool,
    /// When the last line went out.
    last: Option<Instant>,
}

/// Least time between two progress lines of one stage.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

impl ChannelProgress {
    /// A sink sending to `tx`; `None` discards everything (`no-progress`).
    pub fn new(tx: Option<Sender<Vec<u8>>>) -> ChannelProgress {
        ChannelProgress {
            tx,
            stage: Mutex::new(Stage::default()),
        }
    }

    fn send(&self, line: String) {
        if let Some(tx) = &self.tx {
            // The receiver gone means the request is over: nothing to report to.
            let _ = tx.send(line.into_bytes());
        }
    }

    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        // A panic elsewhere while holding it leaves nothing half-written worth refusing.
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The text of one progress line (git's layout).
pub fn progress_line(stage: &str, done: u64, total: Option<u64>, finished: bool) -> String {
    let end = if finished { ", done.\n" } else { "\r" };
    match total {
        Some(total) if total > 0 => {
            let percent = (done.min(total) * 100) / total;
            format!("{stage}: {percent:3}% ({done}/{total}){end}")
        }
        _ => format!("{stage}: {done}{end}"),
    }
}

impl Progress for ChannelProgress {
    fn start(&self, stage: &str, total: u64) {
        if self.tx.is_none() {
            return;
        }
        *self.stage() = Stage {
            label: stage.to_string(),
            total,
            updated: false,
            last: None,
        };
    }

    fn update(&self, done: u64) {
        if self.tx.is_none() {
            return;
        }
        let line = {
            let mut stage = self.stage();
            stage.updated = true;
            let now = Instant::now();
            if stage
                .last
                .is_some_and(|t| now.duration_since(t) < PROGRESS_EVERY)
            {
                return;
            }
            stage.last = Some(now);
            progress_line(&stage.label, done, Some(stage.total), false)
        };
        self.send(line);
    }

    fn finish(&self, done: u64) {
        if self.tx.is_none() {
            return;
        }
        let line = {
            let mut stage = self.stage();
            let total = (stage.updated && stage.total > 0).then_some(done);
            let line = progress_line(&stage.label, done, total, true);
            *stage = Stage::default();
            line
        };
        self.send(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_are_split_at_the_limit() {
        let mut out = Vec::new();
        let data = vec![7u8; 2000];
        write_band(&mut out, 1, &data, Sideband::Small.max_payload()).unwrap();
        // 995 + 995 + 10
        assert_eq!(&out[..5], b"03e8\x01");
        assert_eq!(&out[1000..1005], b"03e8\x01");
        assert_eq!(&out[2000..2005], b"000f\x01");
        assert_eq!(out.len(), 2000 + 15);
        assert_eq!(Sideband::Large.max_payload(), 65515);
    }

    #[test]
    fn writer_multiplexes_progress_before_data() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut out = Vec::new();
        {
            let mut w = SidebandWriter::new(&mut out, Sideband::Large, Some(&rx));
            w.write_all(b"PACK").unwrap();
            tx.send(b"Counting\r".to_vec()).unwrap();
            w.write_all(b"more").unwrap();
            w.flush().unwrap();
        }
        assert_eq!(out, b"000e\x02Counting\r000d\x01PACKmore".to_vec());
    }

    /// What a writer that takes file ranges was given: bytes, or ranges as `(offset, len)`.
    #[derive(Default)]
    struct RangeSink {
        pieces: Vec<Result<Vec<u8>, (u64, u64)>>,
    }

    impl Write for RangeSink {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.pieces.push(Ok(data.to_vec()));
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl PackSink for RangeSink {
        fn takes_file_ranges(&self) -> bool {
            true
        }
        fn send_file_range(&mut self, range: &FileRange) -> std::io::Result<()> {
            self.pieces.push(Err((range.offset, range.len)));
            Ok(())
        }
    }

    /// A range goes out in packets of the largest payload, each header written before its
    /// piece, after what was buffered (and progress); small packets take no ranges.
    #[test]
    fn ranges_are_sent_in_packets() {
        let file = FileRange {
            file: std::sync::Arc::new(tempfile::tempfile().unwrap()),
            offset: 100,
            len: 150_000,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let mut out = RangeSink::default();
        {
            let mut w = SidebandWriter::new(&mut out, Sideband::Large, Some(&rx));
            w.write_all(b"PACK").unwrap();
            tx.send(b"Writing\r".to_vec()).unwrap();
            assert!(w.takes_file_ranges());
            w.send_file_range(&file).unwrap();
            w.flush().unwrap();
        }
        let header = |n: usize| Ok(format!("{:04x}\x01", n + 5).into_bytes());
        assert_eq!(
            out.pieces,
            vec![
                Ok(b"000d\x02Writing\r".to_vec()),
                Ok(b"0009\x01PACK".to_vec()),
                header(65515),
                Err((100, 65515)),
                header(65515),
                Err((100 + 65515, 65515)),
                header(18970),
                Err((100 + 131030, 18970)),
            ]
        );
        let mut small = RangeSink::default();
        let w = SidebandWriter::new(&mut small, Sideband::Small, None);
        assert!(!w.takes_file_ranges());
    }

    #[test]
    fn raw_mode_passes_bytes_through() {
        let mut out = Vec::new();
        {
            let mut w = SidebandWriter::new(&mut out, Sideband::None, None);
            w.write_all(b"PACKdata").unwrap();
            w.flush().unwrap();
        }
        assert_eq!(out, b"PACKdata");
    }

    #[test]
    fn progress_lines_look_like_git() {
        assert_eq!(
            progress_line("Counting objects", 45, Some(100), false),
            "Counting objects:  45% (45/100)\r"
        );
        assert_eq!(
            progress_line("Counting objects", 100, Some(100), true),
            "Counting objects: 100% (100/100), done.\n"
        );
        assert_eq!(
            progress_line("Enumerating objects", 7, None, true),
            "Enumerating objects: 7, done.\n"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let p = ChannelProgress::new(Some(tx));
        p.start("Counting objects", 10);
        p.update(1);
        p.update(2); // rate-limited away
        p.finish(10);
        let got: Vec<_> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![
                b"Counting objects:  10% (1/10)\r".to_vec(),
                b"Counting objects: 100% (10/10), done.\n".to_vec()
            ]
        );
    }

    #[test]
    fn a_stage_without_updates_ends_with_a_count() {
        // A pack sent whole before its first update, and a stage with no total: the done
        // line is a count, as the lines before it (none, or counts) were.
        let (tx, rx) = std::sync::mpsc::channel();
        let p = ChannelProgress::new(Some(tx));
        p.start("Writing objects", 123);
        p.finish(123);
        p.start("Counting objects", 0);
        p.update(0);
        p.finish(120);
        let got: Vec<_> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![
                b"Writing objects: 123, done.\n".to_vec(),
                b"Counting objects: 0\r".to_vec(),
                b"Counting objects: 120, done.\n".to_vec()
            ]
        );
    }
}
