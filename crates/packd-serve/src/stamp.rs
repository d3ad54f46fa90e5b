//! What a repository's files looked like when it was opened, to tell whether an open
//! repository still shows every object on disk: taken before each request is served from the
//! cache ([`crate::repos`]), and by `packd receive-pack` between its advertisement and the push.
//!
//! ```text
//! objects/pack/          the names of its files, sorted (quarantine `tmp_*` and `*.lock`
//!                        files left out): a pack, index, bitmap or reverse index added or
//!                        removed changes the list, whatever the clocks say
//! multi-pack-index       its size and trailing checksum (it is rewritten under one name)
//! objects/info/alternates, objects/info/commit-graph(s), the config files git reads
//!                        (inode, size, modification time) of each
//! ```
//!
//! The pack directory is listed rather than stat'ed: a directory's modification time comes
//! from a coarse clock on many kernels (a tick of 1 to 10 ms), so a pack renamed into place
//! within the tick of the last change left the time as it was (and the size of an ext4
//! directory does not move), and a repository opened just before kept being served without
//! the pack: a fetch right after an acknowledged push then failed with "object ... is missing".
//! Pack names are their contents' checksums, so an unchanged list means unchanged packs.
//!
//! Taken before the repository is opened, so that the opened repository shows at least what
//! the stamp says: any change after the open changes the stamp.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Length of a SHA-1 trailer.
const TRAILER: usize = 20;

/// Identity of a plain file: inode, size, modification time (seconds and nanoseconds).
type FileId = (u64, u64, i64, i64);

/// The state of the files a repository's view of its objects depends on (see the module
/// documentation). Two stamps are equal when nothing an open would see differently changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// Names in `objects/pack`, sorted; `None` when it cannot be listed.
    pack_names: Option<Vec<String>>,
    /// The multi-pack-index's size and trailer.
    multi_pack_index: Option<(u64, [u8; TRAILER])>,
    /// The other files, in a fixed order.
    files: Vec<Option<FileId>>,
    /// For a repository in a store: the version of its `config` (an ETag).
    config_version: Option<String>,
}

fn file_id(path: &Path) -> Option<FileId> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec()))
}

/// The sorted names in `dir`, but those of files being written.
fn pack_names(dir: &Path) -> Option<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with("tmp_") && !name.ends_with(".lock"))
        .collect();
    names.sort_unstable();
    Some(names)
}

/// The size and the trailing checksum of the file at `path`.
fn size_and_trailer(path: &Path) -> Option<(u64, [u8; TRAILER])> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut trailer = [0u8; TRAILER];
    if len >= TRAILER as u64 {
        file.seek(SeekFrom::Start(len - TRAILER as u64)).ok()?;
        file.read_exact(&mut trailer).ok()?;
    }
    Some((len, trailer))
}

/// The objects directory of a git directory (following a linked worktree's `commondir`).
fn objects_dir(git_dir: &Path) -> PathBuf {
    match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) => git_dir.join(text.trim_end()).join("objects"),
        Err(_) => git_dir.join("objects"),
    }
}

impl Stamp {
    /// The stamp of the repository whose git directory is `git_dir`, now.
    pub fn of(git_dir: &Path) -> Stamp {
        let objects = objects_dir(git_dir);
        let pack = objects.join("pack");
        let mut files = vec![
            objects.join("info/alternates"),
            objects.join("info/commit-graph"),
            objects.join("info/commit-graphs/commit-graph-chain"),
        ];
        // The configuration files `Repository::open` reads: those of the common directory
        // (the objects directory's parent, also for a linked worktree).
        let common = objects.parent().unwrap_or(git_dir);
        files.extend(packd_odb::config::Config::standard_files(common));
        Stamp {
            pack_names: pack_names(&pack),
            multi_pack_index: size_and_trailer(&pack.join("multi-pack-index")),
            files: files.iter().map(|p| file_id(p)).collect(),
            config_version: None,
        }
    }

    /// The stamp of a repository in a store (see `crate::store`) whose objects are in
    /// `objects` and whose `config` is at the version `config_version` answers: the listing
    /// of its `pack/` (files are put there whole, under their final names) and that version.
    /// The two are asked side by side: a stamp is taken on every request, and in a bucket
    /// each is a round trip.
    pub fn of_storage(
        objects: &dyn packd_storage::Storage,
        config_version: impl FnOnce() -> Option<String> + Send,
    ) -> Stamp {
        let (pack_names, config_version) = std::thread::scope(|s| {
            let reads = packd_storage::RequestReads::current();
            let config = s.spawn(move || {
                let _charged = reads.as_ref().map(|r| r.enter());
                config_version()
            });
            let names = objects.list("pack").ok().map(|names| {
                names
                    .into_iter()
                    .filter(|name| !name.starts_with("tmp_") && !name.ends_with(".lock"))
                    .collect()
            });
            (names, config.join().ok().flatten())
        });
        Stamp {
            pack_names,
            multi_pack_index: None,
            files: Vec::new(),
            config_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    /// Sets the modification time of `path` (a directory too) to `time`.
    fn set_mtime(path: &Path, time: SystemTime) {
        std::fs::File::open(path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    }

    #[test]
    fn a_pack_renamed_in_is_seen_whatever_the_directory_time_says() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = tmp.path();
        let pack = git_dir.join("objects/pack");
        std::fs::create_dir_all(&pack).unwrap();
        std::fs::create_dir_all(git_dir.join("objects/info")).unwrap();
        // A push in flight: its quarantine files are there already.
        std::fs::write(pack.join("tmp_incoming_1_pack"), "pack").unwrap();
        std::fs::write(pack.join("tmp_incoming_1_idx"), "idx").unwrap();
        let mtime = std::fs::metadata(&pack).unwrap().modified().unwrap();
        let before = Stamp::of(git_dir);
        // Migrated: renamed into place (the directory's size does not change), within the
        // same clock tick (the time put back as it was).
        std::fs::rename(pack.join("tmp_incoming_1_pack"), pack.join("pack-1.pack")).unwrap();
        std::fs::rename(pack.join("tmp_incoming_1_idx"), pack.join("pack-1.idx")).unwrap();
        set_mtime(&pack, mtime);
        assert_eq!(std::fs::metadata(&pack).unwrap().modified().unwrap(), mtime);
        assert_ne!(Stamp::of(git_dir), before, "the new pack was not seen");
    }

    #[test]
    fn a_rewritten_multi_pack_index_is_seen_and_quarantine_files_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = tmp.path();
        let pack = git_dir.join("objects/pack");
        std::fs::create_dir_all(&pack).unwrap();
        let midx = pack.join("multi-pack-index");
        std::fs::write(&midx, [[1u8; 20], [2u8; 20]].concat()).unwrap();
        let mtime = std::fs::metadata(&midx).unwrap().modified().unwrap();
        let before = Stamp::of(git_dir);
        std::fs::write(pack.join("tmp_pack_x"), "").unwrap();
        std::fs::write(pack.join("multi-pack-index.lock"), "").unwrap();
        assert_eq!(Stamp::of(git_dir), before, "files being written count");
        // Rewritten in place, same size, same time: the trailer tells.
        std::fs::write(&midx, [[1u8; 20], [3u8; 20]].concat()).unwrap();
        set_mtime(&midx, mtime);
        assert_ne!(
            Stamp::of(git_dir),
            before,
            "the new multi-pack-index was not seen"
        );
    }

    /// The cost of a stamp (taken on every request), against the stat of the pack directory
    /// it replaced: `cargo test -p packd-serve stamp_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn stamp_cost() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = tmp.path().join("r.git");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", tmp.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
        };
        let dir = git_dir.to_str().unwrap();
        run(&["init", "-q", "--bare", dir]);
        let empty_tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        for ref_name in ["refs/heads/a", "refs/heads/b"] {
            let out = std::process::Command::new("git")
                .args(["-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"])
                .args(["commit-tree", "-m", ref_name, empty_tree])
                .output()
                .unwrap();
            let id = String::from_utf8(out.stdout).unwrap();
            run(&["-C", dir, "update-ref", ref_name, id.trim()]);
            run(&["-C", dir, "repack", "-q", "-d"]);
        }
        run(&["-C", dir, "multi-pack-index", "write", "--bitmap"]);
        let rounds = 20_000;
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(Stamp::of(&git_dir));
        }
        let new = start.elapsed() / rounds;
        let objects = git_dir.join("objects");
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            let mut stats: Vec<_> = ["pack", "info", "info/alternates", "info/commit-graphs"]
                .iter()
                .map(|p| std::fs::metadata(objects.join(p)).ok().map(|m| m.len()))
                .collect();
            stats.extend(
                packd_odb::config::Config::standard_files(&git_dir)
                    .iter()
                    .map(|p| std::fs::metadata(p).ok().map(|m| m.len())),
            );
            std::hint::black_box(stats);
        }
        let old = start.elapsed() / rounds;
        let names = pack_names(&objects.join("pack")).unwrap();
        println!(
            "{} pack files {names:?}: stamp {new:?}, stats alone {old:?}",
            names.len()
        );
    }
}
