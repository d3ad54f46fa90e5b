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
//! write.rs       the file's bytes, and putting it in place atomically (a stale chain removed)
//! ```
//!
//! The commit date is the one git reads (the number after the committer line's first `>`,
//! parsed as `strtoumax` would, as an unsigned 64-bit value), so that `git commit-graph
//! verify`, which compares dates, agrees; with the same commits, the file is byte for byte the
//! one git writes.

mod collect;
mod generation;
mod write;

use packd_odb::{ObjectId, Repository};
use std::path::PathBuf;

pub use collect::Commits;
pub use generation::Generations;

/// A stage of writing a commit-graph, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading commits, from the tips back (the total grows as parents are found).
    Collecting,
    /// Computing generation numbers and corrected commit dates.
    Generations,
    /// Encoding and writing the file.
    Writing,
}

impl Stage {
    /// A short label for a progress bar.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Collecting => "Reading commits",
            Stage::Generations => "Generations",
            Stage::Writing => "Writing",
        }
    }
}

/// Where progress goes (a terminal's bar in the CLI).
pub trait Progress: Sync {
    /// A stage begins with `total` units of work (0 when unknown yet).
    fn start(&self, stage: Stage, total: u64);
    /// `done` units of the current stage are done.
    fn update(&self, done: u64);
}

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
    /// The file (`objects/info/commit-graph`).
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
    /// Writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
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

/// The commit-graph of every commit the refs and `HEAD` reach, written afresh with the
/// repository's options ([`GraphOptions::for_repository`]): what a repack or maintenance
/// writes after it.
pub fn write_for_refs(repo: &Repository) -> Result<WrittenGraph, CommitGraphError> {
    let tips = reachable_tips(repo)?;
    write_commit_graph(repo, &tips, &GraphOptions::for_repository(repo))
}

/// Writes objects/info/commit-graph for the commits reachable from `tips` (tags are peeled;
/// tips that are not commits, such as tagged trees, are skipped, as git skips them) as a single
/// file, not a chain, removing a stale chain as `git commit-graph write` without `--split`
/// does. The file is written to a temporary file beside it, synced and renamed into place:
/// never half-written. With no commit at all, nothing is written (as git) and the result has 0
/// commits.
pub fn write_commit_graph(
    repo: &Repository,
    tips: &[ObjectId],
    options: &GraphOptions,
) -> Result<WrittenGraph, CommitGraphError> {
    let objects_dir = objects_dir(repo);
    check_compatible(repo)?;
    let started = std::time::Instant::now();
    let commits = Commits::collect(repo.objects(), tips, options.progress)?;
    tracing::debug!(
        "commit-graph: {} commits read in {:?}",
        commits.len(),
        started.elapsed()
    );
    if let Some(p) = options.progress {
        p.start(Stage::Generations, commits.len() as u64);
    }
    let generations = Generations::compute(&commits, options.generation_v2)?;
    if let Some(p) = options.progress {
        p.update(commits.len() as u64);
    }
    let path = objects_dir.join("info/commit-graph");
    if commits.is_empty() {
        return Ok(WrittenGraph {
            path,
            commits: 0,
            extra_edges: 0,
            overflows: 0,
            bytes: 0,
            checksum: ObjectId::NULL,
            removed_chain: false,
        });
    }
    if let Some(p) = options.progress {
        p.start(Stage::Writing, 1);
    }
    let encoded = write::encode(&commits, &generations)?;
    let written = write::install(&objects_dir, encoded)?;
    if let Some(p) = options.progress {
        p.update(1);
    }
    tracing::debug!(
        "commit-graph: {} commits, {} bytes written in {:?}",
        written.commits,
        written.bytes,
        started.elapsed()
    );
    Ok(written)
}

/// The repository's own objects directory (GIT_OBJECT_DIRECTORY when set, as the object
/// database opens it).
fn objects_dir(repo: &Repository) -> PathBuf {
    match std::env::var_os("GIT_OBJECT_DIRECTORY") {
        Some(d) => PathBuf::from(d),
        None => repo.common_dir().join("objects"),
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
