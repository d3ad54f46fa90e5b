//! The clone cache (`--clone-cache-bytes`) with the real git client through
//! `packd upload-pack`: a repeated clone is sent from the kept pack, new history or new tags
//! make a new one, fetches with haves never touch it, the budget is kept, and a damaged kept
//! pack is not used. Over HTTP, `packd serve` sends a kept pack from its file (`sendfile`).
//! A clone that is a pack's entries as they are, then pushed objects, is kept as a recipe
//! (ranges of the pack), replayed byte for byte; a damaged recipe, or one whose pack a
//! repack removed, is not used.

mod common;
mod serve_support;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A repository of a little over 10,000 objects (the cache keeps clones of 10,000 or more):
/// one commit of 10,050 small files, then (imported apart, so that no clone is one pack file
/// as it is) a second commit and an annotated tag.
fn big_enough(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("src.git");
    let mut stream = Vec::new();
    stream.extend_from_slice(
        b"commit refs/heads/main\ncommitter A <a@example.com> 1700000000 +0000\ndata 6\nfirst\n",
    );
    for i in 0..10_050 {
        let body = format!("file {i}\n");
        stream.extend_from_slice(
            format!(
                "M 644 inline d{}/f{i}.txt\ndata {}\n{body}\n",
                i % 50,
                body.len()
            )
            .as_bytes(),
        );
    }
    repo.fast_import(&stream);
    repo.fast_import(
        b"commit refs/heads/main\ncommitter A <a@example.com> 1700000100 +0000\ndata 7\nsecond\n\
          from refs/heads/main^0\nM 644 inline extra.txt\ndata 6\nextra\n\n\
          tag v1\nfrom refs/heads/main\ntagger A <a@example.com> 1700000200 +0000\ndata 4\nv1!\n\n",
    );
    assert!(
        repo.packs().len() == 2 || repo.loose_count() > 0,
        "the second import is apart from the first"
    );
    repo
}

fn cache_dir(repo: &Repo) -> PathBuf {
    repo.path.join("packd-cache").join("clone")
}

/// The names in the cache directory with this suffix.
fn cached(repo: &Repo, suffix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache_dir(repo)) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

/// `git clone --bare` from `repo` through packd upload-pack with `extra` options.
fn clone(sb: &Sandbox, repo: &Repo, dest: &str, version: u8, extra: &str) -> PathBuf {
    clone_said(sb, repo, dest, version, extra).0
}

/// [`clone`], with what the clone printed on stderr (packd's warnings among it).
fn clone_said(
    sb: &Sandbox,
    repo: &Repo,
    dest: &str,
    version: u8,
    extra: &str,
) -> (PathBuf, String) {
    let dest = sb.path().join(dest);
    let mut cmd = sb.git_cmd(sb.path());
    cmd.arg("-c")
        .arg(format!("protocol.version={version}"))
        .args(["clone", "-q", "--bare", "--no-local"])
        .arg(format!("--upload-pack={PACKD} upload-pack {extra}"))
        .arg(&repo.path)
        .arg(&dest);
    let run = run_cmd(cmd, None, GIT_TIMEOUT);
    run.assert_success();
    let fsck = sb.git_run_in(&dest, &["fsck", "--strict", "--no-dangling"], None);
    fsck.assert_success();
    (dest, run.err())
}

fn refs(sb: &Sandbox, dir: &Path) -> String {
    String::from_utf8(sb.git_in(dir, &["for-each-ref", "--format=%(objectname) %(refname)"]))
        .unwrap()
}

fn object_count(sb: &Sandbox, dir: &Path) -> usize {
    sb.git_in(dir, &["cat-file", "--batch-all-objects", "--batch-check"])
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count()
}

/// Sets `path`'s modification time far in the past, so that a use (which renews it) shows.
fn age(path: &Path) {
    let file = std::fs::File::options().append(true).open(path).unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .unwrap();
}

fn recently_used(path: &Path) -> bool {
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    modified > SystemTime::now() - Duration::from_secs(3600)
}

#[test]
fn a_repeated_clone_is_sent_from_the_kept_pack() {
    let sb = Sandbox::new();
    let repo = big_enough(&sb);
    let first = clone(&sb, &repo, "first.git", 2, "");
    let packs = cached(&repo, ".pack");
    assert_eq!(packs.len(), 1, "one pack kept after the first clone");
    assert_eq!(cached(&repo, ".meta").len(), 1);
    // The kept pack is the one the client received, byte for byte.
    let received = std::fs::read_dir(first.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    assert_same_bytes(
        "kept pack",
        &std::fs::read(&received).unwrap(),
        &std::fs::read(&packs[0]).unwrap(),
    );
    age(&packs[0]);
    for (version, name) in [(2u8, "second.git"), (0, "third.git")] {
        let again = clone(&sb, &repo, name, version, "");
        assert!(
            recently_used(&packs[0]),
            "protocol v{version}: the kept pack was not used"
        );
        assert_eq!(refs(&sb, &again), refs(&sb, &repo.path));
        assert_eq!(object_count(&sb, &again), object_count(&sb, &first));
        age(&packs[0]);
    }
    assert_eq!(
        cached(&repo, ".pack").len(),
        1,
        "no second pack for the same clone"
    );
}

/// Two clones of `repo` (`kind`: `--bare` or `--mirror`) over HTTP from one `packd serve`
/// logging the pack writer's debug lines, each checked by `git fsck`: the server, and the pack
/// each clone received.
fn two_http_clones(sb: &Sandbox, repo: &Repo, kind: &str) -> (serve_support::Server, Vec<Vec<u8>>) {
    let server = serve_support::Server::start_logging(sb, sb.path(), &[], "info,packd_pack=debug");
    let url = format!("http://{}/src.git", server.http);
    let mut received = Vec::new();
    for name in ["first.git", "second.git"] {
        let dest = sb.path().join(name);
        let mut cmd = sb.git_cmd(sb.path());
        cmd.args(["-c", "protocol.version=2", "clone", "-q", kind])
            .arg(&url)
            .arg(&dest);
        run_cmd(cmd, None, GIT_TIMEOUT).assert_success();
        sb.git_run_in(&dest, &["fsck", "--strict", "--no-dangling"], None)
            .assert_success();
        assert_eq!(refs(sb, &dest), refs(sb, &repo.path));
        received.push(serve_support::only_pack_of(&dest));
    }
    (server, received)
}

/// Over HTTP the kept pack goes out from its file (`sendfile`, the bytes never pass through
/// packd): the repeated clone is complete and byte for byte the first one's pack, which is the
/// kept file.
#[test]
fn over_http_the_kept_pack_is_sent_from_its_file() {
    let sb = Sandbox::new();
    let repo = big_enough(&sb);
    let (server, received) = two_http_clones(&sb, &repo, "--bare");
    assert_eq!(cached(&repo, ".pack").len(), 1, "the first clone was kept");
    assert_same_bytes("the repeated clone's pack", &received[1], &received[0]);
    let kept = std::fs::read(&cached(&repo, ".pack")[0]).unwrap();
    assert_same_bytes("the kept pack", &kept, &received[0]);
    let log = server.log_text();
    assert_eq!(
        log.matches("sent as file ranges").count(),
        1,
        "the repeated clone went out from the kept file:\n{log}"
    );
    // The first clone, copied into the cache as it went, still sent its runs of reused
    // entries by sendfile (and the kept copy, checked above, got them from the pack file).
    assert!(
        log.contains("went out by sendfile"),
        "the clone that filled the cache sent no file range:\n{log}"
    );
}

#[test]
fn new_history_or_a_new_tag_makes_a_new_pack_and_fetches_leave_the_cache_alone() {
    let sb = Sandbox::new();
    let repo = big_enough(&sb);
    let first = clone(&sb, &repo, "first.git", 2, "");
    assert_eq!(cached(&repo, ".pack").len(), 1);
    // A new annotated tag on old history changes what include-tag sends.
    repo.git(&["tag", "-a", "-m", "old one", "v0", "main~1"]);
    let tagged = clone(&sb, &repo, "tagged.git", 2, "");
    assert_eq!(refs(&sb, &tagged), refs(&sb, &repo.path));
    assert_eq!(cached(&repo, ".pack").len(), 2);
    // A new commit: the fetch has haves, so it is neither kept nor answered from the cache.
    repo.fast_import(
        b"commit refs/heads/main\ncommitter A <a@example.com> 1700000300 +0000\ndata 6\nthird\n\
          from refs/heads/main^0\nM 644 inline more.txt\ndata 5\nmore\n\n",
    );
    let fetch = sb.git_run_in(
        &first,
        &[
            "fetch",
            "-q",
            &format!("--upload-pack={PACKD} upload-pack"),
            repo.path.to_str().unwrap(),
            "+refs/*:refs/*",
        ],
        None,
    );
    fetch.assert_success();
    assert_eq!(refs(&sb, &first), refs(&sb, &repo.path));
    assert_eq!(
        cached(&repo, ".pack").len(),
        2,
        "a fetch with haves was kept"
    );
    let newer = clone(&sb, &repo, "newer.git", 2, "");
    assert_eq!(refs(&sb, &newer), refs(&sb, &repo.path));
    assert_eq!(cached(&repo, ".pack").len(), 3);
}

#[test]
fn the_budget_is_kept_and_zero_turns_the_cache_off() {
    let sb = Sandbox::new();
    let repo = big_enough(&sb);
    clone(&sb, &repo, "off.git", 2, "--clone-cache-bytes 0");
    assert!(
        !cache_dir(&repo).exists(),
        "a cache was made with a budget of 0"
    );
    // A budget smaller than the pack: nothing kept, no temporary file left.
    clone(&sb, &repo, "small.git", 2, "--clone-cache-bytes 10k");
    assert!(cached(&repo, ".pack").is_empty());
    assert!(
        cached(&repo, "").is_empty(),
        "left behind: {:?}",
        cached(&repo, "")
    );
    // Room for one clone pack only: the second evicts the first.
    clone(&sb, &repo, "measure.git", 2, "--clone-cache-bytes 1g");
    let size = std::fs::metadata(&cached(&repo, ".pack")[0]).unwrap().len();
    let room = format!("--clone-cache-bytes {}", size + size / 2);
    repo.git(&["tag", "-a", "-m", "another", "v2", "main~1"]);
    clone(&sb, &repo, "one.git", 2, &room);
    let one = cached(&repo, ".pack");
    assert_eq!(one.len(), 1, "the budget was not kept");
    repo.git(&["tag", "-a", "-m", "yet another", "v3", "main~1"]);
    clone(&sb, &repo, "two.git", 2, &room);
    let two = cached(&repo, ".pack");
    assert_eq!(two.len(), 1);
    assert_ne!(one, two, "the least recently used pack was not evicted");
}

#[test]
fn a_damaged_kept_pack_is_not_used() {
    let sb = Sandbox::new();
    let repo = big_enough(&sb);
    let first = clone(&sb, &repo, "first.git", 2, "");
    let packs = cached(&repo, ".pack");
    assert_eq!(packs.len(), 1);
    // Cut short: its size no longer matches its record.
    let bytes = std::fs::read(&packs[0]).unwrap();
    std::fs::write(&packs[0], &bytes[..bytes.len() / 2]).unwrap();
    let again = clone(&sb, &repo, "again.git", 2, "");
    assert_eq!(refs(&sb, &again), refs(&sb, &repo.path));
    assert_eq!(object_count(&sb, &again), object_count(&sb, &first));
    // A record that is not packd's: ignored too.
    let meta = cached(&repo, ".meta");
    std::fs::write(&meta[0], "not a record\n").unwrap();
    let third = clone(&sb, &repo, "third.git", 2, "");
    assert_eq!(object_count(&sb, &third), object_count(&sb, &first));
}

/// The pack file of `repo` (it has one) and its checksum in hex.
fn only_pack(repo: &Repo) -> (PathBuf, String) {
    let packs = repo.packs();
    assert_eq!(packs.len(), 1, "{packs:?}");
    let bytes = std::fs::read(&packs[0]).unwrap();
    let checksum = hex(&bytes[bytes.len() - 20..]);
    (packs[0].clone(), checksum)
}

/// A clone whose answer is the repository's pack file as it is (`repack -adb`, every object
/// wanted) is kept as a record naming that pack, not as a copy; the next clone is sent from the
/// pack; once a repack replaced the pack, the record is dropped and made again for the new one.
#[test]
fn a_clone_that_is_a_whole_pack_is_kept_as_a_record_of_it() {
    let sb = Sandbox::new();
    let repo = big_enough(&sb);
    repo.git(&["repack", "-adbq"]);
    let (_, checksum) = only_pack(&repo);
    let first = clone(&sb, &repo, "first.git", 2, "");
    assert!(
        cached(&repo, ".pack").is_empty(),
        "a copy of the pack was kept"
    );
    let metas = cached(&repo, ".meta");
    assert_eq!(metas.len(), 1);
    let record = std::fs::read_to_string(&metas[0]).unwrap();
    assert!(
        record.contains(&format!("\npack {checksum}\n")),
        "the record names another pack: {record}"
    );
    // A line the record's reader ignores: still there after the next clone, the record was
    // used, not written again.
    std::fs::write(&metas[0], format!("{record}note kept\n")).unwrap();
    age(&metas[0]);
    let again = clone(&sb, &repo, "again.git", 2, "");
    assert!(recently_used(&metas[0]), "the record was not used");
    assert!(
        std::fs::read_to_string(&metas[0])
            .unwrap()
            .ends_with("note kept\n"),
        "the record was written again, not used"
    );
    assert_eq!(refs(&sb, &again), refs(&sb, &repo.path));
    assert_eq!(object_count(&sb, &again), object_count(&sb, &first));

    // The same objects packed again, into other bytes: the record's pack is gone.
    repo.git(&["-c", "pack.compression=1", "repack", "-adbfq"]);
    let (_, repacked) = only_pack(&repo);
    assert_ne!(repacked, checksum);
    let third = clone(&sb, &repo, "third.git", 2, "");
    assert_eq!(object_count(&sb, &third), object_count(&sb, &first));
    let metas = cached(&repo, ".meta");
    assert_eq!(metas.len(), 1);
    let record = std::fs::read_to_string(&metas[0]).unwrap();
    assert!(
        record.contains(&format!("\npack {repacked}\n")),
        "the record was not made again for the new pack: {record}"
    );
    assert!(cached(&repo, ".pack").is_empty());
}

/// A repository packed with `repack -adb`, then a push (a loose commit on `main`).
fn packed_then_pushed(sb: &Sandbox) -> Repo {
    let repo = big_enough(sb);
    repo.git(&["repack", "-adbq"]);
    repo.commit_on_main("pushed\n");
    assert_eq!(repo.loose_count(), 1, "the pushed commit is loose");
    repo
}

/// After a push, a mirror clone of a repository packed with `repack -adb` is the pack's
/// entries as they are, then the pushed objects: that stream is kept as a recipe of a few
/// steps (no record: it is not the pack file; no copy: its entries are one range of the
/// pack), and the next clone is replayed from it, byte for byte the first one's.
#[test]
fn a_clone_of_the_pack_then_what_was_pushed_is_kept_as_a_recipe() {
    let sb = Sandbox::new();
    let repo = packed_then_pushed(&sb);
    let first = clone(&sb, &repo, "first.git", 2, "");
    assert!(cached(&repo, ".pack").is_empty(), "a copy was kept");
    let kept = cached(&repo, ".recipe");
    assert_eq!(kept.len(), 1, "the clone was kept as a recipe");
    let received = serve_support::only_pack_of(&first);
    let recipe_len = std::fs::metadata(&kept[0]).unwrap().len();
    assert!(
        recipe_len < 1024,
        "a recipe of {recipe_len} bytes for a pack of {}",
        received.len()
    );
    // The pack's entries as they are, then the commit.
    let served = serve_support::only_pack_of(&repo.path);
    serve_support::assert_pack_then("the clone", &served, &received, 1);
    age(&kept[0]);
    for (version, name) in [(2u8, "again.git"), (0, "v0.git")] {
        let again = clone(&sb, &repo, name, version, "");
        assert!(
            recently_used(&kept[0]),
            "protocol v{version}: the kept recipe was not used"
        );
        assert_same_bytes(
            &format!("protocol v{version}: the replayed pack"),
            &serve_support::only_pack_of(&again),
            &received,
        );
        assert_eq!(refs(&sb, &again), refs(&sb, &repo.path));
        age(&kept[0]);
    }
}

/// Over HTTP a recipe is replayed too, its pack's range as file ranges (`sendfile`), byte for
/// byte the first clone's pack, which a mirror clone checks whole.
#[test]
fn over_http_a_recipe_is_replayed() {
    let sb = Sandbox::new();
    let repo = packed_then_pushed(&sb);
    let (server, received) = two_http_clones(&sb, &repo, "--mirror");
    assert_eq!(
        cached(&repo, ".recipe").len(),
        1,
        "the first clone was kept"
    );
    assert_same_bytes("the replayed clone's pack", &received[1], &received[0]);
    let log = server.log_text();
    let replayed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sent from a clone recipe"))
        .collect();
    assert_eq!(
        replayed.len(),
        1,
        "the repeated clone was not replayed:\n{log}"
    );
    assert!(
        !replayed[0].contains(" 0 file ranges"),
        "the pack's range was not sent from its file: {}",
        replayed[0]
    );
}

/// Where the first range step of a recipe file starts (see `packd-pack`'s `recipe` module:
/// a first line, then steps `L` len bytes, or `R` pack offset len).
fn first_range_step(recipe: &[u8]) -> usize {
    let mut at = recipe.iter().position(|&b| b == b'\n').unwrap() + 1;
    loop {
        match recipe[at] {
            b'L' => {
                let len = u32::from_be_bytes(recipe[at + 1..at + 5].try_into().unwrap());
                at += 5 + len as usize;
            }
            b'R' => return at,
            other => panic!("no range step before {other:#04x} at {at}"),
        }
    }
}

/// A damaged recipe is not replayed: cut short, or with a range past its pack's entries. The
/// clone is counted again, and its own recipe takes the damaged one's place.
#[test]
fn a_damaged_recipe_is_not_used() {
    let sb = Sandbox::new();
    let repo = packed_then_pushed(&sb);
    let first = clone(&sb, &repo, "first.git", 2, "");
    let received = serve_support::only_pack_of(&first);
    let recipes = cached(&repo, ".recipe");
    assert_eq!(recipes.len(), 1);
    let bytes = std::fs::read(&recipes[0]).unwrap();
    // The range's offset moved past the pack's entries, and the recipe's own checksum made
    // again, so that it is the check against the pack that refuses it.
    let mut past_the_end = bytes.clone();
    let at = first_range_step(&bytes);
    past_the_end[at + 5..at + 13].copy_from_slice(&(u64::MAX / 2).to_be_bytes());
    let body = past_the_end.len() - 20;
    let sum = sha1(&past_the_end[..body]);
    past_the_end[body..].copy_from_slice(&sum);
    for (damaged, why) in [
        (bytes[..bytes.len() / 2].to_vec(), "recipe"),
        (past_the_end, "whose entries end at"),
    ] {
        std::fs::write(&recipes[0], &damaged).unwrap();
        let (again, said) = clone_said(&sb, &repo, "again.git", 2, "");
        assert!(said.contains("not used") && said.contains(why), "{said}");
        assert_same_bytes(
            "the clone counted again",
            &serve_support::only_pack_of(&again),
            &received,
        );
        assert_eq!(
            std::fs::read(&recipes[0]).unwrap(),
            bytes,
            "the damaged recipe was not replaced by the clone's own"
        );
        std::fs::remove_dir_all(&again).unwrap();
    }
}

/// A recipe names its pack by checksum: once a repack replaced the pack, the recipe is
/// dropped and the clone counted again, from the new pack.
#[test]
fn a_recipe_whose_pack_is_gone_is_not_used() {
    let sb = Sandbox::new();
    let repo = packed_then_pushed(&sb);
    let first = clone(&sb, &repo, "first.git", 2, "");
    let before = std::fs::read(&cached(&repo, ".recipe")[0]).unwrap();
    // The same objects packed again, into other bytes, the pushed commit with them.
    repo.git(&["-c", "pack.compression=1", "repack", "-adbfq"]);
    let (_, repacked) = only_pack(&repo);
    let again = clone(&sb, &repo, "again.git", 2, "");
    assert_eq!(refs(&sb, &again), refs(&sb, &repo.path));
    assert_eq!(object_count(&sb, &again), object_count(&sb, &first));
    // Kept again for the same key, as a record of the new pack (the clone is all of it).
    let metas = cached(&repo, ".meta");
    assert_eq!(metas.len(), 1, "{metas:?}");
    let record = std::fs::read_to_string(&metas[0]).unwrap();
    assert!(
        record.contains(&format!("\npack {repacked}\n")),
        "not a record of the new pack: {record}"
    );
    assert!(
        cached(&repo, ".recipe")
            .iter()
            .all(|r| std::fs::read(r).unwrap() != before),
        "the recipe of the removed pack is still there"
    );
    assert!(
        cached(&repo, ".recipe").is_empty(),
        "a recipe was kept for a clone that is a pack file"
    );
}
