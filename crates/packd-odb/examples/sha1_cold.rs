//! SHA-1 over bytes that are not in the cache, as a pack being sent is hashed: whole, and in
//! pieces with the memory ahead asked for (`packd_odb::prefetch::for_each_piece`), against the
//! same hashing over bytes already in the cache. Figures of `packd_odb::prefetch`'s doc.
//!
//!     cargo run --release -p packd-odb --example sha1_cold [MEGABYTES]

use sha1::{Digest, Sha1};
use std::time::Instant;

fn rate(bytes: usize, started: Instant) -> f64 {
    bytes as f64 / started.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let mb: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(318);
    // Written, so that the pages are real memory (not the shared zero page), and far larger
    // than any cache.
    let buf: Vec<u8> = (0..mb << 20).map(|i| (i * 31 % 251) as u8).collect();
    for round in 1..=3 {
        let started = Instant::now();
        let mut whole = Sha1::new();
        for chunk in buf.chunks(1 << 20) {
            whole.update(chunk);
        }
        let a = whole.finalize();
        let whole_rate = rate(buf.len(), started);

        let started = Instant::now();
        let mut ahead = Sha1::new();
        packd_odb::prefetch::for_each_piece(&buf, |piece| ahead.update(piece));
        let b = ahead.finalize();
        let ahead_rate = rate(buf.len(), started);
        assert_eq!(a, b);

        // 1 MiB hashed again and again: in the cache.
        let started = Instant::now();
        let mut cached = Sha1::new();
        for _ in 0..mb {
            cached.update(&buf[..1 << 20]);
        }
        let _ = cached.finalize();
        let cached_rate = rate(mb << 20, started);
        println!(
            "round {round}: {mb} MB not in the cache {whole_rate:.2} GB/s, with memory asked \
             ahead {ahead_rate:.2} GB/s; in the cache {cached_rate:.2} GB/s"
        );
    }
}
