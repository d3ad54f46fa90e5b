//! receive-pack into a repository whose files are not on this disk (a bucket): what
//! [`crate::ReceivePack`] asks of it instead of the files, and what it works out for it while
//! the pushed objects are still in the quarantine.
//!
//! ```text
//! the pack              indexed into a quarantine on local disk (the server's directory for
//!                       the repository), checked there as any push's
//! objects               Quarantine::migrate_to(store.objects()): .pack then .idx, put if absent
//! refs                  store.apply: compare-and-swap of the reftable stack's list, the files
//!                       backend's rules and words (packd_refs::apply_to_stack)
//! hooks, prune lock     none: a bucket's repositories run no hooks of their own (a server's
//!                       configuration is not the repository's), and nothing prunes them here
//! ```

use packd_odb::{ObjectDb, ObjectId, ObjectKind, Repository};
use packd_refs::{RefResult, RefUpdate, TransactionOptions};
use packd_storage::Storage;
use std::collections::HashMap;
use std::sync::Arc;

/// A repository kept in storage, as a push opens and writes it.
pub trait PushStore: Send + Sync + std::fmt::Debug {
    /// Opens the repository, its objects and refs as they are now.
    fn open(&self) -> Result<Repository, packd_odb::Error>;
    /// Where the pushed pack goes: the repository's objects.
    fn objects(&self) -> Arc<dyn Storage>;
    /// Moves the refs of `updates` (all or none when `atomic`), one result per update;
    /// `peeled` says what each new annotated tag peels to.
    fn apply(
        &self,
        updates: &[RefUpdate],
        atomic: bool,
        options: &TransactionOptions<'_>,
        peeled: &HashMap<ObjectId, ObjectId>,
    ) -> Vec<RefResult>;
}

/// What each of `ids` that is an annotated tag peels to (through every level of tags), read
/// from the quarantine or the repository: a reftable records it with the ref.
pub(crate) fn peeled_among(
    ids: &[ObjectId],
    incoming: Option<&ObjectDb>,
    repo: &Repository,
) -> HashMap<ObjectId, ObjectId> {
    let read = |id: &ObjectId| {
        incoming
            .and_then(|db| db.read(id).ok().flatten())
            .or_else(|| repo.objects().read(id).ok().flatten())
    };
    let mut out = HashMap::new();
    for id in ids {
        let mut at = *id;
        let mut levels = 0;
        while let Some(object) = read(&at).filter(|o| o.kind == ObjectKind::Tag) {
            match packd_odb::parse::tag_target(&at, &object.data) {
                Ok(target) => at = target,
                Err(_) => break,
            }
            levels += 1;
            if levels > 64 {
                break;
            }
        }
        if levels > 0 {
            out.insert(*id, at);
        }
    }
    out
}
