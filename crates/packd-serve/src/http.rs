//! git's smart HTTP protocol (`gitprotocol-http`) over hyper: the ref advertisement at
//! `GET /<repo>/info/refs?service=git-upload-pack` and one upload-pack request per
//! `POST /<repo>/git-upload-pack`, the response streamed as the pack is written.
//!
//! The request body streams into upload-pack, which runs on a blocking thread (`body`: inflated
//! as it arrives, bounded by `max_request_bytes` before and after gzip, at the request pace);
//! only its first 256 KiB are read before upload-pack starts, for their wants
//! ([`crate::wants`]). upload-pack writes into `ChannelWriter`: batches of 64 KiB
//! chunks (or of file ranges) go through a bounded channel into the response body, so memory
//! stays bounded and a client that hangs up (or stops reading for the idle timeout) makes the
//! next write fail and sets the cancel flag. Dumb HTTP is refused with 403 and a plain-text reason, and so are pushes
//! unless they are allowed; an allowed push streams its body into receive-pack (`push`).
//!
//! With `--auth-file` ([`crate::auth`]) every request first passes `gate`: without valid
//! basic-auth credentials, or without a read right on the repository, the answer is 401 with
//! `WWW-Authenticate: Basic realm="packd"` (git then asks for, or retries with, credentials);
//! a user who may read but not write gets 403 for a push. Pushes are open to users with a write
//! right, `--allow-push` or not.

mod body;
mod push;

use crate::access_log::{self, LogLine};
use crate::auth::{self, Right};
use crate::conn::{Activity, BusyGuard, IdleIo};
use crate::credentials;
use crate::paths::PathError;
use crate::sendfile::{FileQueue, FileRangeIo, PLACEHOLDER_LEN};
use crate::Shared;
use body::{BodyReader, Capped, Input};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use packd_pack::{FileRange, PackSink};
use packd_protocol::{Mode, ProtocolVersion, UploadPack};
use packd_storage::RequestReads;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The response body type: a whole buffer or a stream from upload-pack.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// Size of the chunks upload-pack's output is buffered in.
const CHUNK: usize = 64 * 1024;
/// Bytes of chunks handed to the connection's task at once. Each hand-over wakes the task and
/// starts an idle timer: batching them took a clone that writes a new pack (git/git, every
/// branch and tag, 318 MB) from a mean of 0.56 s of CPU to 0.54 s (3 alternating rounds of 4
/// clones per build).
const BYTES_PER_BATCH: usize = 4 * CHUNK;
/// Batches queued between upload-pack and the socket. A connection holds at most about 1 MiB
/// of bytes (file ranges hold none): these, the batch hyper is writing, the one waiting to be
/// queued and the chunk being filled. A client must take a batch within the idle timeout
/// (256 KiB in 60 s by default, 4.4 KB/s), or the response ends.
const QUEUED_BATCHES: usize = 2;
/// The start of an upload-pack request body read before upload-pack runs, whose wants are
/// looked for in the repository (see [`crate::wants`]); the rest streams to upload-pack as it
/// arrives. 256 KiB holds about 5,000 want lines.
const WANTS_PREFIX: u64 = 256 * 1024;

const ADVERTISEMENT: &str = "application/x-git-upload-pack-advertisement";
const REQUEST: &str = "application/x-git-upload-pack-request";
const RESULT: &str = "application/x-git-upload-pack-result";

/// Body of the 403 for dumb HTTP requests.
pub const DUMB_REFUSED: &str = "packd serves git's smart HTTP protocol only; dumb HTTP \
     (plain file downloads of refs and objects) is not supported\n";
/// Body of the 403 for pushes.
pub const PUSH_REFUSED: &str = "pushing is not enabled on this server\n";

/// What a request URL asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    /// `<repo>/info/refs` (the service is in the query).
    InfoRefs(&'a str),
    /// `<repo>/git-upload-pack`.
    UploadPack(&'a str),
    /// `<repo>/git-receive-pack`.
    ReceivePack(&'a str),
    /// A file a dumb HTTP client would download.
    Dumb,
    /// Nothing git asks for.
    Unknown,
}

fn route(path: &str) -> Route<'_> {
    if let Some(repo) = path.strip_suffix("/info/refs") {
        return Route::InfoRefs(repo);
    }
    if let Some(repo) = path.strip_suffix("/git-upload-pack") {
        return Route::UploadPack(repo);
    }
    if let Some(repo) = path.strip_suffix("/git-receive-pack") {
        return Route::ReceivePack(repo);
    }
    let dumb_suffixes = [
        "/HEAD",
        "/info/packs",
        "/info/alternates",
        "/info/http-alternates",
        "/objects/info/packs",
    ];
    if dumb_suffixes.iter().any(|s| path.ends_with(s)) || path.contains("/objects/") {
        return Route::Dumb;
    }
    Route::Unknown
}

/// The value of `name` in a URL query (`a=b&c=d`), undecoded.
fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let body: Bytes = body.into();
    let mut resp = Response::new(
        Full::new(body)
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut message = message.into();
    if !message.ends_with('\n') {
        message.push('\n');
    }
    let note = Note(message.trim_end().to_string());
    let mut resp = full(status, "text/plain; charset=utf-8", message);
    resp.extensions_mut().insert(note);
    resp
}

/// The message of a plain-text answer, kept on the response for the access log.
#[derive(Debug, Clone)]
struct Note(String);

/// Checks a POST's Content-Type against `expected`; answers whether its body is gzipped, or
/// why it is refused (with 415).
fn request_encoding(req: &Request<Incoming>, expected: &str) -> Result<bool, String> {
    if header_str(req, header::CONTENT_TYPE) != expected {
        return Err(format!("expected Content-Type: {expected}"));
    }
    match req
        .headers()
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?"))
    {
        None | Some("identity") => Ok(false),
        Some("gzip") | Some("x-gzip") => Ok(true),
        Some(other) => Err(format!(
            "unsupported Content-Encoding '{}'",
            other.escape_debug()
        )),
    }
}

/// A 200 response whose body streams from a worker thread, typed `content_type`, never cached.
fn streamed(body: Body, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut()
        .insert(header::SERVER, HeaderValue::from_static("packd"));
    no_cache(&mut resp);
    resp
}

fn no_cache(resp: &mut Response<Body>) {
    let h = resp.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, max-age=0, must-revalidate"),
    );
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    h.insert(
        header::EXPIRES,
        HeaderValue::from_static("Fri, 01 Jan 1980 00:00:00 GMT"),
    );
}

/// What a failed lookup of a repository becomes.
enum Lookup {
    Path(PathError),
    Open(String),
}

impl Lookup {
    fn response(&self) -> Response<Body> {
        match self {
            Lookup::Path(e @ PathError::Forbidden(_)) => text(StatusCode::FORBIDDEN, e.to_string()),
            Lookup::Path(e @ PathError::NotFound(_)) => text(StatusCode::NOT_FOUND, e.to_string()),
            Lookup::Open(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot open the repository: {e}"),
            ),
        }
    }
}

/// [`tokio::task::spawn_blocking`] with the request's store scope (`reads`) current on the
/// blocking thread, so that what `work` asks of a store counts toward the request's log line.
pub(crate) fn spawn_blocking_in<R: Send + 'static>(
    reads: &RequestReads,
    work: impl FnOnce() -> R + Send + 'static,
) -> tokio::task::JoinHandle<R> {
    let reads = reads.clone();
    tokio::task::spawn_blocking(move || reads.in_scope(work))
}

/// Resolves the raw repository path and opens (or finds cached) its upload-pack, off the
/// async threads (in the request's store scope, `reads`).
async fn lookup(
    shared: &Arc<Shared>,
    raw: &str,
    reads: &RequestReads,
) -> Result<(PathBuf, Arc<UploadPack>), Lookup> {
    let shared = shared.clone();
    let raw = raw.to_string();
    let joined = spawn_blocking_in(reads, move || {
        let git_dir = shared.root.resolve_raw(&raw).map_err(Lookup::Path)?;
        let upload = shared.cache.get(&git_dir).map_err(|e| {
            tracing::warn!("{}: cannot open the repository: {e}", git_dir.display());
            Lookup::Open(packd_protocol::told_to_client(e.to_string(), &[&git_dir]))
        })?;
        Ok((git_dir, upload))
    })
    .await;
    match joined {
        Ok(r) => r,
        Err(e) => Err(Lookup::Open(format!("internal error: {e}"))),
    }
}

/// Serves one HTTP connection until it closes, the client is idle for `idle_timeout`, or it
/// fails.
pub async fn serve_connection(
    shared: Arc<Shared>,
    stream: tokio::net::TcpStream,
    remote: SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let files = Arc::new(FileQueue::default());
    let socket = FileRangeIo::new(stream, files.clone());
    let io = hyper_util::rt::TokioIo::new(IdleIo::new(socket, activity.clone()));
    let idle = shared.limits.idle_timeout;
    let stopping = shared.clone();
    let stopping = &stopping.stopping;
    let svc_activity = activity.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let guard = BusyGuard::new(svc_activity.clone());
        let files = files.clone();
        async move { Ok::<_, Infallible>(handle(shared, remote, req, guard, files).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Vectored writes: hyper queues the body's pieces instead of copying them into its buffer,
    // which file ranges' stand-ins rely on (see `crate::sendfile`).
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(idle)
        .max_buf_size(256 * 1024)
        .writev(true)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut graceful = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("{remote}: connection ended: {e}");
                }
                return;
            }
            _ = activity.idle_expired(idle) => {
                tracing::debug!("{remote}: idle for {idle:?}, closing");
                return;
            }
            // The server is stopping: the request in flight, if any, is answered, then the
            // connection closes.
            _ = stopping.stopped(), if !graceful => {
                graceful = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Answers one request (and writes its access log line, now or when its stream ends).
async fn handle(
    shared: Arc<Shared>,
    remote: SocketAddr,
    req: Request<Incoming>,
    guard: BusyGuard,
    files: Arc<FileQueue>,
) -> Response<Body> {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut log = LogLine {
        remote,
        method: method.to_string(),
        repo: path.clone(),
        service: String::new(),
        status: String::new(),
        bytes: 0,
        objects: 0,
        note: String::new(),
        start,
        reads: RequestReads::new(),
    };
    let push_allowed = shared.allow_push || shared.auth.is_some();
    if let Some(refused) = gate(&shared, remote, &req, &route(&path), &log.reads).await {
        match route(&path) {
            Route::InfoRefs(repo) => {
                log.repo = repo.to_string();
                log.service = query_param(req.uri().query(), "service")
                    .unwrap_or("")
                    .to_string();
            }
            Route::UploadPack(repo) => {
                log.repo = repo.to_string();
                log.service = "git-upload-pack".into();
            }
            Route::ReceivePack(repo) => {
                log.repo = repo.to_string();
                log.service = "git-receive-pack".into();
            }
            Route::Dumb | Route::Unknown => {}
        }
        return finish(refused, log);
    }
    let resp = match route(&path) {
        Route::InfoRefs(repo) => {
            log.repo = repo.to_string();
            let service = query_param(req.uri().query(), "service").unwrap_or("");
            log.service = service.to_string();
            if method != Method::GET && method != Method::HEAD {
                text(StatusCode::METHOD_NOT_ALLOWED, "use GET for info/refs")
            } else {
                match service {
                    "" => text(StatusCode::FORBIDDEN, DUMB_REFUSED),
                    "git-upload-pack" => info_refs(&shared, repo, &req, &log.reads).await,
                    "git-receive-pack" if push_allowed => {
                        push::info_refs(&shared, repo, &log.reads).await
                    }
                    "git-receive-pack" => match lookup(&shared, repo, &log.reads).await {
                        Err(e) => e.response(),
                        Ok(_) => text(StatusCode::FORBIDDEN, PUSH_REFUSED),
                    },
                    other => text(
                        StatusCode::FORBIDDEN,
                        format!("unknown service '{}'", other.escape_debug()),
                    ),
                }
            }
        }
        Route::ReceivePack(repo) => {
            log.repo = repo.to_string();
            log.service = "git-receive-pack".into();
            if !push_allowed {
                match lookup(&shared, repo, &log.reads).await {
                    Err(e) => e.response(),
                    Ok(_) => text(StatusCode::FORBIDDEN, PUSH_REFUSED),
                }
            } else if method != Method::POST {
                text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "use POST for git-receive-pack",
                )
            } else {
                let repo = repo.to_string();
                match push::receive_pack(&shared, &repo, req, log, guard).await {
                    // receive-pack's thread writes the log line when the push is done.
                    Ok(resp) => return resp,
                    Err((resp, l)) => {
                        log = l;
                        resp
                    }
                }
            }
        }
        Route::UploadPack(repo) => {
            log.repo = repo.to_string();
            log.service = "git-upload-pack".into();
            let repo = repo.to_string();
            if method != Method::POST {
                text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "use POST for git-upload-pack",
                )
            } else {
                match upload_pack(&shared, &repo, req, log, guard, files).await {
                    // The stream's task writes the log line when upload-pack is done.
                    Ok(resp) => return resp,
                    Err((resp, l)) => {
                        log = l;
                        resp
                    }
                }
            }
        }
        Route::Dumb => text(StatusCode::FORBIDDEN, DUMB_REFUSED),
        Route::Unknown => text(
            StatusCode::NOT_FOUND,
            "not a git URL: packd serves /<repository>/info/refs and /<repository>/git-upload-pack",
        ),
    };
    finish(resp, log)
}

/// Stamps a whole (not streamed) response and writes its access log line.
fn finish(mut resp: Response<Body>, mut log: LogLine) -> Response<Body> {
    resp.headers_mut()
        .insert(header::SERVER, HeaderValue::from_static("packd"));
    log.status = resp.status().as_u16().to_string();
    log.bytes = http_body::Body::size_hint(resp.body()).exact().unwrap_or(0);
    if !resp.status().is_success() {
        if let Some(Note(note)) = resp.extensions().get::<Note>() {
            log.note = note.clone();
        }
    }
    access_log::write(&log);
    resp
}

/// Body of the 401 answers: the same whatever was wrong.
const AUTH_REQUIRED: &str = "authentication required\n";

/// A 401 asking for basic auth; `note` (for the log only) says why.
fn unauthorized(note: String) -> Response<Body> {
    let mut resp = text(StatusCode::UNAUTHORIZED, AUTH_REQUIRED);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"packd\""),
    );
    resp.extensions_mut().insert(Note(note));
    resp
}

/// The 429 of a client address that failed authentication too often lately (see
/// [`crate::credentials`]): git shows it and keeps the user's stored credential.
fn throttled() -> Response<Body> {
    let mut resp = text(
        StatusCode::TOO_MANY_REQUESTS,
        "too many failed authentications from your address; try again later",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
    resp
}

/// With `--auth-file`: the refusal of a request whose credentials are missing or wrong, or
/// whose user lacks the right it needs on the repository; `None` lets it through (and always
/// does without `--auth-file`).
async fn gate(
    shared: &Arc<Shared>,
    remote: SocketAddr,
    req: &Request<Incoming>,
    route: &Route<'_>,
    reads: &RequestReads,
) -> Option<Response<Body>> {
    let users = shared.auth.clone()?;
    let (repo, right) = match route {
        Route::InfoRefs(repo) => {
            let push = query_param(req.uri().query(), "service") == Some("git-receive-pack");
            (Some(*repo), if push { Right::Write } else { Right::Read })
        }
        Route::UploadPack(repo) => (Some(*repo), Right::Read),
        Route::ReceivePack(repo) => (Some(*repo), Right::Write),
        Route::Dumb | Route::Unknown => (None, Right::Read),
    };
    let Some((name, token)) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(auth::parse_basic)
    else {
        return Some(unauthorized("refused: authentication required".into()));
    };
    let Some(verifier) = shared.verifier.as_ref() else {
        return Some(unauthorized(
            "refused: no verifier for the auth file".into(),
        ));
    };
    let name = match verifier.verify(remote.ip(), name, token).await {
        credentials::Verdict::User(name) => name,
        credentials::Verdict::Wrong => {
            return Some(unauthorized("refused: authentication failed".into()))
        }
        credentials::Verdict::Throttled => return Some(throttled()),
    };
    let repo = repo.map(str::to_string);
    let shared = shared.clone();
    // The path lookup touches the disk (or the bucket): off the async threads.
    let verdict = spawn_blocking_in(reads, move || {
        let Some(user) = users.user(&name) else {
            return Some(unauthorized("refused: authentication failed".into()));
        };
        let repo = repo?;
        let may = |right| match shared.root.resolve_raw(&repo) {
            Ok(git_dir) => git_dir
                .strip_prefix(shared.root.path())
                .is_ok_and(|rel| user.allows(rel, right)),
            // Not there (or refused): the user learns so only where they could read it.
            Err(_) => crate::paths::percent_decode(&repo)
                .and_then(|d| crate::paths::check_relative(&d))
                .is_ok_and(|rel| user.allows(&rel, right)),
        };
        let who = user.name();
        if !may(Right::Read) {
            return Some(unauthorized(format!(
                "refused: user '{}' may not read this repository",
                who.escape_debug()
            )));
        }
        if right == Right::Write && !may(Right::Write) {
            return Some(text(
                StatusCode::FORBIDDEN,
                format!(
                    "refused: user '{}' may not push to this repository",
                    who.escape_debug()
                ),
            ));
        }
        None
    })
    .await;
    verdict.unwrap_or_else(|e| {
        Some(text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        ))
    })
}

/// `GET <repo>/info/refs?service=git-upload-pack`.
async fn info_refs(
    shared: &Arc<Shared>,
    repo: &str,
    req: &Request<Incoming>,
    reads: &RequestReads,
) -> Response<Body> {
    let (git_dir, upload) = match lookup(shared, repo, reads).await {
        Ok(found) => found,
        Err(e) => return e.response(),
    };
    let version = git_protocol(req);
    let joined = spawn_blocking_in(reads, move || {
        let mut out = Vec::new();
        if version != ProtocolVersion::V2 {
            out.extend_from_slice(b"001e# service=git-upload-pack\n0000");
        }
        upload
            .advertise(version, Mode::Stateless, &mut out)
            .map(|_shown| out)
    })
    .await;
    match joined {
        Ok(Ok(out)) => {
            let mut resp = full(StatusCode::OK, ADVERTISEMENT, out);
            no_cache(&mut resp);
            resp
        }
        Ok(Err(e)) => {
            tracing::warn!("{}: advertisement failed: {e}", git_dir.display());
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                packd_protocol::told_to_client(e.to_string(), &[&git_dir]),
            )
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        ),
    }
}

fn git_protocol(req: &Request<Incoming>) -> ProtocolVersion {
    let values: Vec<&str> = req
        .headers()
        .get_all("git-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if values.is_empty() {
        ProtocolVersion::V0
    } else {
        ProtocolVersion::from_git_protocol(Some(&values.join(":")))
    }
}

/// The answer to a request whose body failed before upload-pack could start (`limit`: the
/// server's limit on it).
fn body_failed(input: &mut Capped<Input>, e: &std::io::Error, limit: u64) -> Response<Body> {
    let raw = input.get_mut().raw().failed.clone();
    match raw {
        Some((std::io::ErrorKind::InvalidData, why)) => text(StatusCode::PAYLOAD_TOO_LARGE, why),
        Some((std::io::ErrorKind::TimedOut, why)) => text(StatusCode::REQUEST_TIMEOUT, why),
        Some((_, why)) => text(StatusCode::BAD_REQUEST, why),
        None if e.kind() == std::io::ErrorKind::InvalidData
            && e.to_string() == body::inflates_too_far(limit) =>
        {
            text(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
        }
        None => text(
            StatusCode::BAD_REQUEST,
            format!("the gzip request body does not inflate: {e}"),
        ),
    }
}

/// The value of header `name` as text; empty when absent or not text.
pub(super) fn header_str<B>(req: &Request<B>, name: header::HeaderName) -> &str {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// `POST <repo>/git-upload-pack`: on success the streaming response (its log line is written
/// when upload-pack ends); otherwise the error response and the log line to write.
async fn upload_pack(
    shared: &Arc<Shared>,
    repo: &str,
    req: Request<Incoming>,
    mut log: LogLine,
    guard: BusyGuard,
    files: Arc<FileQueue>,
) -> Result<Response<Body>, (Response<Body>, LogLine)> {
    let limit = shared.limits.max_request_bytes;
    let gzip = match request_encoding(&req, REQUEST) {
        Ok(gzip) => gzip,
        Err(why) => return Err((text(StatusCode::UNSUPPORTED_MEDIA_TYPE, why), log)),
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        let why = format!("request body larger than the server's limit of {limit} bytes");
        return Err((text(StatusCode::PAYLOAD_TOO_LARGE, why), log));
    }
    let version = git_protocol(&req);
    let asked = Instant::now();
    let (git_dir, upload) = match lookup(shared, repo, &log.reads).await {
        Ok(found) => found,
        Err(e) => return Err((e.response(), log)),
    };
    let (tx, rx) = mpsc::channel(QUEUED_BATCHES);
    let cancel = Arc::new(AtomicBool::new(false));
    let stream = ChannelBody {
        pending: VecDeque::new(),
        rx,
        cancel: cancel.clone(),
        files: Some(files),
        _guard: guard,
    };
    let idle = shared.limits.idle_timeout;
    let pace = crate::pace::Pace::new(idle, shared.limits.min_request_rate);
    let handle = tokio::runtime::Handle::current();
    let shared = shared.clone();
    let body = req.into_body();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let cut = shared.stopping.cut_signal();
    tokio::task::spawn_blocking(move || {
        // What upload-pack asks of a store, on this thread and those it hands work to.
        let _in = log.reads.enter();
        let raw = BodyReader::new(body, handle.clone(), pace, limit, cut.clone());
        let mut input = Capped::new(Input::new(raw, gzip), limit);
        let mut prefix = Vec::new();
        if let Err(e) = read_prefix(&mut input, &mut prefix) {
            let resp = body_failed(&mut input, &e, limit);
            let _ = ready_tx.send(Some(finish(resp, log)));
            return;
        }
        if ready_tx.send(None).is_err() {
            return;
        }
        log.status = "200".into();
        // A want the repository lacks may be in a pack stored since it was opened: looked
        // for again in a fresh open (if that fails, upload-pack tells the client).
        let upload = if crate::wants::lacks_a_want(&upload, &prefix) {
            shared
                .cache
                .reopen_after_miss(&git_dir, asked)
                .unwrap_or(upload)
        } else {
            upload
        };
        let mut writer = ChannelWriter::new(
            tx,
            handle,
            idle,
            cancel.clone(),
            FileRange::SENT_BY_KERNEL,
            cut,
        );
        let mut input = Read::chain(&prefix[..], &mut input);
        let result = upload.serve(
            version,
            Mode::Stateless,
            &packd_protocol::Advertised::default(),
            &mut input,
            &mut writer,
            &cancel,
        );
        let flushed = writer.flush();
        log.bytes = writer.sent;
        match result {
            Ok(stats) => {
                log.service = stats.command.to_string();
                log.objects = stats.objects;
                if let Err(e) = flushed {
                    log.note = format!("client gone: {e}");
                }
            }
            Err(e) => {
                log.note = format!("upload-pack failed: {e}");
                tracing::debug!("{}: upload-pack: {e}", git_dir.display());
            }
        }
        access_log::write(&log);
        // Dropping the writer (and its sender) ends the response body.
        drop(writer);
        crate::memory::release_after(log.objects);
    });
    match ready_rx.await {
        // The body failed before upload-pack started: its answer, already logged.
        Ok(Some(refused)) => Ok(refused),
        Ok(None) => Ok(streamed(stream.boxed(), RESULT)),
        Err(_) => Ok(finish_internal()),
    }
}

/// Reads the start of a request body into `prefix`, at most [`WANTS_PREFIX`] bytes, growing
/// it 16 KiB at a time so that its capacity stays within the bound.
fn read_prefix(input: &mut impl Read, prefix: &mut Vec<u8>) -> std::io::Result<()> {
    const STEP: usize = 16 * 1024;
    let max = WANTS_PREFIX as usize;
    while prefix.len() < max {
        let start = prefix.len();
        let want = STEP.min(max - start);
        prefix.reserve_exact(want);
        prefix.resize(start + want, 0);
        let n = match input.read(&mut prefix[start..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                prefix.truncate(start);
                continue;
            }
            Err(e) => {
                prefix.truncate(start);
                return Err(e);
            }
        };
        prefix.truncate(start + n);
        if n == 0 {
            return Ok(());
        }
    }
    Ok(())
}

/// The 500 of a request whose worker thread ended without an answer (it panicked).
fn finish_internal() -> Response<Body> {
    text(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error: the request's worker ended without an answer",
    )
}

/// The response body fed by a worker thread (upload-pack's, receive-pack's): `first`, if any,
/// then the chunks as they come. Dropping it (the client hung up, or the response ended) sets
/// the cancel flag.
struct ChannelBody {
    /// Pieces received and not yet handed to hyper.
    pending: VecDeque<Piece>,
    rx: mpsc::Receiver<Vec<Piece>>,
    cancel: Arc<AtomicBool>,
    /// Where file ranges wait for the connection to send them (`None`: the writer sends none).
    files: Option<Arc<FileQueue>>,
    /// Keeps the connection marked busy (not idle) while the response streams.
    _guard: BusyGuard,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let piece = loop {
            if let Some(piece) = self.pending.pop_front() {
                break piece;
            }
            match std::task::ready!(self.rx.poll_recv(cx)) {
                Some(batch) => self.pending.extend(batch),
                None => return Poll::Ready(None),
            }
        };
        let data = match piece {
            Piece::Bytes(bytes) => Ok(bytes),
            Piece::File(range) => match &self.files {
                Some(files) => files.stand_in(range),
                None => Err(std::io::Error::other(
                    "a file range for a response that cannot send one",
                )),
            },
        };
        Poll::Ready(Some(data.map(Frame::data)))
    }
}

/// What a worker thread hands the response body: bytes, or a range of a file, which the
/// connection sends itself (see [`crate::sendfile`]).
pub(crate) enum Piece {
    Bytes(Bytes),
    File(FileRange),
}

impl Drop for ChannelBody {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// A blocking [`Write`] that sends what upload-pack writes to the response body in batches
/// (a flush sends what is buffered at once: side-band progress and keepalives are flushed).
/// A write fails once the body is gone (the client hung up) or when the client has not taken
/// a batch for the idle timeout.
struct ChannelWriter {
    /// Batches of pieces: chunks of bytes (about [`BYTES_PER_BATCH`]), or the file ranges
    /// (and the bytes between them) of about [`RANGES_PER_BATCH`] bytes, so that a pack does
    /// not cost a hand-over between threads per chunk or per packet.
    tx: mpsc::Sender<Vec<Piece>>,
    buf: Vec<u8>,
    /// Pieces not sent yet, their bytes, and the bytes of file ranges among them.
    batch: Vec<Piece>,
    batch_bytes: usize,
    batch_ranges: u64,
    handle: tokio::runtime::Handle,
    idle: Duration,
    cancel: Arc<AtomicBool>,
    sent: u64,
    /// Whether the response body takes file ranges (see [`crate::sendfile`]).
    takes_file_ranges: bool,
    /// Turns true when the server stops waiting for requests in flight: writes fail.
    cut: tokio::sync::watch::Receiver<bool>,
}

impl ChannelWriter {
    /// A writer into `tx`, run on a blocking thread of `handle`'s runtime: a write fails once
    /// the client has taken nothing for `idle`, and `cancel` is set when the client is gone.
    /// `takes_file_ranges`: whether the response body sends file ranges (see
    /// [`crate::sendfile`]). Writes fail once `cut` turns true (the server is stopping).
    fn new(
        tx: mpsc::Sender<Vec<Piece>>,
        handle: tokio::runtime::Handle,
        idle: Duration,
        cancel: Arc<AtomicBool>,
        takes_file_ranges: bool,
        cut: tokio::sync::watch::Receiver<bool>,
    ) -> ChannelWriter {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
            batch: Vec::new(),
            batch_bytes: 0,
            batch_ranges: 0,
            handle,
            idle,
            cancel,
            sent: 0,
            takes_file_ranges,
            cut,
        }
    }

    /// Moves what is buffered into the batch. A short run (a packet header before a file
    /// range) is copied: handed over whole, the buffer would keep its 64 KiB allocation alive
    /// until hyper writes it, one per range queued.
    fn batch_buffered(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let bytes = if self.buf.len() < CHUNK / 2 {
            let bytes = Bytes::copy_from_slice(&self.buf);
            self.buf.clear();
            bytes
        } else {
            Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)))
        };
        self.batch_bytes += bytes.len();
        self.batch.push(Piece::Bytes(bytes));
    }

    /// Sends the batch, with what is buffered.
    fn send_batch(&mut self) -> std::io::Result<()> {
        self.batch_buffered();
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let len = self.batch_bytes as u64 + self.batch_ranges;
        self.batch_bytes = 0;
        self.batch_ranges = 0;
        self.send(batch, len)
    }

    /// Hands `chunk` (`len` bytes) to the connection's task.
    fn send(&mut self, chunk: Vec<Piece>, len: u64) -> std::io::Result<()> {
        let tx = self.tx.clone();
        let idle = self.idle;
        let cut = &mut self.cut;
        let sent = self.handle.block_on(async move {
            tokio::select! {
                sent = tokio::time::timeout(idle, tx.send(chunk)) => Some(sent),
                _ = crate::stopping::until_cut(cut) => None,
            }
        });
        let Some(sent) = sent else {
            self.cancel.store(true, Ordering::Relaxed);
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the server is stopping",
            ));
        };
        match sent {
            Ok(Ok(())) => {
                self.sent += len;
                Ok(())
            }
            Ok(Err(_)) => {
                self.cancel.store(true, Ordering::Relaxed);
                Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the client hung up",
                ))
            }
            Err(_) => {
                self.cancel.store(true, Ordering::Relaxed);
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the client read nothing for {idle:?}"),
                ))
            }
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.tx.is_closed() || *self.cut.borrow() {
            self.cancel.store(true, Ordering::Relaxed);
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client hung up",
            ));
        }
        let take = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..take]);
        if self.buf.len() >= CHUNK {
            self.batch_buffered();
            if self.batch_bytes >= BYTES_PER_BATCH {
                self.send_batch()?;
            }
        }
        Ok(take)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_batch()
    }
}

/// File ranges gathered into one hand-over to the connection's task.
const RANGES_PER_BATCH: u64 = 1 << 20;

impl PackSink for ChannelWriter {
    fn takes_file_ranges(&self) -> bool {
        self.takes_file_ranges
    }

    /// Adds the range to the batch, after what is buffered, in pieces a stand-in can stand
    /// for; sends the batch once it holds enough.
    fn send_file_range(&mut self, range: &FileRange) -> std::io::Result<()> {
        if !self.takes_file_ranges {
            return Err(std::io::Error::other("this response takes no file ranges"));
        }
        self.batch_buffered();
        let mut at = 0;
        while at < range.len {
            let piece = range.sub(at, PLACEHOLDER_LEN as u64);
            at += piece.len;
            self.batch_ranges += piece.len;
            self.batch.push(Piece::File(piece));
        }
        if self.batch_ranges >= RANGES_PER_BATCH {
            self.send_batch()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/a.git/info/refs"), Route::InfoRefs("/a.git"));
        assert_eq!(route("/x/y/git-upload-pack"), Route::UploadPack("/x/y"));
        assert_eq!(route("/a/git-receive-pack"), Route::ReceivePack("/a"));
        assert_eq!(route("/a.git/HEAD"), Route::Dumb);
        assert_eq!(route("/a.git/objects/info/packs"), Route::Dumb);
        assert_eq!(route("/a.git/objects/ab/cdef"), Route::Dumb);
        assert_eq!(route("/a.git/objects/pack/pack-1.pack"), Route::Dumb);
        assert_eq!(route("/a.git"), Route::Unknown);
        assert_eq!(route("/"), Route::Unknown);
    }

    #[test]
    fn query() {
        assert_eq!(
            query_param(Some("a=b&service=git-upload-pack"), "service"),
            Some("git-upload-pack")
        );
        assert_eq!(query_param(Some("servicex=1"), "service"), None);
        assert_eq!(query_param(None, "service"), None);
    }
}
