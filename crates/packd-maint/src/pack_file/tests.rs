//! Packs written by [`super::PackFileWriter`], checked by git itself.

use super::*;
use packd_odb::pack::data::EntryKind;
use std::path::{Path, PathBuf};

/// Runs git in `dir`; its stdout on success.
pub(crate) fn git(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut child = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("git runs");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A bare repository with one pack of a few hundred objects, deltas among them.
pub(crate) fn packed_repo(dir: &Path) -> PathBuf {
    let mut stream = Vec::new();
    for c in 0..30u32 {
        stream.extend_from_slice(
            format!(
                "commit refs/heads/main\ncommitter A <a@example.com> {} +0000\ndata 2\nc\n",
                1_700_000_000 + c
            )
            .as_bytes(),
        );
        for f in 0..3u32 {
            let body: String = (0..200)
                .map(|l| format!("file {f} line {l} {}\n", if l == c { c } else { 0 }))
                .collect();
            stream.extend_from_slice(
                format!("M 644 inline f{f}\ndata {}\n{body}\n", body.len()).as_bytes(),
            );
        }
    }
    git(dir, &["init", "-q", "--bare", "r.git"], None);
    let repo = dir.join("r.git");
    git(&repo, &["fast-import", "--quiet"], Some(&stream));
    git(&repo, &["repack", "-adfq"], None);
    repo
}

/// How each entry of the test goes into the new pack.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// As it is on disk.
    Reuse,
    /// Inflated and compressed again whole.
    Whole,
    /// Every other entry as it is, the others whole (compressed at another level): reused
    /// deltas then have their distances rewritten.
    Mixed,
    /// Deltas given as new deltas (their on-disk compressed bytes), the rest whole.
    NewDeltas,
}

/// Writes the only pack of `repo` again into `repo`, `way`, in its own order; removes the old
/// pack; returns what was written.
fn rewrite(repo: &Path, way: Way) -> WrittenPack {
    let opened = packd_odb::Repository::open(repo, &Default::default()).unwrap();
    let odb = opened.objects();
    let pack = odb.packs().next().unwrap().clone();
    let storage = odb.own_storage().unwrap().clone();
    let offsets = pack.sorted_offsets().unwrap().to_vec();
    let positions = pack.positions_in_pack_order().unwrap().to_vec();
    let level = if way == Way::Mixed { 1 } else { -1 };
    let mut writer = PackFileWriter::new(
        storage,
        HashKind::Sha1,
        pack.len(),
        compression_level(level),
    )
    .unwrap();
    let mut new_index = std::collections::HashMap::new();
    for (i, &index_pos) in positions.iter().enumerate() {
        let offset = offsets[i];
        let id = pack.index().id(index_pos);
        let raw = pack.raw_entry(offset).unwrap();
        let base = match raw.header.kind {
            EntryKind::Base(_) => None,
            EntryKind::OfsDelta { base_offset } => Some(new_index[&base_offset]),
            EntryKind::RefDelta { .. } => panic!("git wrote ofs deltas"),
        };
        let n = match (way, base) {
            (Way::Mixed, _) if i % 2 == 0 => writer.reuse_entry(id, &pack, offset, base).unwrap(),
            (Way::Reuse, _) => writer.reuse_entry(id, &pack, offset, base).unwrap(),
            (Way::NewDeltas, Some(base)) => writer
                .delta(id, base, raw.compressed(), raw.header.size)
                .unwrap(),
            _ => {
                let (kind, data) = pack.decode(offset, odb.cache()).unwrap();
                writer.whole(id, kind, &data).unwrap()
            }
        };
        new_index.insert(offset, n);
    }
    writer.finish().unwrap()
}

fn files_of(repo: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn written_packs_pass_git_checks_and_index_like_git() {
    for way in [Way::Reuse, Way::Mixed, Way::Whole, Way::NewDeltas] {
        let dir = tempfile::tempdir().unwrap();
        let repo = packed_repo(dir.path());
        let old = files_of(&repo);
        let written = rewrite(&repo, way);
        let pack_path = repo.join("objects").join(&written.name);
        let base = written.base_name();
        let now = files_of(&repo);
        for ext in ["pack", "rev", "idx"] {
            assert!(now.contains(&format!("{base}.{ext}")), "{now:?}");
        }
        assert!(!now.iter().any(|n| n.starts_with("tmp_")), "{now:?}");
        // git's own index of the new pack is byte for byte ours.
        let git_idx = dir.path().join("git.idx");
        git(
            dir.path(),
            &[
                "index-pack",
                "-o",
                git_idx.to_str().unwrap(),
                pack_path.to_str().unwrap(),
            ],
            None,
        );
        let ours = std::fs::read(repo.join("objects").join(written.idx_name())).unwrap();
        assert_eq!(std::fs::read(&git_idx).unwrap(), ours, "the .idx");
        let verify = git(
            &repo,
            &["verify-pack", "-v", pack_path.to_str().unwrap()],
            None,
        );
        let verify = String::from_utf8(verify).unwrap();
        let deltas = verify.lines().filter(|l| l.split(' ').count() > 6).count();
        match way {
            Way::Whole => assert!(verify.contains("non delta: "), "{verify}"),
            _ => assert!(deltas > 0, "{verify}"),
        }
        // The old pack removed, the repository is whole with the new one alone.
        assert_eq!(written.existed, way == Way::Reuse, "the same pack again");
        for name in old.iter().filter(|n| !n.starts_with(&base)) {
            std::fs::remove_file(repo.join("objects/pack").join(name)).unwrap();
        }
        git(&repo, &["fsck", "--strict", "--no-dangling"], None);
        assert_eq!(written.entries.len() as u32, {
            let opened = packd_odb::Repository::open(&repo, &Default::default()).unwrap();
            let n = opened.objects().packs().next().unwrap().len();
            n
        });
    }
}

#[test]
fn a_damaged_entry_fails_the_write_and_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let repo = packed_repo(dir.path());
    let pack_file = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    // Flip a byte inside the data of the last whole entry.
    let (last, end) = {
        let opened = packd_odb::Repository::open(&repo, &Default::default()).unwrap();
        let pack = opened.objects().packs().next().unwrap().clone();
        let offsets = pack.sorted_offsets().unwrap().to_vec();
        let i = (0..offsets.len() - 1)
            .rev()
            .find(|&i| {
                matches!(
                    pack.entry_header(offsets[i]).unwrap().kind,
                    EntryKind::Base(_)
                )
            })
            .unwrap();
        (offsets[i], offsets[i + 1])
    };
    let mut bytes = std::fs::read(&pack_file).unwrap();
    bytes[(end - 2) as usize] ^= 0x55;
    let mut perms = std::fs::metadata(&pack_file).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&pack_file, perms).unwrap();
    std::fs::write(&pack_file, &bytes).unwrap();
    let before = files_of(&repo);

    let opened = packd_odb::Repository::open(&repo, &Default::default()).unwrap();
    let odb = opened.objects();
    let pack = odb.packs().next().unwrap().clone();
    let (index_pos, _) = pack.entry_span(last).unwrap();
    let id = pack.index().id(index_pos);
    let mut writer = PackFileWriter::new(
        odb.own_storage().unwrap().clone(),
        HashKind::Sha1,
        1,
        compression_level(-1),
    )
    .unwrap();
    let err = match writer.reuse_entry(id, &pack, last, None) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the damaged entry was taken"),
    };
    assert!(
        err.contains("CRC-32") && err.contains(&format!("offset {last}")),
        "{err}"
    );
    drop(writer);
    assert_eq!(files_of(&repo), before);
}

#[test]
fn misuse_is_an_error_not_a_bad_pack() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(packd_storage::LocalStorage::new(dir.path()));
    let id = ObjectId::from_bytes(&[1; 20]).unwrap();
    let mut w =
        PackFileWriter::new(storage.clone(), HashKind::Sha1, 1, compression_level(-1)).unwrap();
    assert!(matches!(
        w.delta(id, 0, b"x", 1),
        Err(PackFileError::Misuse(_))
    ));
    w.whole(id, ObjectKind::Blob, b"hello").unwrap();
    assert!(w.whole(id, ObjectKind::Blob, b"again").is_err());
    let w2 = PackFileWriter::new(storage, HashKind::Sha1, 2, compression_level(-1)).unwrap();
    assert!(matches!(w2.finish(), Err(PackFileError::Misuse(_))));
    w.finish().unwrap();
}
