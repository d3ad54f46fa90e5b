//! Pushes over smart HTTP, when the server runs with `--allow-push`:
//!
//! ```text
//! GET  /<repo>/info/refs?service=git-receive-pack
//!      200 application/x-git-receive-pack-advertisement
//!      "001f# service=git-receive-pack\n" "0000" <receive-pack advertisement>
//! POST /<repo>/git-receive-pack   (Content-Type: application/x-git-receive-pack-request)
//!      body: commands, push options, pack    (a lone "0000" is git's probe: empty answer)
//!      200 application/x-git-receive-pack-result   report-status
//! ```
//! The body is read whole (bounded by `max_request_bytes`), then receive-pack runs on a
//! blocking thread and its report is sent back in one piece.

use super::{full, gunzip, header_str, lookup, no_cache, read_body, text, Body, BodyError, Lookup};
use crate::paths::PathError;
use crate::Shared;
use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode};
use packd_protocol::{ReceivePack, ReceivePackOptions};
use std::sync::Arc;

const ADVERTISEMENT: &str = "application/x-git-receive-pack-advertisement";
const REQUEST: &str = "application/x-git-receive-pack-request";
const RESULT: &str = "application/x-git-receive-pack-result";

/// Runs `work` on a blocking thread; an internal error becomes a 500.
async fn blocking(work: impl FnOnce() -> Response<Body> + Send + 'static) -> Response<Body> {
    match tokio::task::spawn_blocking(work).await {
        Ok(resp) => resp,
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        ),
    }
}

/// The repository a push goes to; with `--create-on-push`, created when the path has none.
async fn push_target(
    shared: &Arc<Shared>,
    repo: &str,
) -> Result<std::path::PathBuf, Response<Body>> {
    match lookup(shared, repo).await {
        Ok((git_dir, _)) => Ok(git_dir),
        Err(Lookup::Path(PathError::NotFound(_))) if shared.create_on_push => {
            let shared = shared.clone();
            let raw = repo.to_string();
            let created = tokio::task::spawn_blocking(move || {
                let decoded = crate::paths::percent_decode(&raw)?;
                shared.root.create_bare(&decoded)
            })
            .await;
            match created {
                Ok(Ok(git_dir)) => Ok(git_dir),
                Ok(Err(e)) => Err(Lookup::Path(e).response()),
                Err(e) => Err(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("internal error: {e}"),
                )),
            }
        }
        Err(e) => Err(e.response()),
    }
}

/// `GET <repo>/info/refs?service=git-receive-pack`.
pub(super) async fn info_refs(shared: &Arc<Shared>, repo: &str) -> Response<Body> {
    let git_dir = match push_target(shared, repo).await {
        Ok(git_dir) => git_dir,
        Err(resp) => return resp,
    };
    blocking(move || {
        let mut out = b"001f# service=git-receive-pack\n0000".to_vec();
        match ReceivePack::new(&git_dir, ReceivePackOptions::default()).advertise(&mut out) {
            Ok(()) => {
                let mut resp = full(StatusCode::OK, ADVERTISEMENT, out);
                no_cache(&mut resp);
                resp
            }
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    })
    .await
}

/// `POST <repo>/git-receive-pack`.
pub(super) async fn receive_pack(
    shared: &Arc<Shared>,
    repo: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let limit = shared.limits.max_request_bytes;
    if header_str(&req, header::CONTENT_TYPE) != REQUEST {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("expected Content-Type: {REQUEST}"),
        );
    }
    let gzip = matches!(
        header_str(&req, header::CONTENT_ENCODING),
        "gzip" | "x-gzip"
    );
    let git_dir = match push_target(shared, repo).await {
        Ok(git_dir) => git_dir,
        Err(resp) => return resp,
    };
    let body = match read_body(req.into_body(), limit, shared.limits.idle_timeout).await {
        Ok(b) => b,
        Err(e) => return e.response(limit),
    };
    blocking(move || {
        let body = if gzip {
            match gunzip(&body, limit) {
                Ok(b) => b,
                Err(e) => return BodyError::BadGzip(e).response(limit),
            }
        } else {
            body
        };
        let options = ReceivePackOptions::default();
        let mut out = Vec::new();
        let mut input: &[u8] = &body;
        match ReceivePack::new(&git_dir, options).serve(&mut input, &mut out) {
            Ok(stats) => {
                if let Some(e) = &stats.unpack_error {
                    tracing::info!("{}: push refused: {e}", git_dir.display());
                }
                let mut resp = full(StatusCode::OK, RESULT, out);
                no_cache(&mut resp);
                resp
            }
            Err(e) => text(StatusCode::BAD_REQUEST, format!("receive-pack: {e}")),
        }
    })
    .await
}
