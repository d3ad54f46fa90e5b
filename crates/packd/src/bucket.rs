//! What `packd import` and `packd export` share: `s3://` locations, the files of git's layout
//! that move between a directory and a bucket, and copying one blob between two storages.
//!
//! A repository in a bucket keeps git's own layout under its prefix, with its refs in a
//! reftable stack, as git lays out a repository whose `extensions.refStorage` is `reftable`:
//!
//! ```text
//! s3://BUCKET/PREFIX/NAME/objects/pack/pack-X.{pack,rev,bitmap,mtimes,keep,promisor,idx}
//! s3://BUCKET/PREFIX/NAME/objects/pack/multi-pack-index (and its -X.bitmap, -X.rev)
//! s3://BUCKET/PREFIX/NAME/objects/info/commit-graph, objects/info/commit-graphs/...
//! s3://BUCKET/PREFIX/NAME/objects/XX/YYYY...      loose objects (an import packs its own;
//!                                                 an export copies any it finds)
//! s3://BUCKET/PREFIX/NAME/config                  the repository's, with the reftable marker
//! s3://BUCKET/PREFIX/NAME/shallow                 if the repository is shallow
//! s3://BUCKET/PREFIX/NAME/HEAD                    "ref: refs/heads/.invalid" (git's reftable HEAD)
//! s3://BUCKET/PREFIX/NAME/refs/heads              git's note that refs are in reftable/
//! s3://BUCKET/PREFIX/NAME/reftable/tables.list    the stack: every ref, HEAD included
//! ```
//!
//! `reftable/tables.list` is written last by an import and read first by an export: a bucket
//! repository exists once its list does, and every object its refs name was put before it.

use anyhow::{bail, Context, Result};
use packd_storage::{S3Config, S3Storage, Storage, StorageError};
use std::io::Write;

/// The text git writes to `HEAD` of a repository whose refs are in a reftable stack (so that a
/// git that does not know reftable finds a HEAD it cannot resolve, rather than a wrong one).
pub const REFTABLE_HEAD: &[u8] = b"ref: refs/heads/.invalid\n";

/// The text git writes to `refs/heads` (a file, not a directory) in such a repository.
pub const REFTABLE_REFS_HEADS: &[u8] = b"this repository uses the reftable format\n";

/// The block an import appends to the repository's `config`, and an export removes: it tells
/// a git that reads reftable where the refs are, and one that does not that it cannot.
pub const CONFIG_MARKER: &str = "# packd import: the refs are in reftable/\n\
                                 [core]\n\trepositoryformatversion = 1\n\
                                 [extensions]\n\trefStorage = reftable\n";

/// The [`object_file_group`] of loose objects (`objects/XX/YYYY...`).
pub const LOOSE_GROUP: u8 = 5;

/// Bytes copied per read while a blob streams from one storage to another.
const CHUNK: u64 = 8 << 20;

/// Opens the repository prefix an `s3://BUCKET/PREFIX/NAME` URL names, with the endpoint,
/// region and credentials from the usual AWS environment variables.
pub fn open_s3(url: &str) -> Result<S3Storage> {
    open_s3_with(url, packd_storage::ReadOptions::default())
}

/// [`open_s3`], its ranged reads made as `reads` says (coalescing, requests in flight).
pub fn open_s3_with(url: &str, reads: packd_storage::ReadOptions) -> Result<S3Storage> {
    let Some(rest) = url.strip_prefix("s3://") else {
        bail!("{url}: not an s3://BUCKET/PATH location");
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_matches('/');
    if bucket.is_empty() || prefix.is_empty() {
        bail!("{url}: name a bucket and the repository's path in it (s3://BUCKET/PATH)");
    }
    if prefix
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        bail!("{url}: the path in the bucket has an empty, '.' or '..' component");
    }
    let config = S3Config {
        reads,
        ..S3Config::from_env(bucket, prefix)
    };
    S3Storage::new(&config).with_context(|| url.to_string())
}

/// Which group of git's object files a name under `objects/` belongs to, in the order they are
/// copied: each group only after the one before it is complete, so that a reader that finds a
/// file finds what it needs (an `.idx` only once its `.pack` is there, a multi-pack-index
/// once its packs' indexes are, a commit-graph chain once its graphs are). `None`: not one
/// of git's object files (temporary files, `info/packs`, `info/alternates`).
pub fn object_file_group(name: &str) -> Option<u8> {
    let (dir, file) = name.rsplit_once('/')?;
    let is_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    match dir {
        "pack" => {
            if let Some(stem) = file.strip_prefix("pack-") {
                let (hash, ext) = stem.split_once('.')?;
                if !is_hex(hash) || hash.len() != 40 {
                    return None;
                }
                match ext {
                    "pack" => Some(0),
                    "rev" | "bitmap" | "mtimes" | "keep" | "promisor" => Some(1),
                    "idx" => Some(2),
                    _ => None,
                }
            } else if file == "multi-pack-index" {
                Some(4)
            } else if let Some(stem) = file.strip_prefix("multi-pack-index-") {
                let (hash, ext) = stem.split_once('.')?;
                (is_hex(hash) && matches!(ext, "bitmap" | "rev")).then_some(3)
            } else {
                None
            }
        }
        "info" => (file == "commit-graph").then_some(3),
        "info/commit-graphs" => {
            if file == "commit-graph-chain" {
                Some(4)
            } else {
                let hash = file.strip_prefix("graph-")?.strip_suffix(".graph")?;
                is_hex(hash).then_some(3)
            }
        }
        d if d.len() == 2 && is_hex(d) => (file.len() == 38 && is_hex(file)).then_some(LOOSE_GROUP),
        _ => None,
    }
}

/// The names of git's object files in `objects` (a repository's `objects/`, on any storage),
/// sorted by [`object_file_group`]: what an import or an export copies.
pub fn list_object_files(objects: &dyn Storage) -> Result<Vec<(u8, String)>> {
    let mut names = Vec::new();
    let mut dirs = vec!["pack".to_string(), "info/commit-graphs".to_string()];
    dirs.extend(
        objects
            .list("")?
            .into_iter()
            .filter(|d| d.len() == 2 && d.bytes().all(|b| b.is_ascii_hexdigit())),
    );
    for dir in dirs {
        for file in objects.list(&dir)? {
            let name = format!("{dir}/{file}");
            if let Some(group) = object_file_group(&name) {
                names.push((group, name));
            }
        }
    }
    if objects.exists("info/commit-graph") {
        names.push((3, "info/commit-graph".to_string()));
    }
    names.sort();
    Ok(names)
}

/// Copies blob `name` from `from` to `to` as a new immutable blob, streaming it in chunks (a
/// pack is never held whole in memory). A blob already there under the name with the same
/// length counts as copied: git's object files are named by their content, so an import run
/// again after a failure finds what the first run put. Returns the blob's length.
pub fn copy_blob(from: &dyn Storage, to: &dyn Storage, name: &str) -> Result<u64> {
    let blob = from.open(name)?;
    let len = blob.len();
    let mut out = to.create(name)?;
    let mut buf = Vec::new();
    let mut at = 0;
    while at < len {
        let end = (at + CHUNK).min(len);
        blob.read_copy_into(at..end, &mut buf)?;
        out.write_all(&buf)
            .with_context(|| format!("writing {}", to.describe(name)))?;
        at = end;
    }
    match out.publish() {
        Ok(()) => Ok(len),
        Err(StorageError::AlreadyExists { .. }) => {
            let there = to.open(name)?.len();
            if there != len {
                bail!(
                    "{} exists with {there} bytes, where {} has {len}",
                    to.describe(name),
                    from.describe(name)
                );
            }
            Ok(len)
        }
        Err(e) => Err(e.into()),
    }
}

/// Copies `names` from `from` to `to` on `jobs` threads, group by group (see
/// [`object_file_group`]); `progress` is told the bytes of each blob copied. Returns the
/// number of files and their bytes.
pub fn copy_groups(
    from: &dyn Storage,
    to: &dyn Storage,
    names: &[(u8, String)],
    jobs: usize,
    progress: &indicatif::ProgressBar,
) -> Result<(u64, u64)> {
    let mut copied = (0u64, 0u64);
    for group in names.chunk_by(|a, b| a.0 == b.0) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<Result<(u64, u64)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..jobs.clamp(1, group.len()))
                .map(|_| {
                    scope.spawn(|| -> Result<(u64, u64)> {
                        let mut done = (0, 0);
                        loop {
                            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some((_, name)) = group.get(k) else {
                                return Ok(done);
                            };
                            let bytes = copy_blob(from, to, name)?;
                            progress.inc(bytes);
                            done = (done.0 + 1, done.1 + bytes);
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a copying thread panicked")))
                })
                .collect()
        });
        for r in results {
            let (files, bytes) = r?;
            copied = (copied.0 + files, copied.1 + bytes);
        }
    }
    Ok(copied)
}

/// A bar of bytes copied, on stderr when it is a terminal.
pub fn bytes_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg}: {percent}% ({bytes}/{total_bytes}), {bytes_per_sec}",
    ) {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::object_file_group;

    #[test]
    fn object_files_are_grouped_in_copy_order() {
        let h = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(object_file_group(&format!("pack/pack-{h}.pack")), Some(0));
        assert_eq!(object_file_group(&format!("pack/pack-{h}.bitmap")), Some(1));
        assert_eq!(object_file_group(&format!("pack/pack-{h}.idx")), Some(2));
        assert_eq!(object_file_group("pack/multi-pack-index"), Some(4));
        assert_eq!(
            object_file_group(&format!("pack/multi-pack-index-{h}.bitmap")),
            Some(3)
        );
        assert_eq!(object_file_group("info/commit-graph"), Some(3));
        assert_eq!(
            object_file_group("info/commit-graphs/commit-graph-chain"),
            Some(4)
        );
        assert_eq!(
            object_file_group(&format!("info/commit-graphs/graph-{h}.graph")),
            Some(3)
        );
        assert_eq!(object_file_group(&format!("ab/{}", &h[2..])), Some(5));
        for not in [
            format!("pack/tmp_pack_{h}"),
            format!("pack/pack-{h}.idx.lock"),
            format!("pack/.tmp-1-pack-{h}.pack"),
            "info/packs".to_string(),
            "info/alternates".to_string(),
            format!("AB/{}", &h[2..]),
            format!("ab/{}", &h[3..]),
        ] {
            assert_eq!(object_file_group(&not), None, "{not}");
        }
    }
}
