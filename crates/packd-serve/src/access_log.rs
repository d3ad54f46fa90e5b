//! The access log: one `info` line per request on the [`TARGET`] tracing target, with the
//! remote address, method (or `git` for git://), repository path, service or command, status,
//! bytes sent, objects in the pack, duration, what the request cost the object store when it
//! touched one (`store_gets=.. store_heads=.. store_lists=.. store_puts=.. store_deletes=..
//! store_fetched=.. store_put_bytes=.. store_used=..`: requests and bytes, counted by the
//! request's [`RequestReads`], which every thread serving it enters), and the reason of a
//! refusal or failure. The time
//! of each line is the subscriber's: `packd serve` stamps its log lines with RFC 3339 UTC times
//! (`2026-11-23T11:15:13.485096Z INFO packd_serve::access: remote=...`).

use packd_storage::RequestReads;
use std::net::SocketAddr;
use std::time::Instant;

/// The tracing target of access log lines (`PACKD_LOG=packd_serve::access=info`).
pub const TARGET: &str = "packd_serve::access";

/// One request, filled in as it is served.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Who asked.
    pub remote: SocketAddr,
    /// The HTTP method, or `git` for a git:// request.
    pub method: String,
    /// The repository path as requested (still percent-encoded for HTTP).
    pub repo: String,
    /// The service (`git-upload-pack`) or the protocol command served (`fetch`, `ls-refs`).
    pub service: String,
    /// The HTTP status, or `ok`/`refused`/`failed` for git://.
    pub status: String,
    /// Bytes of response body sent.
    pub bytes: u64,
    /// Objects in the pack sent.
    pub objects: u64,
    /// Why it was refused or failed (empty when it was not).
    pub note: String,
    /// When the request arrived.
    pub start: Instant,
    /// What the request's storage calls cost the store: entered by every thread serving it.
    pub reads: RequestReads,
}

/// `s` with control characters (a client may put any in a URL) shown as escapes.
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// Writes `line` to the log.
pub fn write(line: &LogLine) {
    let ms = format!("{:.1}", line.start.elapsed().as_secs_f64() * 1000.0);
    // An empty note is left out of the line.
    let note = (!line.note.is_empty()).then(|| clean(&line.note));
    // The store's figures only for a request that touched one (a repository in a bucket).
    let store = Some(line.reads.stats()).filter(|s| s.touched_store());
    tracing::info!(
        target: TARGET,
        remote = %line.remote,
        method = %line.method,
        repo = %clean(&line.repo),
        service = %clean(&line.service),
        status = %line.status,
        bytes = line.bytes,
        objects = line.objects,
        ms = %ms,
        store_gets = store.map(|s| s.gets),
        store_heads = store.map(|s| s.heads),
        store_lists = store.map(|s| s.lists),
        store_puts = store.map(|s| s.puts),
        store_deletes = store.map(|s| s.deletes),
        store_fetched = store.map(|s| s.bytes_fetched),
        store_put_bytes = store.map(|s| s.bytes_put),
        store_used = store.map(|s| s.bytes_used),
        note = note.as_ref().map(tracing::field::display),
    );
}
