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
use packd_pack::{FetchRequest, PackPlan};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How the pack is to be sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendOptions {
    /// Side-band mode.
    pub sideband: Sideband,
    /// Whether to send progress (the server allows it and the client did not say no-progress).
    pub progress: bool,
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
        let tx = (send.progress && muxed).then_some(tx);
        let keepalive = self.options.keepalive.max(Duration::from_millis(100));
        let packs = &self.packs;
        let stop_ref = &stop;
        std::thread::scope(|scope| {
            let counting = scope.spawn(move || {
                let mut progress = ChannelProgress::new(tx);
                packs.plan(request, &mut progress, stop_ref)
            });
            let mut failure: Option<std::io::Error> = None;
            let mut last_sent = Instant::now();
            loop {
                let finished = counting.is_finished();
                // Forward whatever progress is queued.
                while let Ok(msg) = rx.try_recv() {
                    if failure.is_none() {
                        let r = sideband::write_band(
                            out,
                            sideband::BAND_PROGRESS,
                            &msg,
                            send.sideband.max_payload(),
                        )
                        .and_then(|_| out.flush());
                        match r {
                            Ok(()) => last_sent = Instant::now(),
                            Err(e) => {
                                failure = Some(e);
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                }
                if finished {
                    break;
                }
                if cancel.load(Ordering::Relaxed) {
                    stop.store(true, Ordering::Relaxed);
                }
                if muxed && failure.is_none() && last_sent.elapsed() >= keepalive {
                    match out.write_all(sideband::KEEPALIVE).and_then(|_| out.flush()) {
                        Ok(()) => last_sent = Instant::now(),
                        Err(e) => {
                            failure = Some(e);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(msg) => {
                        if failure.is_none() {
                            let r = sideband::write_band(
                                out,
                                sideband::BAND_PROGRESS,
                                &msg,
                                send.sideband.max_payload(),
                            )
                            .and_then(|_| out.flush());
                            match r {
                                Ok(()) => last_sent = Instant::now(),
                                Err(e) => {
                                    failure = Some(e);
                                    stop.store(true, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    Err(_) => continue,
                }
            }
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
        out: &mut dyn Write,
        cancel: &AtomicBool,
    ) -> Result<u64, ProtocolError> {
        let plan = self.plan_with_keepalive(request, send, out, cancel)?;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let muxed = send.sideband != Sideband::None;
        let mut progress = ChannelProgress::new((send.progress && muxed).then_some(tx));
        let stats = {
            let mut writer = SidebandWriter::new(out, send.sideband, Some(&rx));
            let stats = self.packs.write(plan, &mut writer, &mut progress, cancel)?;
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
