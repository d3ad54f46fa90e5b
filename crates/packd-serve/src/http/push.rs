//! Pushes over smart HTTP, when the server runs with `--allow-push` (or `--auth-file`):
//!
//! ```text
//! GET  /<repo>/info/refs?service=git-receive-pack
//!      200 application/x-git-receive-pack-advertisement
//!      "001f# service=git-receive-pack\n" "0000" <receive-pack advertisement>
//! POST /<repo>/git-receive-pack   (Content-Type: application/x-git-receive-pack-request)
//!      body: commands, push options, pack    (a lone "0000" is git's probe: empty answer)
//!      200 application/x-git-receive-pack-result   side-band progress, report-status
//! ```
//!
//! The body is streamed: receive-pack runs on a blocking thread and reads the request body as
//! it arrives ([`BodyReader`] pulls hyper's frames at the pace `crate::pace` sets; gzip is
//! inflated on the way), so memory stays bounded whatever the size of the pack. The commands
//! and push options before the pack are read first and bounded by `max_request_bytes` (413
//! beyond); the pack may be as large as `max_push_bytes`, beyond which index-pack stops and git
//! is told why in the `unpack` report. The rest of a refused body is read and discarded (at
//! most `max_push_bytes`, or 64 MiB, more) so that git, still sending, gets to read that
//! report.
//!
//! A client that hangs up mid-body makes the next read fail: receive-pack then fails like any
//! bad pack, its quarantine is removed and no ref moves.
//!
//! The response starts with receive-pack's first output (its progress, or the report) and is
//! streamed from then on through the same bounded channel as upload-pack's; a push that fails
//! before it wrote anything gets a plain-text error status instead. The access log line is
//! written by the push's thread when it is done.

use super::body::{BodyReader, Input};
use super::{full, no_cache, streamed, text, Body, ChannelBody, ChannelWriter, Lookup};
use crate::access_log::{self, LogLine};
use crate::conn::BusyGuard;
use crate::create::PushTarget;
use crate::paths::PathError;
use crate::push_head::{read_head, HeadError, MAX_PUSH_HEAD_BYTES};
use crate::Shared;

/// Batches of receive-pack's reply (flushed progress lines, then the report) queued for the
/// socket.
const QUEUED_REPLIES: usize = 16;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode};
use packd_odb::pack::data::input::InputLimits;
use packd_protocol::{ReceivePack, ReceivePackOptions};
use packd_storage::RequestReads;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::sync::mpsc;

const ADVERTISEMENT: &str = "application/x-git-receive-pack-advertisement";
const REQUEST: &str = "application/x-git-receive-pack-request";
const RESULT: &str = "application/x-git-receive-pack-result";
/// Of a refused push, at least this much more is read (and dropped) so that git gets to read
/// the refusal; then at most `max_push_bytes` more.
const DRAIN_AT_LEAST: u64 = 64 << 20;

/// Runs `work` on a blocking thread in the request's store scope (`reads`); an internal error
/// becomes a 500.
async fn blocking(
    reads: &RequestReads,
    work: impl FnOnce() -> Response<Body> + Send + 'static,
) -> Response<Body> {
    match super::spawn_blocking_in(reads, work).await {
        Ok(resp) => resp,
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        ),
    }
}

/// The repository a push to the raw path `repo` goes to: `Some` when there is one, `None`
/// when a push may create it (`--create-on-push`; nothing is made here), else why not (404,
/// or 403 for a path where no repository may be made).
fn push_destination(shared: &Shared, repo: &str) -> Result<Option<PathBuf>, PathError> {
    crate::paths::percent_decode(repo).and_then(|decoded| {
        shared
            .root
            .push_destination(&decoded, shared.create_on_push)
    })
}

/// `GET <repo>/info/refs?service=git-receive-pack`. A repository a push would create is
/// advertised as an empty one, and not made: only the push itself makes it.
pub(super) async fn info_refs(
    shared: &Arc<Shared>,
    repo: &str,
    reads: &RequestReads,
) -> Response<Body> {
    let shared = shared.clone();
    let repo = repo.to_string();
    blocking(reads, move || {
        let git_dir = match push_destination(&shared, &repo) {
            Ok(git_dir) => git_dir,
            Err(e) => return Lookup::Path(e).response(),
        };
        let mut out = b"001f# service=git-receive-pack\n0000".to_vec();
        let advertised = match &git_dir {
            Some(git_dir) => {
                let options = ReceivePackOptions {
                    store: shared.root.push_store(git_dir),
                    ..ReceivePackOptions::default()
                };
                ReceivePack::new(git_dir, options).advertise(&mut out)
            }
            None => ReceivePack::advertise_empty(&mut out),
        };
        match advertised {
            Ok(()) => {
                let mut resp = full(StatusCode::OK, ADVERTISEMENT, out);
                no_cache(&mut resp);
                resp
            }
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                packd_protocol::told_to_client(
                    e.to_string(),
                    &[git_dir.as_deref().unwrap_or(shared.root.path())],
                ),
            ),
        }
    })
    .await
}

/// `POST <repo>/git-receive-pack`: on success the response, streamed from receive-pack's thread
/// (which writes the log line); otherwise the error response and the log line to write.
pub(super) async fn receive_pack(
    shared: &Arc<Shared>,
    repo: &str,
    req: Request<Incoming>,
    mut log: LogLine,
    guard: BusyGuard,
) -> Result<Response<Body>, (Response<Body>, LogLine)> {
    let head_limit = shared.limits.max_request_bytes.min(MAX_PUSH_HEAD_BYTES);
    let pack_limit = shared.limits.max_push_bytes;
    let gzip = match super::request_encoding(&req, REQUEST) {
        Ok(gzip) => gzip,
        Err(why) => return Err((text(StatusCode::UNSUPPORTED_MEDIA_TYPE, why), log)),
    };
    // Raw bytes: the two parts' limits, plus room for what gzip adds.
    let body_limit = head_limit
        .saturating_add(pack_limit)
        .saturating_add(pack_limit / 64)
        .saturating_add(1 << 20);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > body_limit) {
        let why = format!(
            "push larger than the server's limits ({head_limit} bytes of commands, \
             {pack_limit} bytes of pack)"
        );
        return Err((text(StatusCode::PAYLOAD_TOO_LARGE, why), log));
    }
    // Refused early (404, 403) before the body is read; the repository is found (or made)
    // again once the commands arrived.
    let checked = {
        let shared = shared.clone();
        let repo = repo.to_string();
        super::spawn_blocking_in(&log.reads, move || {
            push_destination(&shared, &repo).map(|_| ())
        })
        .await
    };
    match checked {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err((Lookup::Path(e).response(), log)),
        Err(e) => {
            let resp = text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            );
            return Err((resp, log));
        }
    }
    let shared = shared.clone();
    let repo = repo.to_string();

    let (tx, mut rx) = mpsc::channel(QUEUED_REPLIES);
    let idle = shared.limits.idle_timeout;
    let min_rate = shared.limits.min_request_rate;
    let cut = shared.stopping.cut_signal();
    let handle = tokio::runtime::Handle::current();
    let body = req.into_body();
    let hooks = shared.hooks.clone();
    let work = tokio::task::spawn_blocking(move || {
        // What receive-pack asks of a store, on this thread and those it hands work to.
        let _in = log.reads.enter();
        let pace = crate::pace::Pace::new(idle, min_rate);
        let raw = BodyReader::new(body, handle.clone(), pace, body_limit, cut.clone());
        let mut input = Input::new(raw, gzip);
        let head = match read_head(&mut input, head_limit) {
            Ok(head) => head,
            Err(HeadError::TooLarge(limit)) => {
                let why = format!(
                    "push commands and options larger than the server's limit of {limit} bytes"
                );
                return Some(super::finish(text(StatusCode::PAYLOAD_TOO_LARGE, why), log));
            }
            Err(HeadError::Io(e)) => {
                let status = if e.kind() == std::io::ErrorKind::TimedOut {
                    StatusCode::REQUEST_TIMEOUT
                } else {
                    StatusCode::BAD_REQUEST
                };
                return Some(super::finish(text(status, e.to_string()), log));
            }
        };
        // git's probe (a lone flush) and an empty body carry no commands: receive-pack answers
        // them without a repository, and none is made for them.
        let target = if head.is_empty() || head == b"0000" {
            None
        } else {
            let found = crate::paths::percent_decode(&repo).and_then(|decoded| {
                shared
                    .creations
                    .push_target(&shared.root, &decoded, shared.create_on_push)
            });
            match found {
                Ok(target) => Some(target),
                Err(e) => return Some(super::finish(Lookup::Path(e).response(), log)),
            }
        };
        let git_dir = target.as_ref().map_or_else(
            || shared.root.path().to_path_buf(),
            |t| t.git_dir().to_path_buf(),
        );
        let options = ReceivePackOptions {
            limits: InputLimits {
                max_bytes: pack_limit,
                ..InputLimits::default()
            },
            hooks,
            store: target
                .as_ref()
                .and_then(|_| shared.root.push_store(&git_dir)),
            ..ReceivePackOptions::default()
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let mut writer = ChannelWriter::new(tx, handle, idle, cancel, false, cut);
        let (result, replayed) =
            serve_into(target, &git_dir, options, &head, &mut input, &mut writer);
        // A push refused before its pack ended: take (and drop) what the client still sends,
        // so that it reads the report instead of a broken connection.
        let raw = input.raw();
        let mut note = match raw.failed.clone() {
            Some((std::io::ErrorKind::InvalidData, why)) => Some(why),
            Some((_, why)) => Some(format!("client gone: {why}")),
            None if result.is_ok() && !raw.drain(pack_limit.max(DRAIN_AT_LEAST)) => {
                Some("the client was still sending after the push was refused".to_string())
            }
            None => None,
        };
        let flushed = replayed.and_then(|()| writer.flush());
        if let Err(e) = &flushed {
            note.get_or_insert_with(|| format!("client gone: {e}"));
        }
        if writer.sent == 0 && flushed.is_ok() {
            // Nothing written: git's probe (a lone flush), or a request receive-pack refused.
            let resp = match &result {
                Ok(_) => {
                    let mut resp = full(StatusCode::OK, RESULT, Vec::new());
                    no_cache(&mut resp);
                    resp
                }
                Err(e) => text(
                    StatusCode::BAD_REQUEST,
                    packd_protocol::told_to_client(format!("receive-pack: {e}"), &[&git_dir]),
                ),
            };
            return Some(super::finish(resp, log));
        }
        log.status = if writer.sent > 0 { "200" } else { "000" }.into();
        log.bytes = writer.sent;
        match &result {
            Ok(stats) => {
                log.objects = stats.objects;
                shared.pushed(&git_dir, stats);
                if let Some(e) = &stats.unpack_error {
                    tracing::info!("{}: push refused: {e}", git_dir.display());
                    log.note = format!("push refused: {e}");
                }
            }
            Err(e) => log.note = format!("receive-pack failed: {e}"),
        }
        if let Some(note) = note {
            log.note = if log.note.is_empty() {
                note
            } else {
                format!("{}; {note}", log.note)
            };
        }
        access_log::write(&log);
        crate::memory::release_after(log.objects);
        None
        // Dropping the writer (and its sender) ends the response body.
    });

    // The response starts with receive-pack's first output; until then the push may still
    // fail with an error status.
    let Some(first) = rx.recv().await else {
        return Ok(match work.await {
            Ok(Some(resp)) => resp,
            Ok(None) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the push's answer was lost",
            ),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            ),
        });
    };
    let stream = ChannelBody {
        pending: first.into(),
        rx,
        // receive-pack stops on its own when the client goes: nothing to cancel.
        cancel: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        files: None,
        _guard: guard,
    };
    Ok(streamed(stream.boxed(), RESULT))
}

/// Runs receive-pack into `target` (at `git_dir`; `None`: a request without commands) on
/// `head` and the rest of `input`, answering into `writer`. The output of a push that created
/// its repository is held until the repository was kept or removed (when the push took no
/// ref), so that a client told its push failed finds nothing left; then it goes out (the
/// second result: whether that write worked).
fn serve_into(
    target: Option<PushTarget>,
    git_dir: &std::path::Path,
    options: ReceivePackOptions,
    head: &[u8],
    input: &mut dyn Read,
    writer: &mut dyn Write,
) -> (
    Result<packd_protocol::PushStats, packd_protocol::ProtocolError>,
    std::io::Result<()>,
) {
    let created = target.as_ref().is_some_and(PushTarget::is_created);
    let mut held = Vec::new();
    let result = {
        let mut stream = Read::chain(head, input);
        let out: &mut dyn Write = if created { &mut held } else { writer };
        ReceivePack::new(git_dir, options).serve(&mut stream, out)
    };
    drop(target);
    let replayed = if created {
        writer.write_all(&held)
    } else {
        Ok(())
    };
    (result, replayed)
}
