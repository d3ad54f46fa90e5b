//! A [`packd_test_s3::DelayProxy`] as a process, for benchmarks run from a shell:
//! `delay_proxy UPSTREAM_PORT ROUND_TRIP_MS [BYTES_PER_SECOND]` prints the proxy's URL on
//! stdout and relays until it is killed.

use std::io::Write;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: delay_proxy UPSTREAM_PORT ROUND_TRIP_MS [BYTES_PER_SECOND]";
    let (Some(port), Some(ms)) = (
        args.get(1).and_then(|a| a.parse::<u16>().ok()),
        args.get(2).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let rate = args.get(3).and_then(|a| a.parse::<u64>().ok());
    let proxy = packd_test_s3::DelayProxy::start(port, Duration::from_millis(ms), rate);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", proxy.endpoint());
    let _ = out.flush();
    drop(out);
    loop {
        std::thread::park();
    }
}
