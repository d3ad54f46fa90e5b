//! A quarantine for received objects: they are written and checked under names of their own,
//! and enter the repository only when every check has passed.
//!
//! ```text
//! objects/pack/
//!   tmp_incoming_<pid>_<nanos>_<n>_pack   written by index_pack_quarantined, read by the checks
//!   tmp_incoming_<pid>_<nanos>_<n>_idx    (removed on drop unless migrated)
//!   pack-<hex>.pack                       migrate(): renamed, the .pack first, the .idx last,
//!   pack-<hex>.idx                        then the directory fsynced
//! ```
//! Readers of the repository never see a quarantined object: git and packd take a pack only
//! through a name ending in `.idx` (packd: `pack-*.idx`), which a quarantined index gets at
//! migration, after its data is in place. The files sit in `objects/pack` itself rather than in a
//! directory of their own: no directory to make and remove (two `mkdir`s and two `rmdir`s were a
//! twelfth of a small push's time), and migration is a rename within one directory. The `tmp_`
//! prefix is git's own for temporary files there (`git prune` removes old ones).

use crate::pack::ingest::{index_pack_quarantined, IngestOptions, Ingested};
use crate::{Error, ObjectDb, OpenOptions, Result};
use bytes::Bytes;
use packd_storage::{Blob, LocalStorage, MemoryBlob, Storage, StorageError};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The prefix of quarantine file names in `objects/pack`.
const PREFIX: &str = "tmp_incoming_";

/// A quarantine in a repository's `objects/pack` directory.
#[derive(Debug)]
pub struct Quarantine {
    /// The repository's `objects/pack`.
    pack_dir: PathBuf,
    /// `tmp_incoming_<pid>_<nanos>_<n>`: the files are `<stem>_pack` and `<stem>_idx`.
    stem: String,
    /// The pack received, once it is.
    received: Option<Received>,
}

/// What [`Quarantine::ingest`] took in.
#[derive(Debug)]
struct Received {
    hex: String,
    /// The pack's and index's bytes, when ingest still had them.
    written: Option<(Bytes, Bytes)>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

impl Quarantine {
    /// A quarantine in `objects_dir/pack` (made if missing). Nothing is written until
    /// [`Quarantine::ingest`].
    pub fn create(objects_dir: &Path) -> Result<Quarantine> {
        let pack_dir = objects_dir.join("pack");
        if !sweep_abandoned(&pack_dir) {
            std::fs::create_dir_all(&pack_dir).map_err(io(&pack_dir))?;
        }
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let stem = format!(
            "{PREFIX}{}_{nanos}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        Ok(Quarantine {
            pack_dir,
            stem,
            received: None,
        })
    }

    /// Takes a pack in from `input` into the quarantine ([`index_pack_quarantined`]); `odb`
    /// provides the bases of a thin pack. One pack per quarantine.
    pub fn ingest(
        &mut self,
        input: &mut dyn Read,
        odb: Option<&ObjectDb>,
        options: &IngestOptions,
        progress: &mut dyn FnMut(&str, u64, u64),
    ) -> Result<Ingested> {
        if self.received.is_some() {
            return Err(Error::BadName("a quarantine takes one pack".into()));
        }
        let mut ingested =
            index_pack_quarantined(input, &self.pack_dir, &self.stem, odb, options, progress)?;
        self.received = Some(Received {
            hex: ingested.hex.clone(),
            written: ingested.written.take(),
        });
        Ok(ingested)
    }

    /// The quarantined objects alone, for the checks that run before migration (read from the
    /// bytes ingest wrote when it still has them, else from the files).
    pub fn objects(&self) -> Result<ObjectDb> {
        let storage = QuarantineStorage {
            pack_dir: LocalStorage::new(&self.pack_dir),
            stem: self.stem.clone(),
            received: self.received.is_some(),
            written: self.received.as_ref().and_then(|r| r.written.clone()),
        };
        ObjectDb::from_storages(
            vec![Arc::new(storage) as Arc<dyn Storage>],
            &OpenOptions {
                cache_budget: 16 << 20,
                ..OpenOptions::default()
            },
        )
    }

    /// The received pack's files while quarantined, with its name's hex: `(pack, idx, hex)`;
    /// `None` before [`Quarantine::ingest`]. For a caller that must show the objects to
    /// another program (receive-pack's hooks) under names it reads.
    pub fn received_files(&self) -> Option<(PathBuf, PathBuf, &str)> {
        let received = self.received.as_ref()?;
        Some((
            self.pack_dir.join(format!("{}_pack", self.stem)),
            self.pack_dir.join(format!("{}_idx", self.stem)),
            &received.hex,
        ))
    }

    /// Moves the quarantined pack into the repository: renames its data to `pack-<hex>.pack`,
    /// then its index to `pack-<hex>.idx`, then fsyncs the directory, which makes both names
    /// durable at once. A pack the repository already has is left where it is (and removed on
    /// drop).
    ///
    /// No fsync between the data's rename and the index's: a crash between them can at worst
    /// leave a pack without its index, which no reader takes, and the push was not
    /// acknowledged (its refs move only after this returns). git's own pack installation
    /// orders the renames the same way, without fsyncs.
    pub fn migrate(mut self) -> Result<()> {
        let Some(received) = self.received.take() else {
            return Ok(());
        };
        let hex = &received.hex;
        let idx = self.pack_dir.join(format!("pack-{hex}.idx"));
        if idx.exists() {
            // Already there (the same pack pushed twice): this copy goes on drop.
            self.received = Some(received);
            return Ok(());
        }
        let from = self.pack_dir.join(format!("{}_pack", self.stem));
        let to = self.pack_dir.join(format!("pack-{hex}.pack"));
        std::fs::rename(&from, &to).map_err(io(&to))?;
        let from = self.pack_dir.join(format!("{}_idx", self.stem));
        std::fs::rename(&from, &idx).map_err(io(&idx))?;
        sync_dir(&self.pack_dir)
    }
}

impl Quarantine {
    /// Stores the quarantined pack in `objects` (another repository's objects storage: a
    /// bucket's) rather than in this directory: `pack/pack-<hex>.pack`, then
    /// `pack/pack-<hex>.idx`, each put whole and only if absent (a pack already there, named
    /// by the same contents, is left as it is). Readers take a pack only through its index, so
    /// none sees the data before it is whole. The local files go on drop.
    pub fn migrate_to(mut self, objects: &dyn Storage) -> Result<()> {
        let Some(received) = self.received.take() else {
            return Ok(());
        };
        let hex = received.hex.clone();
        let written = received.written.clone();
        // Removed on drop, whatever happens here.
        self.received = Some(received);
        for (ext, bytes) in [
            ("pack", written.as_ref().map(|w| w.0.clone())),
            ("idx", written.as_ref().map(|w| w.1.clone())),
        ] {
            let name = format!("pack/pack-{hex}.{ext}");
            if ext == "idx" && objects.exists(&name) {
                return Ok(());
            }
            let mut out = objects.create(&name)?;
            let local = self.pack_dir.join(format!("{}_{ext}", self.stem));
            let copied = match bytes {
                Some(bytes) => out.write_all(&bytes),
                None => {
                    File::open(&local).and_then(|mut f| std::io::copy(&mut f, &mut out).map(|_| ()))
                }
            };
            copied.map_err(io(&local))?;
            match out.publish() {
                Ok(()) | Err(packd_storage::StorageError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        // Migrated: nothing left. Refused (or the pack was there already): both files, when
        // a pack was received (ingest leaves none behind when it fails).
        if self.received.is_some() {
            for ext in ["pack", "idx"] {
                let _ = std::fs::remove_file(self.pack_dir.join(format!("{}_{ext}", self.stem)));
            }
        }
    }
}

/// The quarantined pack as the storage of an objects directory of its own: `pack/` lists its
/// index alone, as `pack-q.idx`, and there are no loose objects.
#[derive(Debug)]
struct QuarantineStorage {
    /// The repository's `objects/pack`, where the files are.
    pack_dir: LocalStorage,
    stem: String,
    /// Whether a pack was received (else the storage is empty).
    received: bool,
    /// The pack's and index's bytes, when ingest still had them.
    written: Option<(Bytes, Bytes)>,
}

const QUARANTINE_IDX: &str = "pack/pack-q.idx";
const QUARANTINE_PACK: &str = "pack/pack-q.pack";

impl QuarantineStorage {
    /// The file name in `objects/pack` of one of the two blobs.
    fn file(&self, name: &str) -> Option<String> {
        if !self.received {
            return None;
        }
        match name {
            QUARANTINE_IDX => Some(format!("{}_idx", self.stem)),
            QUARANTINE_PACK => Some(format!("{}_pack", self.stem)),
            _ => None,
        }
    }
}

impl Storage for QuarantineStorage {
    fn open(&self, name: &str) -> std::result::Result<Arc<dyn Blob>, StorageError> {
        let file = self.file(name).ok_or_else(|| StorageError::NotFound {
            name: self.describe(name),
        })?;
        if let Some((pack, idx)) = &self.written {
            let bytes = if name == QUARANTINE_IDX { idx } else { pack };
            return Ok(Arc::new(MemoryBlob::new(
                self.pack_dir.describe(&file),
                bytes.clone(),
            )));
        }
        self.pack_dir.open(&file)
    }

    fn list(&self, dir: &str) -> std::result::Result<Vec<String>, StorageError> {
        Ok(if dir == "pack" && self.received {
            vec!["pack-q.idx".to_string()]
        } else {
            Vec::new()
        })
    }

    fn exists(&self, name: &str) -> bool {
        self.file(name).is_some()
    }

    fn describe(&self, name: &str) -> String {
        match self.file(name) {
            Some(file) => self.pack_dir.describe(&file),
            None => format!("{} (quarantine {})", name, self.stem),
        }
    }
}

/// Removes the quarantine files of receivers that died without cleaning up (killed mid-push):
/// those whose process is gone (Linux: no `/proc/<pid>`), or, where that cannot be known, older
/// than a day. Nothing in them was ever visible to readers, so removing them loses nothing.
/// Returns whether `pack_dir` could be listed (it exists).
fn sweep_abandoned(pack_dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(pack_dir) else {
        return false;
    };
    let mut proc_known = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('_').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let proc_known = *proc_known.get_or_insert_with(|| Path::new("/proc/self").exists());
        let abandoned = if proc_known {
            !Path::new(&format!("/proc/{pid}")).exists()
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(24 * 3600))
        };
        if abandoned {
            tracing::info!(
                "removing the abandoned quarantine file {}",
                entry.path().display()
            );
            let _ = std::fs::remove_file(entry.path());
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A pack of `blobs`, each stored whole.
    fn blob_pack(blobs: &[&[u8]]) -> Vec<u8> {
        use sha1::Digest;
        use std::io::Write;
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend_from_slice(&(blobs.len() as u32).to_be_bytes());
        for data in blobs {
            crate::pack::data::encode_type_and_size(&mut pack, 3, data.len() as u64);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(data).unwrap();
            pack.extend_from_slice(&z.finish().unwrap());
        }
        let sum = sha1::Sha1::digest(&pack);
        pack.extend_from_slice(&sum);
        pack
    }

    #[test]
    fn drop_removes_and_migrate_moves_packs() {
        let repo = tempfile::tempdir().unwrap();
        let objects = repo.path().join("objects");
        let pack_dir = objects.join("pack");
        std::fs::create_dir_all(&pack_dir).unwrap();
        let pack = blob_pack(&[b"hello\n"]);
        let id = crate::ObjectId::compute(crate::ObjectKind::Blob, b"hello\n").unwrap();
        let options = IngestOptions::default();

        // Refused: both files go on drop.
        let mut q = Quarantine::create(&objects).unwrap();
        q.ingest(&mut &pack[..], None, &options, &mut |_, _, _| {})
            .unwrap();
        assert_eq!(files(&pack_dir).len(), 2);
        assert!(files(&pack_dir).iter().all(|n| n.starts_with(PREFIX)));
        let db = q.objects().unwrap();
        assert_eq!(&db.read(&id).unwrap().unwrap().data[..], b"hello\n");
        drop(db);
        drop(q);
        assert!(files(&pack_dir).is_empty());

        // Accepted: renamed into place, nothing else left.
        let mut q = Quarantine::create(&objects).unwrap();
        let ingested = q
            .ingest(&mut &pack[..], None, &options, &mut |_, _, _| {})
            .unwrap();
        q.migrate().unwrap();
        let hex = ingested.hex;
        assert_eq!(
            files(&pack_dir),
            [format!("pack-{hex}.idx"), format!("pack-{hex}.pack")]
        );
        let db = ObjectDb::open(&objects, &OpenOptions::default()).unwrap();
        assert!(db.read(&id).unwrap().is_some());

        // The same pack again: the repository's copy stays, the quarantine's goes.
        let mut q = Quarantine::create(&objects).unwrap();
        q.ingest(&mut &pack[..], None, &options, &mut |_, _, _| {})
            .unwrap();
        q.migrate().unwrap();
        assert_eq!(files(&pack_dir).len(), 2);

        // A dead receiver's files are swept by the next quarantine.
        let dead = pack_dir.join(format!("{PREFIX}4194303999_1_0_pack"));
        std::fs::write(&dead, b"x").unwrap();
        let q = Quarantine::create(&objects).unwrap();
        assert!(!dead.exists());
        drop(q);
    }
}
