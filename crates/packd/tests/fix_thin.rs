//! A thin pack completed by packd (`index-pack --fix-thin`, and a push's thin pack) is about
//! the size git's own completion makes: the bases it appends are compressed at the level
//! git's index-pack uses (`core.loosecompression`, else `core.compression`, else 1).

mod common;

use common::*;
use std::path::Path;

/// A bare repository holding `base` commit's history, a thin pack of the next commit (200
/// files each changed by a line, so 200 deltas against bases the pack leaves out), and the
/// work repository.
fn thin_pack(sb: &Sandbox) -> (Repo, Vec<u8>, Repo) {
    let work = sb.init("work");
    for i in 0..200 {
        let dir = work.path.join(format!("d{}", i % 10));
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = (i * 1000..i * 1000 + 3000)
            .map(|n| format!("{n}\n"))
            .collect();
        std::fs::write(dir.join(format!("f{i}.txt")), text).unwrap();
    }
    work.git(&["add", "."]);
    work.git(&["commit", "-q", "-m", "base"]);
    let base = sb.clone_bare(&work, "base.git");
    for i in 0..200 {
        let path = work.path.join(format!("d{}/f{i}.txt", i % 10));
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(b"change\n");
        std::fs::write(path, text).unwrap();
    }
    work.git(&["commit", "-q", "-a", "-m", "next"]);
    let pack = work.git_stdin(
        &["pack-objects", "--revs", "--thin", "--stdout", "-q"],
        b"HEAD\n^HEAD~1\n",
    );
    (base, pack, work)
}

/// The size of the pack `index-pack --fix-thin --stdin` of `program` adds to a copy of
/// `base` configured with `config`.
fn completed_size(
    sb: &Sandbox,
    base: &Repo,
    name: &str,
    config: &[(&str, &str)],
    program: &str,
    pack: &[u8],
) -> u64 {
    let repo = base.copy_as(sb, name);
    for (key, value) in config {
        repo.git(&["config", key, value]);
    }
    let before = repo.packs();
    let run = if program == "git" {
        repo.git_run(&["index-pack", "--fix-thin", "--stdin"], Some(pack))
    } else {
        repo.packd(&["index-pack", "--fix-thin", "--stdin"], Some(pack))
    };
    run.assert_success();
    new_pack_size(&repo, &before)
}

fn new_pack_size(repo: &Repo, before: &[std::path::PathBuf]) -> u64 {
    let new: Vec<_> = repo
        .packs()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    size(&new[0])
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn completed_thin_pack_is_about_gits_size_at_every_level() {
    let sb = Sandbox::new();
    let (base, pack, _) = thin_pack(&sb);
    let cases: [&[(&str, &str)]; 5] = [
        &[],
        &[("core.compression", "9")],
        &[("core.compression", "-1")],
        // pack.compression is not index-pack's: the default level still.
        &[("pack.compression", "0")],
        &[("core.compression", "9"), ("core.loosecompression", "0")],
    ];
    for (n, config) in cases.iter().enumerate() {
        let git = completed_size(&sb, &base, &format!("git{n}.git"), config, "git", &pack);
        let packd = completed_size(&sb, &base, &format!("packd{n}.git"), config, "packd", &pack);
        // libdeflate compresses a little better than zlib at the same level: never more
        // than a tenth bigger than git's.
        assert!(
            packd * 10 <= git * 11,
            "config {config:?}: packd's completed pack is {packd} bytes, git's {git}"
        );
        // Level 0 (loose compression 0 wins over core.compression) stores the bases, as git.
        if n == 4 {
            assert!(packd * 10 >= git * 9, "level 0: packd {packd}, git {git}");
        }
    }
}

#[test]
fn a_bad_compression_level_is_refused_as_git_refuses_it() {
    let sb = Sandbox::new();
    let (base, pack, _) = thin_pack(&sb);
    for who in ["git", "packd"] {
        let repo = base.copy_as(&sb, &format!("{who}.git"));
        repo.git(&["config", "core.compression", "12"]);
        let before = repo.packs();
        let run = if who == "git" {
            repo.git_run(&["index-pack", "--fix-thin", "--stdin"], Some(&pack))
        } else {
            repo.packd(&["index-pack", "--fix-thin", "--stdin"], Some(&pack))
        };
        assert_eq!(run.code(), Some(128), "{who}: {}", run.err());
        assert!(
            run.err().contains("fatal: bad zlib compression level 12"),
            "{who}: {}",
            run.err()
        );
        assert_eq!(repo.packs(), before, "{who} left a pack");
    }
}

#[test]
fn a_pushed_thin_pack_is_completed_at_gits_level() {
    let sb = Sandbox::new();
    let (base, _, work) = thin_pack(&sb);
    let mut sizes = Vec::new();
    for who in ["git", "packd"] {
        let server = base.copy_as(&sb, &format!("server-{who}.git"));
        let before = server.packs();
        let url = server.path.to_str().unwrap().to_string();
        let mut args = vec!["push", "-q"];
        let rp = format!("--receive-pack={PACKD} receive-pack");
        if who == "packd" {
            args.push(&rp);
        }
        args.extend([url.as_str(), "main"]);
        work.git(&args);
        sizes.push(new_pack_size(&server, &before));
    }
    let (git, packd) = (sizes[0], sizes[1]);
    assert!(
        packd * 10 <= git * 11,
        "packd's completed pack is {packd} bytes, git's {git}"
    );
}
