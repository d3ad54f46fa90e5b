//! Changing refs safely: git's ref-name rules, its directory/file rules, and transactions of
//! compare-and-swap updates that a crash (kill -9 at any instant) leaves either applied or not.
//!
//! ```text
//! name         check_ref_name: refs/<a>/<b>..., check-ref-format's rules
//! conflict     refs/heads/a and refs/heads/a/b cannot both exist (loose, packed, one batch)
//! lock         <ref>.lock and packed-refs.lock, created holding their owner's token
//! journal      <common>/packd-transactions/<token>: an owner's record, flock'ed while it lives
//! packed       packed-refs rewritten without deleted refs
//! transaction  apply: lock, verify, hook "prepared", commit point, write, hook "committed"
//! reftable_store  ReftableRefs: refs read from a reftable stack (a repository in a bucket)
//! reftable_update apply_to_stack: a push's updates to such a stack, with apply's rules
//! ```
//!
//! Reading refs (listing, resolving, `packed-refs` parsing) stays in `packd_odb::refs` and
//! `packd_odb::packed_refs` for now: this crate only writes, and reads what it must compare.
//! Whether an update is a fast-forward is the caller's business: it needs the object graph.

mod conflict;
mod hook;
mod journal;
mod lock;
mod loose;
mod name;
mod packed;
mod reftable_store;
mod reftable_update;
mod transaction;

#[cfg(test)]
mod tests;

pub use hook::{HookState, NoHook, TransactionHook};
pub use journal::{recover, JOURNAL_DIR};
pub use name::check_ref_name;
pub use reftable_store::ReftableRefs;
pub use reftable_update::apply_to_stack;
pub use transaction::{apply, TransactionOptions};

use packd_odb::ObjectId;

/// One ref change: compare with `old`, then set to `new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// Full ref name (`refs/heads/main`).
    pub name: String,
    /// The value the ref must have now. `None`: when creating or updating, it must not exist
    /// (the protocol's zero id); when deleting, whatever it is, if anything (git's deletion
    /// without an old value).
    pub old: Option<ObjectId>,
    /// The value to set; `None` deletes the ref.
    pub new: Option<ObjectId>,
}

/// Why an update was refused, in the two forms git's receive-pack gives it: the short
/// `reason` of its report-status line (`ng <ref> <reason>`), and the `error:` line it sends on
/// side-band 2 before the report (the client shows it as `remote: error: ...`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The report-status reason (`failed to update ref`, `atomic transaction failed`).
    pub reason: String,
    /// The text of git's `error:` line, without the `error: ` (it may span lines, as git's
    /// lock advice does).
    pub error: Option<String>,
}

impl Refusal {
    /// A refusal with a reason only.
    pub fn reason(reason: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            error: None,
        }
    }

    /// A refusal with a reason and git's error line.
    pub fn with_error(reason: impl Into<String>, error: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            error: Some(error.into()),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error {
            Some(e) => write!(f, "{} ({e})", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

/// The outcome of one update.
pub type RefResult = Result<(), Refusal>;

/// git's reason for a ref of a non-atomic push whose transaction failed.
pub const UPDATE_FAILED: &str = "failed to update ref";

/// git's reason for every ref of an atomic push whose transaction failed.
pub const ATOMIC_FAILED: &str = "atomic transaction failed";
