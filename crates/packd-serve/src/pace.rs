//! How long the server waits for a client that is sending a request: a request must keep up
//! an average of at least `min_request_rate` bytes a second, after an allowance of one idle
//! timeout, and no single wait may last longer than the idle timeout.
//!
//! ```text
//! may still wait = min(idle, idle + received / min_rate - waited so far)
//! ```
//!
//! Only the time the server spends waiting for the client counts (`waited`), not the time it
//! spends on what it already received (receive-pack writing a pack, say), so a fast client of
//! a busy server is never cut off; a client that trickles a byte every few seconds is, after
//! about one idle timeout, whatever the size of its request.

use std::time::Duration;

/// The pace of one request (its head, or its body) as it arrives.
#[derive(Debug, Clone)]
pub struct Pace {
    idle: Duration,
    /// Bytes a second the client must keep up on average; 0: none (each wait is bounded by
    /// the idle timeout only).
    min_rate: u64,
    waited: Duration,
    received: u64,
}

impl Pace {
    /// The pace of a request that has just started, under `idle` and `min_rate` (bytes/s).
    pub fn new(idle: Duration, min_rate: u64) -> Pace {
        Pace {
            idle,
            min_rate,
            waited: Duration::ZERO,
            received: 0,
        }
    }

    /// How long the server may wait for the client's next bytes; zero when the client is
    /// already too slow.
    pub fn next_wait(&self) -> Duration {
        if self.min_rate == 0 {
            return self.idle;
        }
        let earned = Duration::from_secs_f64(self.received as f64 / self.min_rate as f64);
        self.idle
            .saturating_add(earned)
            .saturating_sub(self.waited)
            .min(self.idle)
    }

    /// Records a wait of `waited` that brought `bytes` bytes.
    pub fn record(&mut self, waited: Duration, bytes: usize) {
        self.waited = self.waited.saturating_add(waited);
        self.received = self.received.saturating_add(bytes as u64);
    }

    /// Why the client was cut off, for the log and the error it is sent.
    pub fn too_slow(&self) -> String {
        if self.min_rate == 0 || self.next_wait() == self.idle {
            format!("the client sent nothing for {:?}", self.idle)
        } else {
            format!(
                "the client sent {} bytes in {:.1} s of waiting, slower than the server's \
                 minimum of {} bytes a second",
                self.received,
                self.waited.as_secs_f64(),
                self.min_rate
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickle_runs_out_of_time() {
        let mut pace = Pace::new(Duration::from_secs(60), 1024);
        assert_eq!(pace.next_wait(), Duration::from_secs(60));
        // A byte every 5 s: each wait is well within the idle timeout, yet the allowance
        // goes after about 12 of them.
        let mut waits = 0;
        while pace.next_wait() >= Duration::from_secs(5) {
            pace.record(Duration::from_secs(5), 1);
            waits += 1;
            assert!(waits < 20, "never cut off");
        }
        assert_eq!(waits, 12);
        assert!(
            pace.too_slow().contains("minimum of 1024 bytes"),
            "{}",
            pace.too_slow()
        );
    }

    #[test]
    fn a_steady_client_never_runs_out() {
        let mut pace = Pace::new(Duration::from_secs(10), 1024);
        for _ in 0..10_000 {
            pace.record(Duration::from_millis(100), 200);
            assert_eq!(pace.next_wait(), Duration::from_secs(10));
        }
    }

    #[test]
    fn without_a_rate_only_the_idle_timeout_counts() {
        let mut pace = Pace::new(Duration::from_secs(3), 0);
        pace.record(Duration::from_secs(1000), 1);
        assert_eq!(pace.next_wait(), Duration::from_secs(3));
    }
}
