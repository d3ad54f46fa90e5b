//! A cache of the packs sent to clones, so that the next identical clone is a file copy.
//!
//! ```text
//! <git dir>/packd-cache/clone/
//!     <key>.meta    "packd clone pack 1\n" then "objects N\nbytes B\nreused R\nreused_deltas D\nnew_deltas E\n"
//!     <key>.pack    the pack stream exactly as sent (header, entries, trailer)
//!     tmp_*         a pack being written; renamed to <key>.pack when complete
//! ```
//!
//! Why it is correct to reuse a pack without looking at the repository again: a clone asks for
//! objects by id and has nothing, so what it must receive is the closure of its wants (less what
//! a filter leaves out): a function of the wants alone, since ids name immutable content. The
//! key is therefore the wants, the filter and the client's pack options; with `include-tag`
//! also every `refs/tags/*` ref, since the tags sent depend on which tags exist. A push or a
//! repack changes no cached answer; at worst a cached pack is less well compressed than a new
//! one would be, and the size budget evicts the least recently used packs first.
//!
//! Why it matters: a clone served from its cached pack costs a read and a write of its bytes,
//! where writing it anew also hashes every byte for the trailer (SHA-1 is most of a clone's
//! CPU once entries are reused as they are). A code host serves the same clone again and again
//! (CI machines, new contributors), so the first clone pays and the following ones copy.
//!
//! Requests with haves, shallow boundaries or `deepen` are never cached: their answers depend
//! on what the client has.

use crate::{FetchRequest, Filter, PackError, PackStats};
use packd_odb::Repository;
use sha1::{Digest, Sha1};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The first line of a `.meta` file.
const META_MAGIC: &str = "packd clone pack 1";

/// Where clone packs are kept and how much room they may take.
#[derive(Debug, Clone)]
pub struct CloneCacheConfig {
    /// The directory of the cache (created on first use).
    pub dir: PathBuf,
    /// Most bytes of packs kept; the least recently used go first. A pack larger than this is
    /// not kept.
    pub max_bytes: u64,
    /// Packs of fewer objects are not kept: they cost little to write again.
    pub min_objects: u32,
}

impl CloneCacheConfig {
    /// The usual place for `repo`'s cache, `<git dir>/packd-cache/clone`, with a budget of
    /// `max_bytes` and packs of at least 10,000 objects.
    pub fn in_repository(repo: &Repository, max_bytes: u64) -> CloneCacheConfig {
        CloneCacheConfig {
            dir: repo.git_dir().join("packd-cache").join("clone"),
            max_bytes,
            min_objects: 10_000,
        }
    }
}

/// A pack found in the cache.
#[derive(Debug, Clone)]
pub(crate) struct CachedPack {
    pub(crate) path: PathBuf,
    pub(crate) stats: PackStats,
}

/// What to do with the cache for one request.
#[derive(Debug, Clone)]
pub(crate) enum CacheUse {
    /// Send this cached pack.
    Hit(CachedPack),
    /// Write the pack and keep it under this key.
    Fill(String),
}

/// The key of `request`, or `None` when its answer depends on what the client has.
pub(crate) fn key(repo: &Repository, request: &FetchRequest) -> Result<Option<String>, PackError> {
    if !request.haves.is_empty()
        || !request.client_shallow.is_empty()
        || request.deepen.is_some()
        || request.wants.is_empty()
    {
        return Ok(None);
    }
    let mut hash = Sha1::new();
    hash.update(format!("{META_MAGIC}\nofs-delta {}\n", request.ofs_delta).as_bytes());
    match &request.filter {
        None => hash.update(b"filter none\n"),
        Some(Filter::BlobNone) => hash.update(b"filter blob:none\n"),
        Some(Filter::BlobLimit(n)) => hash.update(format!("filter blob:limit={n}\n").as_bytes()),
        Some(Filter::TreeDepth(n)) => hash.update(format!("filter tree:{n}\n").as_bytes()),
    }
    let mut wants = request.wants.clone();
    wants.sort();
    wants.dedup();
    for want in &wants {
        hash.update(b"want ");
        hash.update(want.as_bytes());
    }
    if request.include_tag {
        hash.update(b"include-tag\n");
        for (name, id) in repo.refs().list("refs/tags/")? {
            hash.update(name.as_bytes());
            hash.update(b"\0");
            hash.update(id.as_bytes());
        }
    }
    Ok(Some(hex(&hash.finalize())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn meta_text(stats: &PackStats) -> String {
    format!(
        "{META_MAGIC}\nobjects {}\nbytes {}\nreused {}\nreused_deltas {}\nnew_deltas {}\n",
        stats.objects, stats.bytes, stats.reused, stats.reused_deltas, stats.new_deltas
    )
}

fn parse_meta(text: &str) -> Option<PackStats> {
    let mut lines = text.lines();
    if lines.next()? != META_MAGIC {
        return None;
    }
    let mut stats = PackStats::default();
    for line in lines {
        let (name, value) = line.split_once(' ')?;
        match name {
            "objects" => stats.objects = value.parse().ok()?,
            "bytes" => stats.bytes = value.parse().ok()?,
            "reused" => stats.reused = value.parse().ok()?,
            "reused_deltas" => stats.reused_deltas = value.parse().ok()?,
            "new_deltas" => stats.new_deltas = value.parse().ok()?,
            _ => {}
        }
    }
    (stats.bytes >= 32).then_some(stats)
}

impl CloneCacheConfig {
    fn pack_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.pack"))
    }

    fn meta_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.meta"))
    }

    /// The cached pack for `key`, if there is a complete one. Marks it as used.
    pub(crate) fn lookup(&self, key: &str) -> Option<CachedPack> {
        let text = std::fs::read_to_string(self.meta_path(key)).ok()?;
        let stats = parse_meta(&text)?;
        let path = self.pack_path(key);
        let file = File::options().append(true).open(&path).ok()?;
        let len = file.metadata().ok()?.len();
        if len != stats.bytes {
            tracing::warn!(
                "{}: {} bytes where its record says {}; not used",
                path.display(),
                len,
                stats.bytes
            );
            return None;
        }
        // Least recently used goes first: a hit counts as a use.
        let _ = file.set_modified(std::time::SystemTime::now());
        Some(CachedPack { path, stats })
    }

    /// A file to write the pack for `key` into while it is sent; `None` (with a warning) when
    /// the cache directory cannot be written, in which case the clone is simply not kept.
    pub(crate) fn start(&self, key: &str) -> Option<Filling> {
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::warn!(
                "cannot create {}: {e}; clones are not cached",
                self.dir.display()
            );
            return None;
        }
        let temp = self.dir.join(format!(
            "tmp_{}_{}",
            std::process::id(),
            &key[..key.len().min(16)]
        ));
        match File::create(&temp) {
            Ok(file) => Some(Filling {
                file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
                temp: Some(temp),
                key: key.to_string(),
            }),
            Err(e) => {
                tracing::warn!(
                    "cannot create {}: {e}; clones are not cached",
                    temp.display()
                );
                None
            }
        }
    }

    /// Keeps a completely written pack under its key, then evicts the least recently used
    /// packs beyond the budget.
    pub(crate) fn finish(&self, mut filling: Filling, stats: &PackStats) {
        let Some(temp) = filling.temp.take() else {
            return;
        };
        let kept = (|| -> std::io::Result<bool> {
            let Some(file) = filling.file.take() else {
                return Ok(false);
            };
            let file = file.into_inner().map_err(|e| e.into_error())?;
            if stats.objects < self.min_objects
                || stats.bytes > self.max_bytes
                || file.metadata()?.len() != stats.bytes
            {
                return Ok(false);
            }
            file.sync_all()?;
            // The record first, the pack last: a pack is used only with its record, and a
            // record without its pack is a miss.
            write_atomically(&self.meta_path(&filling.key), meta_text(stats).as_bytes())?;
            std::fs::rename(&temp, self.pack_path(&filling.key))?;
            Ok(true)
        })();
        match kept {
            Ok(true) => self.evict(),
            Ok(false) => {
                let _ = std::fs::remove_file(&temp);
            }
            Err(e) => {
                tracing::warn!("cannot keep the clone pack in {}: {e}", self.dir.display());
                let _ = std::fs::remove_file(&temp);
            }
        }
    }

    /// Removes the least recently used packs until the rest fit the budget, and leftovers of
    /// writers that died (temporary files older than an hour).
    fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        let mut packs = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(now);
            if name.starts_with("tmp_") {
                let age = now.duration_since(modified).unwrap_or_default();
                if age > std::time::Duration::from_secs(3600) {
                    let _ = std::fs::remove_file(entry.path());
                }
            } else if let Some(key) = name.strip_suffix(".pack") {
                packs.push((modified, meta.len(), key.to_string()));
            }
        }
        packs.sort();
        let mut total: u64 = packs.iter().map(|p| p.1).sum();
        for (_, len, key) in packs {
            if total <= self.max_bytes {
                break;
            }
            let _ = std::fs::remove_file(self.pack_path(&key));
            let _ = std::fs::remove_file(self.meta_path(&key));
            total = total.saturating_sub(len);
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = path.with_extension("meta.tmp");
    let mut file = File::create(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)
}

/// A pack being written into the cache while it is sent. Dropped without
/// [`CloneCacheConfig::finish`] (the clone failed or was cancelled), it removes its file.
pub(crate) struct Filling {
    file: Option<std::io::BufWriter<File>>,
    temp: Option<PathBuf>,
    key: String,
}

impl Drop for Filling {
    fn drop(&mut self) {
        self.file.take();
        if let Some(temp) = self.temp.take() {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// Writes to the client and to the cache file; a failure of the cache file only stops the
/// caching (the clone goes on).
pub(crate) struct Tee<'a> {
    pub(crate) out: &'a mut dyn Write,
    pub(crate) filling: &'a mut Filling,
}

impl Write for Tee<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(data)?;
        if let Some(file) = &mut self.filling.file {
            if let Err(e) = file.write_all(&data[..n]) {
                tracing::warn!("cannot write the clone cache: {e}");
                self.filling.file = None;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Sends the cached pack at `cached` to `out` as it is, in pieces of 1 MiB, checking `cancel`.
pub(crate) fn send(
    cached: &CachedPack,
    out: &mut dyn Write,
    progress: &mut dyn crate::ProgressSink,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<PackStats, PackError> {
    let mut file = File::open(&cached.path)?;
    let total = cached.stats.bytes;
    let mut buf = vec![0u8; 1 << 20];
    let mut sent = 0u64;
    while sent < total {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        let want = (total - sent).min(buf.len() as u64) as usize;
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(PackError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: the cached pack ends at {sent} bytes of {total}",
                    cached.path.display()
                ),
            )));
        }
        out.write_all(&buf[..n])?;
        sent += n as u64;
        let objects = cached.stats.objects as u64;
        progress.update("Writing objects", objects * sent / total, Some(objects));
    }
    out.flush()?;
    progress.finish("Writing objects", cached.stats.objects as u64);
    Ok(cached.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_damage() {
        let stats = PackStats {
            objects: 12,
            bytes: 3456,
            reused: 10,
            reused_deltas: 4,
            new_deltas: 1,
        };
        let parsed = parse_meta(&meta_text(&stats)).expect("parses");
        assert_eq!(
            (
                parsed.objects,
                parsed.bytes,
                parsed.reused,
                parsed.reused_deltas,
                parsed.new_deltas
            ),
            (12, 3456, 10, 4, 1)
        );
        assert!(parse_meta("something else\nobjects 1\n").is_none());
        assert!(parse_meta(&format!("{META_MAGIC}\nobjects x\n")).is_none());
        assert!(parse_meta(&format!("{META_MAGIC}\nobjects 1\nbytes 10\n")).is_none());
    }
}
