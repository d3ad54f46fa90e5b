//! Writing git's commit-graph: `objects/info/commit-graph` for the commits some tips reach, as
//! `git commit-graph write --reachable` writes it (git 2.39's defaults: generation data v2, no
//! Bloom filters, one file rather than a chain). packd-odb's `graph` module reads it back.
//!
//! ```text
//! header  "CGPH"  version u8 = 1  hash version u8 = 1 (SHA-1)  chunks u8  base graphs u8 = 0
//! chunk table: (chunks + 1) x { id[4], offset u64 BE }; the last row has id 0 and the offset
//!         where the trailing checksum starts. Chunks in git's order:
//! OIDF    fanout[256] u32 BE: how many ids have a first byte <= i
//! OIDL    ids[N][20], sorted (a commit's position is its index here)
//! CDAT    N x { tree[20], parent1 u32, parent2 u32, topo_level << 2 | date >> 32 & 3 (u32),
//!         date u32 }; a parent is a position or 0x70000000 (none); with more than two parents,
//!         parent2 is 0x80000000 | the index in EDGE of the second parent
//! GDA2    N x u32: corrected commit date - commit date; 0x80000000 | i when that exceeds
//!         0x7fffffff, i indexing GDO2                           (generation v2 only)
//! GDO2    u64 BE offsets too large for GDA2, in position order  (only if any)
//! EDGE    u32 positions of octopus merges' 2nd.. parents; the last one of a commit has the
//!         high bit set                                          (only if any)
//! checksum[20]: SHA-1 of everything before it
//! ```
//!
//! ```text
//! collect.rs     the commits the tips reach, read from the object database as git parses them
//! generation.rs  topological levels (generation v1) and corrected commit dates (v2)
//! write.rs       the file's bytes, and putting it in place through the storage layer
//!                (compare-and-swap against the version read first; a stale chain removed)
//! ```
//!
//! Writing is two steps, [`prepare_commit_graph`] then [`PreparedGraph::install`]: the first
//! reads the version of `info/commit-graph` before it reads any commit, the second replaces the
//! file only if it is still that version. Two writers racing (two maintenances, packd and
//! `git commit-graph write`) cannot both win: the second to install gets a conflict (or, while
//! git holds `commit-graph.lock`, a locked error), and the file is the first one's, whole.
//!
//! The commit date is the one git reads (the number after the committer line's first `>`,
//! parsed as `strtoumax` would, as an unsigned 64-bit value), so that `git commit-graph
//! verify`, which compares dates, agrees; with the same commits, the file is byte for byte the
//! one git writes.

mod collect;
mod generation;
mod write;

use crate::progress::Progress;
use packd_odb::{ObjectId, Repository};
use packd_storage::{Storage, StorageError, Version};
use std::path::PathBuf;

pub use collect::Commits;
pub use generation::Generations;

/// How to write a commit-graph. The default is git 2.39's: generation v2, no progress.
#[derive(Clone, Copy)]
pub struct GraphOptions<'a> {
    /// Write corrected commit dates (GDA2, and GDO2 when needed), as git 2.39 does by default
    /// (`commitGraph.generationVersion=2`); false writes topological levels alone (version 1).
    pub generation_v2: bool,
    /// Progress reports, if any.
    pub progress: Option<&'a dyn Progress>,
}

impl Default for GraphOptions<'_> {
    fn default() -> Self {
        GraphOptions {
            generation_v2: true,
            progress: None,
        }
    }
}

impl<'a> GraphOptions<'a> {
    /// git's defaults for `repo`: generation v2 unless `commitGraph.generationVersion` is 1.
    pub fn for_repository(repo: &Repository) -> GraphOptions<'a> {
        let version = repo
            .config()
            .get("commitGraph.generationVersion")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(2);
        GraphOptions {
            generation_v2: version == 2,
            progress: None,
        }
    }
}

impl std::fmt::Debug for GraphOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphOptions")
            .field("generation_v2", &self.generation_v2)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// What [`write_commit_graph`] wrote.
#[derive(Debug, Clone)]
pub struct WrittenGraph {
    /// The file (`objects/info/commit-graph`), as the storage describes it (a path on a local
    /// disk, an `s3://` URL in a bucket).
    pub path: PathBuf,
    /// The number of commits in it.
    pub commits: u32,
    /// Entries in EDGE (octopus merges' second and later parents).
    pub extra_edges: u32,
    /// Corrected-date offsets too large for GDA2, stored in GDO2.
    pub overflows: u32,
    /// The file's size.
    pub bytes: u64,
    /// Its trailing checksum.
    pub checksum: ObjectId,
    /// Whether a split chain (`info/commit-graphs/`) was removed, as git does when it writes a
    /// single file.
    pub removed_chain: bool,
}

/// Why no commit-graph was written. The old file, if any, is then untouched.
#[derive(Debug, thiserror::Error)]
pub enum CommitGraphError {
    /// A commit (or a tip) could not be read or parsed; names it.
    #[error("commit {id}{}: {what}", .child.map(|c| format!(" (a parent of {c})")).unwrap_or_default())]
    BadCommit {
        /// The commit.
        id: ObjectId,
        /// The commit that names it as a parent, if it is not a tip.
        child: Option<ObjectId>,
        /// What is wrong.
        what: String,
    },
    /// git would not write a graph here: grafts, replace refs or a shallow repository change
    /// parents, which a graph would then contradict.
    #[error("{0}; git writes no commit-graph here either")]
    Incompatible(String),
    /// More commits than the format can number.
    #[error("{0} commits: too many to write a commit-graph")]
    TooMany(usize),
    /// Reading objects or refs failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Writing the file failed: [`StorageError::Conflict`] when another writer replaced it
    /// since it was read (its graph stays), `Locked` while another holds its lock.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The tips `git commit-graph write --reachable` starts from: every ref, and HEAD (which git
/// reaches through its branch; a detached HEAD is added here so that its commits are in the
/// graph too).
pub fn reachable_tips(repo: &Repository) -> Result<Vec<ObjectId>, CommitGraphError> {
    let refs = repo.refs();
    let mut tips: Vec<ObjectId> = refs.list("refs/")?.into_iter().map(|(_, id)| id).collect();
    if let Some(head) = refs.resolve_full("HEAD")? {
        tips.push(head);
    }
    tips.sort_unstable();
    tips.dedup();
    Ok(tips)
}

/// The commit-graph of every commit the refs and `HEAD` reach, written afresh into `storage`
/// (the repository's own objects storage) with the repository's options
/// ([`GraphOptions::for_repository`]): what a repack or maintenance writes after it.
pub fn write_for_refs(
    repo: &Repository,
    storage: &dyn Storage,
) -> Result<WrittenGraph, CommitGraphError> {
    let tips = reachable_tips(repo)?;
    write_commit_graph(repo, storage, &tips, &GraphOptions::for_repository(repo))
}

/// Writes `info/commit-graph` into `storage` (the repository's own objects storage) for the
/// commits reachable from `tips` (tags are peeled; tips that are not commits, such as tagged
/// trees, are skipped, as git skips them) as a single file, not a chain, removing a stale chain
/// as `git commit-graph write` without `--split` does: [`prepare_commit_graph`], then
/// [`PreparedGraph::install`]. The file is never half-written, and never replaces one another
/// writer put there meanwhile. With no commit at all, nothing is written (as git) and the
/// result has 0 commits.
pub fn write_commit_graph(
    repo: &Repository,
    storage: &dyn Storage,
    tips: &[ObjectId],
    options: &GraphOptions,
) -> Result<WrittenGraph, CommitGraphError> {
    prepare_commit_graph(repo, storage, tips, options)?.install()
}

/// A commit-graph encoded and not yet written, with the version of the file it is to replace.
pub struct PreparedGraph<'a> {
    storage: &'a dyn Storage,
    /// `info/commit-graph`'s version when preparing began (`None`: there was none).
    replaces: Option<Version>,
    /// The file's bytes; `None` when there is no commit (nothing is written).
    encoded: Option<write::Encoded>,
    progress: Option<&'a dyn Progress>,
    started: std::time::Instant,
}

impl std::fmt::Debug for PreparedGraph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedGraph")
            .field("replaces", &self.replaces)
            .field("commits", &self.commits())
            .finish()
    }
}

/// The first step of [`write_commit_graph`]: reads the version of `info/commit-graph` in
/// `storage`, then the commits `tips` reach, and encodes the file.
pub fn prepare_commit_graph<'a>(
    repo: &Repository,
    storage: &'a dyn Storage,
    tips: &[ObjectId],
    options: &GraphOptions<'a>,
) -> Result<PreparedGraph<'a>, CommitGraphError> {
    check_compatible(repo)?;
    let started = std::time::Instant::now();
    // Read before any commit is: a graph another writer puts there from now on, which may
    // hold commits this one does not, makes the install a conflict instead of being lost.
    let replaces = storage
        .read_versioned(write::GRAPH)?
        .map(|(_, version)| version);
    let commits = Commits::collect(repo.objects(), tips, options.progress)?;
    tracing::debug!(
        "commit-graph: {} commits read in {:?}",
        commits.len(),
        started.elapsed()
    );
    if let Some(p) = options.progress {
        p.start("Generations", commits.len() as u64);
    }
    let generations = Generations::compute(&commits, options.generation_v2)?;
    if let Some(p) = options.progress {
        p.update(commits.len() as u64);
    }
    let encoded = if commits.is_empty() {
        None
    } else {
        if let Some(p) = options.progress {
            p.start("Writing", 1);
        }
        Some(write::encode(&commits, &generations)?)
    };
    Ok(PreparedGraph {
        storage,
        replaces,
        encoded,
        progress: options.progress,
        started,
    })
}

impl PreparedGraph<'_> {
    /// The number of commits the file holds.
    pub fn commits(&self) -> u32 {
        self.encoded.as_ref().map_or(0, |e| e.commits())
    }

    /// The second step of [`write_commit_graph`]: replaces `info/commit-graph` with this one if
    /// it is still the version read when preparing began, else fails with
    /// [`StorageError::Conflict`] (or `Locked`) and leaves the other writer's file as it is.
    /// With no commit, writes nothing.
    pub fn install(self) -> Result<WrittenGraph, CommitGraphError> {
        let path = PathBuf::from(self.storage.describe(write::GRAPH));
        let Some(encoded) = self.encoded else {
            return Ok(WrittenGraph {
                path,
                commits: 0,
                extra_edges: 0,
                overflows: 0,
                bytes: 0,
                checksum: ObjectId::NULL,
                removed_chain: false,
            });
        };
        let written = write::install(self.storage, encoded, self.replaces.as_ref())?;
        if let Some(p) = self.progress {
            p.update(1);
        }
        tracing::debug!(
            "commit-graph: {} commits, {} bytes written in {:?}",
            written.commits,
            written.bytes,
            self.started.elapsed()
        );
        Ok(written)
    }
}

/// Refuses what git refuses to write a graph for: `core.commitGraph=false`, a shallow
/// repository, grafts, and replace refs (unless GIT_NO_REPLACE_OBJECTS is set).
fn check_compatible(repo: &Repository) -> Result<(), CommitGraphError> {
    let disabled = repo.config().get("core.commitGraph").is_some_and(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "false" | "no" | "off" | "0"
        )
    });
    if disabled {
        return Err(CommitGraphError::Incompatible(
            "core.commitGraph is disabled".into(),
        ));
    }
    if repo.common_dir().join("shallow").exists() {
        return Err(CommitGraphError::Incompatible(
            "the repository is shallow".into(),
        ));
    }
    let grafts = match std::env::var_os("GIT_GRAFT_FILE") {
        Some(f) => PathBuf::from(f),
        None => repo.common_dir().join("info/grafts"),
    };
    if grafts.exists() {
        return Err(CommitGraphError::Incompatible(
            "the repository has grafts (info/grafts)".into(),
        ));
    }
    if std::env::var_os("GIT_NO_REPLACE_OBJECTS").is_none()
        && !repo.refs().list("refs/replace/")?.is_empty()
    {
        return Err(CommitGraphError::Incompatible(
            "the repository has replace refs (refs/replace/)".into(),
        ));
    }
    Ok(())
}
