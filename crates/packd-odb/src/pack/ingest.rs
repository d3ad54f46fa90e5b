//! Taking in a pack: read it from a stream into a temporary file ([`crate::pack::data::input`]),
//! resolve its deltas on all cores ([`crate::pack::index::resolve`]), complete it when it is thin
//! and asked to (the missing bases appended as whole objects, the count and trailer rewritten),
//! and write its index ([`crate::pack::index::write`]).
//!
//! Files appear atomically and in git's order: the `.pack` is renamed into place first, the
//! `.idx` last, so a reader that sees the index sees a complete pack. Anything that fails leaves
//! no file behind.

use crate::file_mode::make_read_only;
use crate::pack::data::input::{read_pack, read_pack_observed, InputLimits};
use crate::pack::data::{encode_type_and_size, EntryKind};
use crate::pack::index::resolve::{resolve, ExternalBase, ObjectObserver};
use crate::pack::index::write::{encode_v2, IndexEntry};
use crate::{Error, ObjectDb, ObjectId, ObjectKind, Result};
use packd_storage::{LocalStorage, MemoryBlob, Storage};
use sha1::Digest;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How to take a pack in.
#[derive(Clone, Copy, Default)]
pub struct IngestOptions<'a> {
    /// Complete a thin pack with the bases it lacks, read from the repository (`--fix-thin`).
    pub fix_thin: bool,
    /// Bounds on what the stream may declare.
    pub limits: InputLimits,
    /// The zlib level (0-9) of the bases appended to a thin pack; `None`: git's default,
    /// [`DEFAULT_THIN_BASE_LEVEL`]. See [`thin_base_level`] for the repository's.
    pub thin_base_level: Option<u32>,
    /// Shown the objects index-pack has in memory as it hashes and resolves them (see
    /// [`ObjectObserver`]): for checks that would otherwise read them all again afterwards
    /// (receive-pack's fsck checks).
    pub observer: Option<&'a dyn ObjectObserver>,
}

impl std::fmt::Debug for IngestOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestOptions")
            .field("fix_thin", &self.fix_thin)
            .field("limits", &self.limits)
            .field("thin_base_level", &self.thin_base_level)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// The level git's index-pack compresses the bases it appends to a thin pack at when nothing
/// is configured: `Z_BEST_SPEED` (git's `zlib_compression_level`, not `pack.compression`).
pub const DEFAULT_THIN_BASE_LEVEL: u32 = 1;

/// The zlib level the repository configures for the bases appended to a thin pack, as git's
/// index-pack reads it: `core.loosecompression`, else `core.compression` (-1 meaning zlib's
/// default, 6); `pack.compression` does not count. `None` when neither is set. A value git
/// refuses is refused with git's words.
pub fn thin_base_level(config: &crate::config::Config) -> Result<Option<u32>> {
    for key in ["core.loosecompression", "core.compression"] {
        let Some(value) = config.get(key) else {
            continue;
        };
        let level = crate::config::parse_int(value).ok_or_else(|| {
            Error::BadName(format!("bad numeric config value '{value}' for '{key}'"))
        })?;
        return match level {
            -1 => Ok(Some(6)),
            0..=9 => Ok(Some(level as u32)),
            _ => Err(Error::BadName(format!(
                "bad zlib compression level {level}"
            ))),
        };
    }
    Ok(None)
}

/// A pack taken in.
#[derive(Debug)]
pub struct Ingested {
    /// The pack's checksum in hex: its files are `pack-<hex>.pack` and `pack-<hex>.idx`.
    pub hex: String,
    /// The `.pack` file.
    pub pack_path: PathBuf,
    /// The `.idx` file.
    pub idx_path: PathBuf,
    /// Objects in the pack, appended bases included.
    pub objects: u32,
    /// Of those, bases appended to complete a thin pack.
    pub appended: u32,
    /// Of those, deltas as received.
    pub deltas: u32,
    /// Whether the pack was there already (the same pack received twice).
    pub existed: bool,
    /// Index positions in pack (offset) order: what a `.rev` file holds.
    pub pack_order: Vec<u32>,
    /// The pack's and the index's bytes as written, when [`index_pack_quarantined`] still has
    /// them (the pack's as read back for resolving: mapped or in memory; `None` after a thin
    /// pack was completed, which changed the file): the checks that follow read them from here
    /// rather than open the files again.
    pub written: Option<(bytes::Bytes, bytes::Bytes)>,
}

/// A pack at most this large is kept in memory as it is written, and resolved from there
/// rather than opened and read again.
const KEEP_PACKS_UP_TO: usize = 4 << 20;

/// Writes to `out` and keeps a copy of what was written while it is at most
/// [`KEEP_PACKS_UP_TO`] bytes.
struct Tee<W> {
    out: W,
    copy: Option<Vec<u8>>,
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        if let Some(copy) = &mut self.copy {
            if copy.len() + n > KEEP_PACKS_UP_TO {
                self.copy = None;
            } else {
                copy.extend_from_slice(&buf[..n]);
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Removes a file on drop unless disarmed.
struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn temp_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "tmp_{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Resolves the deltas of `entries` (read from `blob`), telling `progress`, and lists the
/// index entries of the pack as received.
fn resolve_and_list(
    blob: &dyn packd_storage::Blob,
    entries: &[crate::pack::data::input::InputEntry],
    external: Option<&ExternalBase>,
    observer: Option<&dyn ObjectObserver>,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<(crate::pack::index::resolve::Resolved, Vec<IndexEntry>)> {
    let total = entries.len() as u64;
    progress("Resolving deltas", 0, total);
    let resolved = resolve(blob, entries, external, observer)?;
    progress("Resolving deltas", total, total);
    let index = entries
        .iter()
        .zip(&resolved.objects)
        .map(|(e, (id, _))| IndexEntry {
            id: *id,
            offset: e.offset,
            crc32: e.crc32,
        })
        .collect();
    Ok((resolved, index))
}

/// Creates `path` holding `bytes`, on disk (synced) and read-only (git's mode for an index)
/// before it returns.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))?;
    drop(f);
    make_read_only(path).map_err(io(path))
}

/// How many of a pack's entries are deltas.
fn delta_count(entries: &[crate::pack::data::input::InputEntry]) -> u32 {
    entries
        .iter()
        .filter(|e| !matches!(e.kind, EntryKind::Base(_)))
        .count() as u32
}

/// Index positions in pack (offset) order: what a `.rev` file holds.
fn pack_order(index: &[IndexEntry]) -> Vec<u32> {
    let mut by_offset: Vec<(u64, u32)> = index
        .iter()
        .enumerate()
        .map(|(i, e)| (e.offset, i as u32))
        .collect();
    by_offset.sort_unstable();
    by_offset.into_iter().map(|(_, i)| i).collect()
}

/// Reads a pack from `input` into `pack_dir` (an `objects/pack` directory) and indexes it.
/// `odb` provides the bases of a thin pack. `progress` is told (stage, done, total).
/// The pack, its index and their names in `pack_dir` are durable when this returns.
pub fn index_pack(
    input: &mut dyn Read,
    pack_dir: &Path,
    odb: Option<&ObjectDb>,
    options: &IngestOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Ingested> {
    std::fs::create_dir_all(pack_dir).map_err(io(pack_dir))?;
    ingest(input, pack_dir, odb, options, progress, None)
}

/// [`index_pack`] into quarantine files of `pack_dir` (which exists): the pack is written as
/// `<stem>_pack` and its index as `<stem>_idx`, names no reader takes for a pack (git and
/// packd look for `*.idx`), and left there. Their contents are durable when this returns,
/// their names are not, as they need not be: [`crate::quarantine::Quarantine::migrate`]
/// renames them to `pack-<hex>.{pack,idx}` and makes those names durable; a crash before
/// leaves files that are swept away. On failure neither file is left.
pub fn index_pack_quarantined(
    input: &mut dyn Read,
    pack_dir: &Path,
    stem: &str,
    odb: Option<&ObjectDb>,
    options: &IngestOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Ingested> {
    ingest(input, pack_dir, odb, options, progress, Some(stem))
}

/// [`index_pack`] (`quarantine` `None`: the directory fsynced at the end) or
/// [`index_pack_quarantined`] (the quarantine's stem).
fn ingest(
    input: &mut dyn Read,
    pack_dir: &Path,
    odb: Option<&ObjectDb>,
    options: &IngestOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
    quarantine: Option<&str>,
) -> Result<Ingested> {
    let tmp_name = match quarantine {
        Some(stem) => format!("{stem}_pack"),
        None => temp_name("pack"),
    };
    let tmp_path = pack_dir.join(&tmp_name);
    let mut guard = TempFile(Some(tmp_path.clone()));
    let file = File::create(&tmp_path).map_err(io(&tmp_path))?;
    // Large writes (the threaded reader's) go past the buffer; the inline reader's are small.
    let mut out = Tee {
        out: BufWriter::with_capacity(64 << 10, file),
        copy: Some(Vec::new()),
    };
    let display = tmp_path.display().to_string();
    let parsed = read_pack_observed(
        input,
        &mut out,
        &display,
        &options.limits,
        &mut |n, total| progress("Receiving objects", n as u64, total as u64),
        options.observer,
    )?;
    let Tee { out, copy } = out;
    let file = out
        .into_inner()
        .map_err(|e| io(&tmp_path)(e.into_error()))?;
    file.sync_all().map_err(io(&tmp_path))?;
    drop(file);

    let blob: std::sync::Arc<dyn packd_storage::Blob> = match copy {
        Some(bytes) => {
            std::sync::Arc::new(MemoryBlob::new(display.clone(), bytes::Bytes::from(bytes)))
        }
        None => LocalStorage::new(pack_dir).open(&tmp_name)?,
    };
    let lookup = |id: &ObjectId| -> Result<Option<(ObjectKind, Vec<u8>)>> {
        match odb {
            Some(odb) => Ok(odb.read(id)?.map(|o| (o.kind, o.data.to_vec()))),
            None => Ok(None),
        }
    };
    let external: Option<&ExternalBase> = if odb.is_some() { Some(&lookup) } else { None };
    let (resolved, mut index) = resolve_and_list(
        blob.as_ref(),
        &parsed.entries,
        external,
        options.observer,
        progress,
    )?;
    // Kept for the checks of a quarantined pack, unless completing it changes the file.
    let pack_bytes = if quarantine.is_some() && resolved.external_bases.is_empty() {
        Some(blob.read_all()?)
    } else {
        None
    };
    drop(blob);

    let mut checksum = parsed.checksum;
    let mut appended = 0u32;
    if !resolved.external_bases.is_empty() {
        if !options.fix_thin {
            return Err(Error::corrupt(
                display,
                0,
                format!(
                    "the pack is thin: {} delta base(s) are outside it (complete it with --fix-thin)",
                    resolved.external_bases.len()
                ),
            ));
        }
        let odb = odb.ok_or_else(|| Error::BadName("a thin pack needs a repository".into()))?;
        let (sum, added) = append_bases(
            &tmp_path,
            parsed.len,
            parsed.entries.len(),
            &resolved.external_bases,
            odb,
            options.thin_base_level.unwrap_or(DEFAULT_THIN_BASE_LEVEL),
        )?;
        checksum = sum;
        appended = added.len() as u32;
        index.extend(added);
    }
    let objects = u32::try_from(index.len())
        .map_err(|_| Error::BadName("more than 2^32 objects in one pack".into()))?;
    // Whole (bases appended): read-only from here on, as git leaves a pack.
    make_read_only(&tmp_path).map_err(io(&tmp_path))?;

    let hex = crate::hex(&checksum);
    let idx_bytes = encode_v2(&mut index, &checksum);
    let pack_order = pack_order(&index);
    if let Some(stem) = quarantine {
        // The names are this push's own: written in place, no renames.
        let idx_path = pack_dir.join(format!("{stem}_idx"));
        let idx_guard = TempFile(Some(idx_path.clone()));
        write_synced(&idx_path, &idx_bytes)?;
        std::mem::forget(idx_guard);
        guard.0 = None;
        return Ok(Ingested {
            hex,
            pack_path: tmp_path,
            idx_path,
            objects,
            appended,
            deltas: delta_count(&parsed.entries),
            existed: false,
            pack_order,
            written: pack_bytes.map(|p| (p, bytes::Bytes::from(idx_bytes))),
        });
    }
    let pack_path = pack_dir.join(format!("pack-{hex}.pack"));
    let idx_path = pack_dir.join(format!("pack-{hex}.idx"));

    let existed = pack_path.exists() && idx_path.exists();
    if !existed {
        std::fs::rename(&tmp_path, &pack_path).map_err(io(&pack_path))?;
        guard.0 = None;
        let idx_tmp = pack_dir.join(temp_name("idx"));
        let idx_guard = TempFile(Some(idx_tmp.clone()));
        write_synced(&idx_tmp, &idx_bytes)?;
        std::fs::rename(&idx_tmp, &idx_path).map_err(io(&idx_path))?;
        std::mem::forget(idx_guard);
        if let Ok(dir) = File::open(pack_dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(Ingested {
        hex,
        pack_path,
        idx_path,
        objects,
        appended,
        deltas: delta_count(&parsed.entries),
        existed,
        pack_order,
        written: None,
    })
}

/// Indexes the pack file at `pack_path` where it is (as `git index-pack FILE` does): reads and
/// checks it, resolves its deltas from the file itself (no copy is made), and writes its index to
/// `idx_path` atomically. A thin pack is refused (its bases would have to be appended, which
/// needs a copy: see [`index_pack`]). Fails leaving no file behind.
pub fn index_pack_file(
    pack_path: &Path,
    idx_path: &Path,
    options: &IngestOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Ingested> {
    let display = pack_path.display().to_string();
    let mut file = File::open(pack_path).map_err(io(pack_path))?;
    let parsed = read_pack(
        &mut file,
        &mut std::io::sink(),
        &display,
        &options.limits,
        &mut |n, total| progress("Indexing objects", n as u64, total as u64),
    )?;
    drop(file);
    let dir = pack_path.parent().unwrap_or(Path::new("."));
    let file_name = pack_path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::BadName(format!("{display}: not a usable file name")))?;
    let storage = LocalStorage::new(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    });
    let blob = storage.open(file_name)?;
    let (_, mut index) = resolve_and_list(
        blob.as_ref(),
        &parsed.entries,
        None,
        options.observer,
        progress,
    )?;
    drop(blob);
    let objects = u32::try_from(index.len())
        .map_err(|_| Error::BadName("more than 2^32 objects in one pack".into()))?;
    let idx_bytes = encode_v2(&mut index, &parsed.checksum);
    let pack_order = pack_order(&index);
    let idx_dir = idx_path.parent().unwrap_or(Path::new("."));
    let idx_tmp = idx_dir.join(temp_name("idx"));
    let idx_guard = TempFile(Some(idx_tmp.clone()));
    write_synced(&idx_tmp, &idx_bytes)?;
    std::fs::rename(&idx_tmp, idx_path).map_err(io(idx_path))?;
    std::mem::forget(idx_guard);
    Ok(Ingested {
        hex: crate::hex(&parsed.checksum),
        pack_path: pack_path.to_path_buf(),
        idx_path: idx_path.to_path_buf(),
        objects,
        appended: 0,
        deltas: delta_count(&parsed.entries),
        existed: false,
        pack_order,
        written: None,
    })
}

/// Appends `bases` (read from `odb`) as whole objects to the pack at `path` (`len` bytes,
/// `count` entries), rewriting its object count and trailer. Returns the new checksum and the
/// appended entries.
fn append_bases(
    path: &Path,
    len: u64,
    count: usize,
    bases: &[ObjectId],
    odb: &ObjectDb,
    level: u32,
) -> Result<([u8; 20], Vec<IndexEntry>)> {
    let e = io(path);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(&e)?;
    file.set_len(len - 20).map_err(&e)?;
    file.seek(SeekFrom::End(0)).map_err(&e)?;
    let mut offset = len - 20;
    let mut added = Vec::with_capacity(bases.len());
    // git's level (1 unless configured): libdeflate's levels 0-9 compress about as zlib's.
    // (Level 0, libdeflate's "fastest", stores the bases uncompressed.)
    let level = libdeflater::CompressionLvl::new(level.min(9) as i32)
        .unwrap_or_else(|_| libdeflater::CompressionLvl::default());
    let mut compressor = libdeflater::Compressor::new(level);
    {
        let mut out = BufWriter::new(&mut file);
        for id in bases {
            let object = odb
                .read(id)?
                .ok_or_else(|| Error::BadName(format!("the thin pack's base {id} vanished")))?;
            let mut entry = Vec::with_capacity(16);
            encode_type_and_size(
                &mut entry,
                object.kind.pack_type(),
                object.data.len() as u64,
            );
            let mut compressed = vec![0u8; compressor.zlib_compress_bound(object.data.len())];
            let n = compressor
                .zlib_compress(&object.data, &mut compressed)
                .map_err(|err| Error::BadName(format!("compressing {id}: {err}")))?;
            entry.extend_from_slice(&compressed[..n]);
            out.write_all(&entry).map_err(&e)?;
            added.push(IndexEntry {
                id: *id,
                offset,
                crc32: crc32fast::hash(&entry),
            });
            offset += entry.len() as u64;
        }
        out.flush().map_err(&e)?;
    }
    let total = u32::try_from(count + bases.len())
        .map_err(|_| Error::BadName("more than 2^32 objects in one pack".into()))?;
    file.seek(SeekFrom::Start(8)).map_err(&e)?;
    file.write_all(&total.to_be_bytes()).map_err(&e)?;
    // The trailer covers every byte: hash the file again from the start.
    file.seek(SeekFrom::Start(0)).map_err(&e)?;
    let mut hash = sha1::Sha1::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(&e)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    let sum: [u8; 20] = hash.finalize().into();
    file.seek(SeekFrom::End(0)).map_err(&e)?;
    file.write_all(&sum).map_err(&e)?;
    file.sync_all().map_err(&e)?;
    Ok((sum, added))
}
