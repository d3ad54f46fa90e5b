//! Pack generation for fetches: what to send (counting with bitmaps) and the pack stream, reusing
//! on-disk entries.
//!
//! The protocol layer (`packd-protocol`) negotiates with the client and then hands a
//! [`FetchRequest`] to a [`PackServer`], a long-lived per-repository object that keeps indexes and
//! bitmaps loaded between requests. [`PackServer::plan`] counts the objects to send (and computes
//! the shallow boundary for shallow requests); [`PackServer::write`] streams the pack.
//!
//! This file is the contract between the protocol layer and pack generation; the implementation
//! is being written.

use packd_odb::{ObjectId, Repository};
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Why a pack could not be planned or written.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// The client asked for something the server does not have or will not give.
    #[error("{0}")]
    BadRequest(String),
    /// The client went away or the server is shutting down.
    #[error("the fetch was cancelled")]
    Cancelled,
    /// Writing to the client failed.
    #[error("writing the pack failed: {0}")]
    Io(#[from] std::io::Error),
    /// Not built yet.
    #[error("pack generation is not implemented yet")]
    Unimplemented,
}

/// How deep a shallow fetch goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deepen {
    /// `deepen N`: N commits from each want (with `deepen-relative`, N more than the client has).
    Depth {
        /// The depth.
        depth: u32,
        /// `deepen-relative`.
        relative: bool,
    },
    /// `deepen-since T`: commits newer than T (seconds since the epoch).
    Since(i64),
    /// `deepen-not REF`: commits not reachable from these.
    Not(Vec<ObjectId>),
}

/// A partial-clone filter (`filter` in the protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// `blob:none`.
    BlobNone,
    /// `blob:limit=N`: blobs of at least N bytes are left out.
    BlobLimit(u64),
    /// `tree:N`: trees and blobs deeper than N are left out (`tree:0`: commits and tags only).
    TreeDepth(u64),
}

/// What the client asked for, after negotiation.
#[derive(Debug, Clone, Default)]
pub struct FetchRequest {
    /// Objects the client wants (usually ref tips; any object with allow-*-in-want).
    pub wants: Vec<ObjectId>,
    /// Objects the client has that the server also has (the common ones found in negotiation).
    pub haves: Vec<ObjectId>,
    /// The client's current shallow boundary (`shallow` lines).
    pub client_shallow: Vec<ObjectId>,
    /// A shallow request, if any.
    pub deepen: Option<Deepen>,
    /// A partial-clone filter, if any.
    pub filter: Option<Filter>,
    /// The client accepts deltas against objects it has but that are not in the pack.
    pub thin: bool,
    /// The client accepts offset deltas.
    pub ofs_delta: bool,
    /// Send annotated tags that point at objects being sent.
    pub include_tag: bool,
}

/// A change to the client's shallow boundary, sent before the pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShallowUpdate {
    /// The commit is now a shallow boundary on the client.
    Shallow(ObjectId),
    /// The commit is no longer shallow on the client.
    Unshallow(ObjectId),
}

/// Progress of planning or writing, for side-band 2 and terminals.
pub trait ProgressSink: Send {
    /// `stage` ("Counting objects", "Compressing objects", ...) has done `done` of `total`.
    fn update(&mut self, stage: &str, done: u64, total: Option<u64>);
    /// The stage is complete.
    fn finish(&mut self, stage: &str, done: u64);
}

/// The objects a fetch will send, counted; pass it to [`PackServer::write`].
#[derive(Debug)]
pub struct PackPlan {
    /// Shallow boundary changes to tell the client before the pack.
    pub shallow: Vec<ShallowUpdate>,
    /// Number of objects the pack will hold.
    pub object_count: u32,
}

/// What a written pack held, for access logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct PackStats {
    /// Objects in the pack.
    pub objects: u32,
    /// Bytes of the pack, header and trailer included.
    pub bytes: u64,
    /// Entries copied from disk as they were.
    pub reused: u32,
    /// Of those, deltas.
    pub reused_deltas: u32,
}

/// Pack generation for one repository, kept loaded between requests.
pub struct PackServer {
    repo: Arc<Repository>,
}

impl PackServer {
    /// Opens pack generation over `repo` (loading its bitmap index, if it has one).
    pub fn open(repo: Arc<Repository>) -> Result<PackServer, PackError> {
        Ok(PackServer { repo })
    }

    /// The repository served.
    pub fn repository(&self) -> &Arc<Repository> {
        &self.repo
    }

    /// The shallow boundary changes a shallow request makes (`deepen*` lines and the client's
    /// `shallow` lines; haves play no part). Protocol v0/v1 sends these before negotiation, so
    /// they are computed on their own; [`PackServer::plan`] computes the same again.
    pub fn shallow(&self, _request: &FetchRequest) -> Result<Vec<ShallowUpdate>, PackError> {
        Err(PackError::Unimplemented)
    }

    /// Counts the objects to send for `request`. Checks `cancel` regularly.
    pub fn plan(
        &self,
        _request: &FetchRequest,
        _progress: &mut dyn ProgressSink,
        _cancel: &AtomicBool,
    ) -> Result<PackPlan, PackError> {
        Err(PackError::Unimplemented)
    }

    /// Streams the pack for `plan` to `out`, in bounded memory. Checks `cancel` regularly.
    pub fn write(
        &self,
        _plan: PackPlan,
        _out: &mut dyn Write,
        _progress: &mut dyn ProgressSink,
        _cancel: &AtomicBool,
    ) -> Result<PackStats, PackError> {
        Err(PackError::Unimplemented)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pack_server_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::PackServer>();
    }
}
