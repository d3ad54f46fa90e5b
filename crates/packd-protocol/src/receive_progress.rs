//! What receive-pack tells the client on side-band 2 while a push is served: progress of the
//! long phases, shaped like git's meter, and the hooks' output as it comes.

use crate::hooks::Relay;
use crate::sideband;
use std::io::Write;
use std::time::{Duration, Instant};

/// Messages on side-band 2: progress, shaped like git's progress meter: `stage:  p% (d/t)\r`
/// at most once a second while a stage runs, `stage: 100% (t/t), done.\n` when it ends, and
/// hooks' output ([`Relay`]). Progress is silent when the client did not ask for a side band
/// or asked for `quiet`; hooks' output then goes to stderr without a side band, and to the
/// client with `quiet` (as git's). A failed write (the client hung up) silences both, the
/// report's write then says what went wrong.
pub(crate) struct Progress<'w> {
    /// The client's side band, when it asked for one.
    out: Option<&'w mut dyn Write>,
    side_band: bool,
    quiet: bool,
    /// Keepalives while a hook is silent (`receive.keepAlive`).
    keepalive: Option<Duration>,
    stage: String,
    last: Option<Instant>,
    ended: bool,
}

/// Least time between two progress messages of one stage.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl<'w> Progress<'w> {
    pub(crate) fn new(out: Option<&'w mut dyn Write>, quiet: bool) -> Progress<'w> {
        Progress {
            side_band: out.is_some(),
            out,
            quiet,
            keepalive: None,
            stage: String::new(),
            last: None,
            ended: false,
        }
    }

    /// Sends keepalives every `every` of a hook's silence (git's `receive.keepAlive`, default
    /// 5 s; 0 or less: none).
    pub(crate) fn with_keepalive(mut self, every: Option<Duration>) -> Progress<'w> {
        self.keepalive = every;
        self
    }

    fn send(&mut self, message: &str) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let max = sideband::Sideband::Large.max_payload();
        let sent = sideband::write_band(*out, sideband::BAND_PROGRESS, message.as_bytes(), max)
            .and_then(|()| out.flush());
        if sent.is_err() {
            self.out = None;
        }
    }

    /// `done` of `total` items of `stage` are done (index-pack's progress callback).
    pub(crate) fn update(&mut self, stage: &str, done: u64, total: u64) {
        // The client shows its own "Writing objects" for the transfer, as with git.
        if self.quiet || self.out.is_none() || stage == "Receiving objects" || total == 0 {
            return;
        }
        if stage != self.stage {
            self.stage = stage.to_string();
            self.last = None;
            self.ended = false;
        }
        if self.ended {
            return;
        }
        let done = done.min(total);
        let end = done == total;
        let now = Instant::now();
        if !end
            && self
                .last
                .is_some_and(|t| now.duration_since(t) < PROGRESS_EVERY)
        {
            return;
        }
        self.last = Some(now);
        self.ended = end;
        let percent = done.saturating_mul(100) / total;
        let tail = if end { ", done.\n" } else { "\r" };
        self.send(&format!("{stage}: {percent:3}% ({done}/{total}){tail}"));
    }

    /// A stage without a known total has ended after `count` items.
    pub(crate) fn finished(&mut self, stage: &str, count: u64) {
        if self.quiet {
            return;
        }
        self.send(&format!("{stage}: {count}, done.\n"));
    }
}

impl Relay for Progress<'_> {
    fn keepalive_every(&self) -> Option<Duration> {
        self.keepalive
            .filter(|_| self.side_band && self.out.is_some())
    }

    fn keepalive(&mut self) {
        if let Some(out) = self.out.as_mut() {
            if out
                .write_all(b"0005\x01")
                .and_then(|()| out.flush())
                .is_err()
            {
                self.out = None;
            }
        }
    }

    fn relay(&mut self, bytes: &[u8]) {
        if self.side_band {
            // The bytes as they came, each read its own message: no buffering.
            if let Some(out) = self.out.as_mut() {
                let max = sideband::Sideband::Large.max_payload();
                let sent = sideband::write_band(*out, sideband::BAND_PROGRESS, bytes, max)
                    .and_then(|()| out.flush());
                if sent.is_err() {
                    self.out = None;
                }
            }
        } else {
            crate::hooks::StderrRelay.relay(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bands(out: &[u8]) -> Vec<String> {
        let mut rest = out;
        let mut messages = Vec::new();
        while rest.len() >= 5 {
            let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16).unwrap();
            assert_eq!(rest[4], sideband::BAND_PROGRESS);
            messages.push(String::from_utf8(rest[5..len].to_vec()).unwrap());
            rest = &rest[len..];
        }
        assert!(rest.is_empty());
        messages
    }

    #[test]
    fn progress_like_git() {
        let mut out = Vec::new();
        let mut p = Progress::new(Some(&mut out), false);
        p.update("Receiving objects", 1, 10);
        p.update("Resolving deltas", 0, 10);
        p.update("Resolving deltas", 5, 10); // within a second of the last: skipped
        p.update("Resolving deltas", 10, 10);
        p.update("Resolving deltas", 10, 10); // ended already
        p.finished("Checking connectivity", 10);
        drop(p);
        assert_eq!(
            bands(&out),
            [
                "Resolving deltas:   0% (0/10)\r",
                "Resolving deltas: 100% (10/10), done.\n",
                "Checking connectivity: 10, done.\n",
            ]
        );
        let mut quiet = Progress::new(None, true);
        quiet.update("Resolving deltas", 10, 10);
        quiet.finished("Checking connectivity", 10);
    }
}
