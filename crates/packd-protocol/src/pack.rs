//! Counting and sending the pack: counting runs on a helper thread while this one forwards
//! progress and keepalives; writing streams the pack through side-band.
//!
//! ```text
//! counting:  [band 2 "Enumerating objects: ...\r"] [keepalive "0005\x01" every options.keepalive]
//! writing:   band 1 "PACK" <version> <count> <entries...> <trailer>, band 2 progress between
//! end:       "0000" (side-band only; a raw pack just ends)
//! failure:   band 3 "<message>" (side-band), else an "ERR <message>" packet
//! ```

use crate::sideband::{self, ChannelProgress, Sideband, SidebandWriter};
use crate::{ProtocolError, UploadPack};
use packd_pack::{FetchRequest, PackPlan, PackSink};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// How the pack is to be sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendOptions {
    /// Side-band mode.
    pub sideband: Sideband,
    /// Whether to send progress (the server allows it and the client did not say no-progress).
    pub progress: bool,
}

/// The connection while counting: progress and keepalives go out; the first failure stops
/// counting and is kept.
struct Link<'a> {
    out: &'a mut dyn Write,
    max: usize,
    failure: Option<std::io::Error>,
    last_sent: Instant,
    stop: &'a AtomicBool,
}

impl Link<'_> {
    /// Sends `bytes` as progress (`band`) or as they are.
    fn send(&mut self, bytes: &[u8], band: bool) {
        if self.failure.is_some() {
            return;
        }
        let written = if band {
            sideband::write_band(self.out, sideband::BAND_PROGRESS, bytes, self.max)
        } else {
            self.out.write_all(bytes)
        };
        match written.and_then(|()| self.out.flush()) {
            Ok(()) => self.last_sent = Instant::now(),
            Err(e) => {
                self.failure = Some(e);
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

impl UploadPack {
    /// Counts the objects for `request` while keeping the client informed (progress, keepalives).
    fn plan_with_keepalive(
        &self,
        request: &FetchRequest,
        send: SendOptions,
        out: &mut dyn Write,
        cancel: &AtomicBool,
    ) -> Result<PackPlan, ProtocolError> {
        let stop = AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let muxed = send.sideband != Sideband::None;
        let progress_on = send.progress && muxed;
        let keepalive = self.options.keepalive.max(Duration::from_millis(100));
        let packs = &self.packs;
        let stop_ref = &stop;
        // Counting reads for the request this thread serves: in its store scope.
        let reads = packd_storage::RequestReads::current();
        std::thread::scope(|scope| {
            // The thread owns the only sender: the channel closes when counting ends.
            let counting = scope.spawn(move || {
                let _in = reads.as_ref().map(packd_storage::RequestReads::enter);
                let progress = ChannelProgress::new(progress_on.then(|| tx.clone()));
                let planned = packs.plan(request, &progress, stop_ref);
                drop(tx);
                planned
            });
            let mut link = Link {
                out: &mut *out,
                max: send.sideband.max_payload(),
                failure: None,
                last_sent: Instant::now(),
                stop: &stop,
            };
            loop {
                // Wake for the next keepalive, and often enough to notice a cancel.
                let mut wait = Duration::from_millis(200);
                if muxed {
                    wait = wait.min(keepalive.saturating_sub(link.last_sent.elapsed()));
                }
                match rx.recv_timeout(wait) {
                    Ok(msg) => link.send(&msg, true),
                    Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) => {
                        if muxed && link.last_sent.elapsed() >= keepalive {
                            link.send(sideband::KEEPALIVE, false);
                        }
                    }
                }
                if cancel.load(Ordering::Relaxed) {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            let failure = link.failure;
            let planned = match counting.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            if let Some(e) = failure {
                return Err(ProtocolError::Io(e));
            }
            Ok(planned?)
        })
    }

    /// Counts and sends the pack for `request` (after the caller wrote whatever precedes it:
    /// v0's final ACK/NAK, v2's `packfile` line). Returns the number of objects sent.
    pub(crate) fn send_pack(
        &self,
        request: &FetchRequest,
        send: SendOptions,
        out: &mut dyn PackSink,
        cancel: &AtomicBool,
    ) -> Result<u64, ProtocolError> {
        let plan = self.plan_with_keepalive(request, send, out, cancel)?;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let muxed = send.sideband != Sideband::None;
        let progress = ChannelProgress::new((send.progress && muxed).then_some(tx));
        let stats = {
            let mut writer = SidebandWriter::new(out, send.sideband, Some(&rx));
            let stats = self.packs.write(plan, &mut writer, &progress, cancel)?;
            writer.flush()?;
            stats
        };
        drop(progress);
        if muxed {
            while let Ok(msg) = rx.try_recv() {
                sideband::write_band(
                    out,
                    sideband::BAND_PROGRESS,
                    &msg,
                    send.sideband.max_payload(),
                )?;
            }
            crate::pkt_line::write_flush(out)?;
        }
        out.flush()?;
        Ok(u64::from(stats.objects))
    }
}
