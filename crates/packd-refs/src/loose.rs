//! Loose ref files: reading one ref's value (loose, else packed), writing one crash-safely
//! (temp file, fsync, rename over the ref), removing one and the directories it leaves empty.
//!
//! ```text
//! <common>/refs/heads/main   "<40 hex>\n"   (or "ref: <target>\n", a symbolic ref: not ours)
//! ```

use packd_odb::ObjectId;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

/// What a ref is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Current {
    /// No loose file and no packed line.
    Missing,
    /// Its value, loose or packed.
    Id(ObjectId),
}

/// Why a ref's value cannot be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// A symbolic ref: push does not write through them.
    Symbolic,
    /// A loose file that is not `<hex>\n`, or an unreadable packed-refs: the text says which.
    Broken(String),
}

/// The value of `name`: its loose file, else its `packed-refs` line. Reads at most a ref
/// file's useful length.
pub(crate) fn current(common: &Path, name: &str) -> Result<Current, ReadError> {
    let path = common.join(name);
    match File::open(&path) {
        Ok(file) => {
            if file.metadata().is_ok_and(|m| m.is_dir()) {
                return packed(common, name);
            }
            let mut text = String::new();
            file.take(4096 + 5)
                .read_to_string(&mut text)
                .map_err(|e| ReadError::Broken(format!("cannot read {name}: {e}")))?;
            if text.starts_with("ref:") {
                return Err(ReadError::Symbolic);
            }
            ObjectId::from_hex(text.get(..40).unwrap_or(""))
                .filter(|_| text[40..].trim().is_empty())
                .map(Current::Id)
                .ok_or_else(|| ReadError::Broken(format!("{name} is not a valid ref file")))
        }
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(20) => {
            packed(common, name)
        }
        Err(e) => Err(ReadError::Broken(format!("cannot read {name}: {e}"))),
    }
}

fn packed(common: &Path, name: &str) -> Result<Current, ReadError> {
    match packd_odb::packed_refs::PackedRefs::read(common) {
        Ok(Some(p)) => Ok(p.find(name).map_or(Current::Missing, Current::Id)),
        Ok(None) => Ok(Current::Missing),
        Err(e) => Err(ReadError::Broken(format!("cannot read packed-refs: {e}"))),
    }
}

/// Whether a loose file (not a directory) exists at `name`.
pub(crate) fn is_loose_file(common: &Path, name: &str) -> bool {
    std::fs::symlink_metadata(common.join(name)).is_ok_and(|m| !m.is_dir())
}

/// Writes `id` as the value of `name`: into `temp` (fsynced), renamed over the ref. An empty
/// directory tree standing at the ref's path (left by deleted refs) is removed first.
pub(crate) fn write(common: &Path, name: &str, id: &ObjectId, temp: &Path) -> std::io::Result<()> {
    let path = common.join(name);
    let mut file = OpenOptions::new().write(true).create_new(true).open(temp)?;
    let written = file
        .write_all(format!("{}\n", id.to_hex()).as_bytes())
        .and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written {
        let _ = std::fs::remove_file(temp);
        return Err(e);
    }
    if path.is_dir() {
        remove_empty_tree(&path);
    }
    let renamed = std::fs::rename(temp, &path);
    if renamed.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    renamed
}

/// Removes `dir` and the directories below it, when none holds a file.
pub(crate) fn remove_empty_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes the loose file of `name` (absent is fine) and the directories it leaves empty up
/// to `refs/<kind>/`.
pub(crate) fn remove(common: &Path, name: &str) -> std::io::Result<()> {
    match std::fs::remove_file(common.join(name)) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    prune_dirs(common, name);
    Ok(())
}

/// Removes now-empty directories between a deleted ref and `refs/<kind>`.
fn prune_dirs(common: &Path, name: &str) {
    let mut dir = Path::new(name).parent();
    while let Some(d) = dir {
        if d.components().count() <= 2 || std::fs::remove_dir(common.join(d)).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// fsyncs the directories that hold `names` (the nearest that still exists for a removed
/// ref), and `common` when `packed` (packed-refs was replaced): a rename or removal is
/// durable once its directory is. Each directory once.
pub(crate) fn sync_dirs<'a>(common: &Path, names: impl Iterator<Item = &'a str>, packed: bool) {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if packed {
        dirs.push(common.to_path_buf());
    }
    for name in names {
        let mut dir = common.join(name).parent().map(Path::to_path_buf);
        while dir.as_ref().is_some_and(|d| !d.is_dir()) {
            dir = dir.and_then(|d| d.parent().map(Path::to_path_buf));
        }
        if let Some(d) = dir {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    for d in &dirs {
        sync_dir(d);
    }
}

/// fsyncs one directory (best effort: a file system that cannot is left as it is).
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}
