//! The modes of the files packd writes into `objects/pack`, compared with the ones git gives
//! the same files under the same umask: packs, `.idx`, `.rev` and `.bitmap` read-only (0444
//! less the umask), the `multi-pack-index` itself writable (0666 less the umask, git writes it
//! through a lock file).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Each file of `dir` (by extension, or its name when it has none: `multi-pack-index`) and its
/// permission bits. Temporary files would show up too (and fail the comparison).
fn modes(dir: &Path) -> BTreeMap<String, u32> {
    let mut modes = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = match name.rsplit_once('.') {
            Some((stem, ext)) if stem.starts_with("multi-pack-index") => format!("midx.{ext}"),
            Some((_, ext)) => ext.to_string(),
            None => name,
        };
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        if let Some(old) = modes.insert(kind.clone(), mode) {
            assert_eq!(
                old, mode,
                "two {kind} files with different modes in {dir:?}"
            );
        }
    }
    modes
}

/// `program args` in `cwd` under `umask`, with the sandbox's environment; must succeed.
fn run_with_umask(
    sb: &Sandbox,
    cwd: &Path,
    umask: &str,
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Run {
    let mut cmd = Command::new("sh");
    apply_env(&mut cmd, &sb.home);
    cmd.current_dir(cwd)
        .arg("-c")
        .arg(format!("umask {umask}; exec \"$@\""))
        .arg("sh")
        .arg(program)
        .args(args);
    let run = run_cmd(cmd, stdin, GIT_TIMEOUT);
    run.assert_success();
    run
}

/// A bare repository with a few commits in one pack (written by git), and that pack's bytes.
fn packed_repo(sb: &Sandbox, name: &str) -> (Repo, Vec<u8>) {
    let work = sb.init(&format!("{name}-work"));
    for i in 0..4 {
        std::fs::write(work.path.join(format!("f{i}")), format!("{i}\n").repeat(50)).unwrap();
        work.git(&["add", "."]);
        work.git(&["commit", "-q", "-m", &format!("c{i}")]);
    }
    let repo = sb.clone_bare(&work, name);
    repo.git(&["repack", "-adq"]);
    let pack = repo.packs().into_iter().next().expect("a pack");
    let bytes = std::fs::read(pack).unwrap();
    (repo, bytes)
}

#[test]
fn index_pack_writes_gits_modes_under_every_umask() {
    for umask in ["022", "077", "002"] {
        let sb = Sandbox::new();
        let (_, pack) = packed_repo(&sb, "src");
        let git = sb.init_bare("by-git.git");
        let packd = sb.init_bare("by-packd.git");
        let git_args = ["-c", "pack.writeReverseIndex=true", "index-pack", "--stdin"];
        run_with_umask(&sb, &git.path, umask, "git", &git_args, Some(&pack));
        let packd_args = ["index-pack", "--stdin", "--rev-index"];
        run_with_umask(&sb, &packd.path, umask, PACKD, &packd_args, Some(&pack));
        let want = modes(&git.pack_dir());
        assert_eq!(want.get("pack").copied(), Some(0o444 & !octal(umask)));
        assert_eq!(
            modes(&packd.pack_dir()),
            want,
            "index-pack --stdin, umask {umask}"
        );
    }
}

fn octal(umask: &str) -> u32 {
    u32::from_str_radix(umask, 8).unwrap()
}

#[test]
fn index_pack_of_a_file_writes_a_read_only_index() {
    let sb = Sandbox::new();
    let (_, pack) = packed_repo(&sb, "src");
    for who in ["git", "packd"] {
        let dir = sb.path().join(who);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("p.pack"), &pack).unwrap();
    }
    let git_args = ["-c", "pack.writeReverseIndex=true", "index-pack", "p.pack"];
    run_with_umask(&sb, &sb.path().join("git"), "022", "git", &git_args, None);
    let packd_args = ["index-pack", "--rev-index", "p.pack"];
    run_with_umask(
        &sb,
        &sb.path().join("packd"),
        "022",
        PACKD,
        &packd_args,
        None,
    );
    let git = modes(&sb.path().join("git"));
    assert_eq!(git.get("idx").copied(), Some(0o444));
    assert_eq!(modes(&sb.path().join("packd")), git);
}

#[test]
fn bitmaps_and_multi_pack_index_have_gits_modes() {
    for umask in ["022", "027"] {
        let sb = Sandbox::new();
        let (repo, _) = packed_repo(&sb, "src");
        let by_git = repo.copy_as(&sb, "by-git");
        let by_packd = repo.copy_as(&sb, "by-packd");

        // One pack: .bitmap and .rev.
        let git_args = ["-c", "pack.writeReverseIndex=true", "repack", "-adbq"];
        run_with_umask(&sb, &by_git.path, umask, "git", &git_args, None);
        run_with_umask(
            &sb,
            &by_packd.path,
            umask,
            PACKD,
            &["write-bitmap", "-q"],
            None,
        );
        let git = modes(&by_git.pack_dir());
        assert_eq!(git.get("bitmap").copied(), Some(0o444 & !octal(umask)));
        let packd = modes(&by_packd.pack_dir());
        // (The pack and its index are git's own, written before: packd adds the others.)
        for kind in ["rev", "bitmap"] {
            assert_eq!(packd.get(kind), git.get(kind), "{kind}, umask {umask}");
        }

        // A multi-pack-index and its bitmap.
        let git_args = ["multi-pack-index", "write", "--bitmap"];
        run_with_umask(&sb, &by_git.path, umask, "git", &git_args, None);
        let packd_args = ["write-bitmap", "--midx", "-q"];
        run_with_umask(&sb, &by_packd.path, umask, PACKD, &packd_args, None);
        let git = modes(&by_git.pack_dir());
        assert_eq!(
            git.get("multi-pack-index").copied(),
            Some(0o666 & !octal(umask))
        );
        let packd = modes(&by_packd.pack_dir());
        for kind in ["multi-pack-index", "midx.bitmap"] {
            assert_eq!(packd.get(kind), git.get(kind), "{kind}, umask {umask}");
        }
    }
}

#[test]
fn a_pushed_pack_is_read_only() {
    let sb = Sandbox::new();
    let (_, _) = packed_repo(&sb, "client");
    let client = Repo {
        path: sb.path().join("client-work"),
        git_dir: sb.path().join("client-work/.git"),
        home: sb.home.clone(),
    };
    let server = sb.init_bare("server.git");
    let rp = format!("--receive-pack={PACKD} receive-pack");
    let url = server.path.to_str().unwrap();
    run_with_umask(
        &sb,
        &client.path,
        "022",
        "git",
        &["push", "-q", &rp, url, "main"],
        None,
    );
    let packd = modes(&server.pack_dir());
    assert_eq!(packd.get("pack").copied(), Some(0o444), "{packd:?}");
    assert_eq!(packd.get("idx").copied(), Some(0o444), "{packd:?}");
}
