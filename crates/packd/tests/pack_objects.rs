//! `packd pack-objects` (pack generation: `PackServer::plan`/`write`/`shallow`) checked by stock
//! git. One history (three imports, branches, a merge, annotated tags including a tag of a tag,
//! a tag of a tree and a tag of a blob, a lightweight tag) is served from five layouts: one
//! pack with a bitmap (`repack -adb`), one pack without, two fast-import packs plus loose
//! objects, a bitmapped pack of older history plus the newer objects loose, and a
//! multi-pack-index bitmap of older history plus a newer pack it does not list. For many
//! (wants, haves) pairs the pack is indexed by
//! `git index-pack` into a repository holding the haves (with `--fix-thin` for thin packs) and
//! its objects compared with `git rev-list --objects` (exactly with a bitmap, at least the
//! needed objects when walking, and at most git's answer when packd walks as git does: wants
//! past the bitmap, haves off it); `git fsck --strict` and `git verify-pack` must pass, the
//! wants must be connected, `--no-ofs-delta` packs must hold no ofs-delta. Also: a full clone
//! of the bitmapped layout is its pack file byte for byte; `--include-tag` against
//! `git pack-objects --include-tag`; filters against `git rev-list --filter`; `--depth` against
//! `git clone --depth`; a shallow client's fetch and deepening; bad revisions and a damaged
//! pack entry.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};

type Ids = BTreeSet<String>;

/// How a layout stores the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// (a) `git repack -adb`: one pack and its bitmap.
    Bitmap,
    /// (b) `git repack -ad --no-write-bitmap-index`: one pack, no bitmap.
    OnePack,
    /// (c) two fast-import packs plus loose objects, no bitmap.
    Mixed,
    /// (d) a bitmapped pack of the history up to the merge, and the rest loose (a repository
    /// pushed to since its last repack): the loose objects are walked until the walk enters
    /// the bitmapped pack, whose bitmaps answer from there.
    BitmapLoose,
    /// (e) a multi-pack-index with a bitmap over three packs of the history up to the merge,
    /// and the rest in a newer pack the multi-pack-index does not list (a repository pushed to
    /// since `git multi-pack-index write --bitmap`): counted as (d) is, entering the bitmapped
    /// packs from the newer one.
    MidxNewerPack,
}

impl Layout {
    /// Whether counting uses a bitmap, so that a pack holds exactly the objects the wants
    /// reach and the haves do not (a walk may send some the client has).
    fn exact(self) -> bool {
        matches!(
            self,
            Layout::Bitmap | Layout::BitmapLoose | Layout::MidxNewerPack
        )
    }
}

struct Fixture {
    sb: Sandbox,
    bitmap: Repo,
    one_pack: Repo,
    mixed: Repo,
    bitmap_loose: Repo,
    midx: Repo,
}

impl Fixture {
    fn repo(&self, layout: Layout) -> &Repo {
        match layout {
            Layout::Bitmap => &self.bitmap,
            Layout::OnePack => &self.one_pack,
            Layout::Mixed => &self.mixed,
            Layout::BitmapLoose => &self.bitmap_loose,
            Layout::MidxNewerPack => &self.midx,
        }
    }

    /// The id of `rev` (any git revision syntax).
    fn rev(&self, rev: &str) -> String {
        self.mixed
            .git_str(&["rev-parse", "--verify", "--end-of-options", rev])
    }
}

/// Runs git in `repo` with author and committer dates set to `time`.
fn git_at(repo: &Repo, time: u64, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut cmd = repo.git_cmd();
    let date = format!("{time} +0000");
    cmd.env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date)
        .args(args);
    let run = run_cmd(cmd, stdin, GIT_TIMEOUT);
    run.assert_success();
    run.out().trim().to_string()
}

/// Copies the directory `from` to `to` (which must not exist).
fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a {from:?} {to:?}");
}

/// Builds the history in `mixed` (two fast-import packs, then loose objects), and the two
/// repacked copies.
fn build() -> Fixture {
    let sb = Sandbox::new();
    let mixed = sb.init_bare("mixed");
    let mut gen = HistoryGen::new(0x9ac4, 8, 40);

    // Import 1: main (120 commits, with a large and a tiny file early on), side from main[60],
    // annotated v1 on main[50].
    let mut fi = FastImport::with_time(1_700_000_000);
    let mut main = gen.commits(&mut fi, "refs/heads/main", 10, false);
    let mut rng = Rng::new(7);
    let big: String = (0..400).map(|_| random_line(&mut rng) + "\n").collect();
    main.push(fi.commit(
        "refs/heads/main",
        None,
        "big and tiny files\n",
        &[inline("assets/big.txt", big), inline("tiny.txt", "tiny\n")],
    ));
    main.extend(gen.commits(&mut fi, "refs/heads/main", 110, false));
    fi.commit(
        "refs/heads/side",
        Some(&format!(":{}", main[60])),
        "fork side\n",
        &[inline("side/start.txt", "side\n")],
    );
    gen.commits(&mut fi, "refs/heads/side", 25, false);
    fi.tag("v1", &format!(":{}", main[50]), "release 1\n");
    mixed.fast_import(&fi.finish());

    // Import 2: topic from main's tip, 50 more commits on main, annotated v2.
    let main_tip = mixed.git_str(&["rev-parse", "main"]);
    let mut fi = FastImport::with_time(1_700_100_000);
    fi.commit(
        "refs/heads/topic",
        Some(&main_tip),
        "fork topic\n",
        &[inline("topic/start.txt", "topic\n")],
    );
    gen.commits(&mut fi, "refs/heads/topic", 15, false);
    let main2 = gen.commits(&mut fi, "refs/heads/main", 50, true);
    fi.tag("v2", &format!(":{}", main2[20]), "release 2\n");
    mixed.fast_import(&fi.finish());
    assert_eq!(mixed.packs().len(), 2);

    // Merge topic into main (a loose commit).
    let tree = mixed.git_str(&["rev-parse", "main^{tree}"]);
    let merge = git_at(
        &mixed,
        1_700_200_000,
        &[
            "commit-tree",
            &tree,
            "-p",
            "main",
            "-p",
            "topic",
            "-m",
            "merge topic",
        ],
        None,
    );
    mixed.git(&["update-ref", "refs/heads/main", &merge]);
    mixed.git(&["update-ref", "refs/heads/merge", &merge]);

    // (d) starts as a bitmapped copy of the history so far.
    let bitmap_loose = Repo {
        path: sb.path().join("bitmap-loose"),
        git_dir: sb.path().join("bitmap-loose"),
        home: sb.home.clone(),
    };
    copy_dir(&mixed.path, &bitmap_loose.path);
    bitmap_loose.git(&["repack", "-adbq"]);
    // (e) starts as a copy too: the two imports' packs, a third of the loose merge, and a
    // multi-pack-index with a bitmap over the three.
    let midx = Repo {
        path: sb.path().join("midx"),
        git_dir: sb.path().join("midx"),
        home: sb.home.clone(),
    };
    copy_dir(&mixed.path, &midx.path);
    midx.git(&["repack", "-dq", "--no-write-bitmap-index"]);
    assert_eq!(midx.packs().len(), 3);
    midx.git(&["multi-pack-index", "write", "--bitmap"]);

    // Import 3 (exploded into loose objects below): 30 more commits on main, 10 on side.
    let packs_before = mixed.packs();
    let mut fi = FastImport::with_time(1_700_300_000);
    gen.commits(&mut fi, "refs/heads/main", 30, true);
    gen.commits(&mut fi, "refs/heads/side", 10, true);
    mixed.fast_import(&fi.finish());
    let third: Vec<_> = mixed
        .packs()
        .into_iter()
        .filter(|p| !packs_before.contains(p))
        .collect();
    assert_eq!(third.len(), 1);
    let pack_bytes = std::fs::read(&third[0]).unwrap();
    std::fs::remove_file(&third[0]).unwrap();
    std::fs::remove_file(third[0].with_extension("idx")).unwrap();
    mixed.git_stdin(&["unpack-objects", "-q"], &pack_bytes);

    // Tags made by git (loose): on a commit, a tag of that tag, a tag of a tree only it
    // reaches (a new blob, and main~3's src/ as a subdirectory), a tag of a blob of main's tip; a lightweight tag; a branch at main~20.
    let t = 1_700_400_000;
    git_at(
        &mixed,
        t,
        &["tag", "-a", "-m", "release 3", "v3", "main~5"],
        None,
    );
    git_at(
        &mixed,
        t,
        &[
            "-c",
            "advice.nestedTag=false",
            "tag",
            "-a",
            "-m",
            "outer",
            "v3-outer",
            "v3",
        ],
        None,
    );
    let lone_blob = mixed.git_stdin(
        &["hash-object", "-w", "--stdin"],
        b"a blob only a tagged tree holds\n",
    );
    let lone_blob = String::from_utf8(lone_blob).unwrap().trim().to_string();
    let src = mixed.git_str(&["rev-parse", "main~3:src"]);
    let lone_tree = mixed.git_stdin(
        &["mktree"],
        format!("100644 blob {lone_blob}\tlone.txt\n040000 tree {src}\tdir\n").as_bytes(),
    );
    let lone_tree = String::from_utf8(lone_tree).unwrap().trim().to_string();
    git_at(
        &mixed,
        t,
        &["tag", "-a", "-m", "a tree", "tree-tag", &lone_tree],
        None,
    );
    let tip_blob = mixed.git_str(&["rev-parse", "main:tiny.txt"]);
    git_at(
        &mixed,
        t,
        &["tag", "-a", "-m", "a blob", "blob-tag", &tip_blob],
        None,
    );
    mixed.git(&["update-ref", "refs/tags/light", "main~7"]);
    mixed.git(&["update-ref", "refs/heads/old", "main~20"]);
    assert_eq!(mixed.packs().len(), 2);
    assert!(mixed.loose_count() > 100, "import 3 is loose");

    let bitmap = Repo {
        path: sb.path().join("bitmap"),
        git_dir: sb.path().join("bitmap"),
        home: sb.home.clone(),
    };
    copy_dir(&mixed.path, &bitmap.path);
    bitmap.git(&["repack", "-adbq"]);
    let one_pack = Repo {
        path: sb.path().join("one-pack"),
        git_dir: sb.path().join("one-pack"),
        home: sb.home.clone(),
    };
    copy_dir(&mixed.path, &one_pack.path);
    // (Bare repositories write a bitmap by default.)
    one_pack.git(&["repack", "-adq", "--no-write-bitmap-index"]);
    assert_eq!(bitmap.packs().len(), 1);
    assert!(bitmap.packs()[0].with_extension("bitmap").exists());
    assert_eq!(one_pack.packs().len(), 1);
    assert!(!one_pack.packs()[0].with_extension("bitmap").exists());
    // (d) and (e) get everything else as loose objects, and the same refs; (e) packs them
    // into a new pack, which its multi-pack-index does not list.
    let refs = String::from_utf8(mixed.git(&["for-each-ref", "--format=%(refname) %(objectname)"]))
        .unwrap();
    let updates: String = refs.lines().map(|l| format!("update {l}\n")).collect();
    for repo in [&bitmap_loose, &midx] {
        copy_loose_objects(&mixed, repo);
        repo.git_stdin(&["update-ref", "--stdin"], updates.as_bytes());
    }
    assert!(bitmap_loose.packs()[0].with_extension("bitmap").exists());
    assert!(bitmap_loose.loose_count() > 100);
    let midx_packs = midx.packs();
    // (Loose objects no ref reaches stay loose.)
    midx.git(&["repack", "-dq", "--no-write-bitmap-index"]);
    let newer: Vec<_> = midx
        .packs()
        .into_iter()
        .filter(|p| !midx_packs.contains(p))
        .collect();
    assert_eq!(newer.len(), 1, "one newer pack");
    let midx_file = std::fs::read(midx.pack_dir().join("multi-pack-index")).unwrap();
    let newer_idx = file_name(&newer[0].with_extension("idx"));
    assert!(
        !midx_file
            .windows(newer_idx.len())
            .any(|w| w == newer_idx.as_bytes()),
        "the multi-pack-index does not list the newer pack"
    );
    assert!(std::fs::read_dir(midx.pack_dir())
        .unwrap()
        .any(|e| file_name(&e.unwrap().path()).ends_with(".bitmap")));
    Fixture {
        sb,
        bitmap,
        one_pack,
        mixed,
        bitmap_loose,
        midx,
    }
}

/// Copies the loose objects of `from` that `to` lacks.
fn copy_loose_objects(from: &Repo, to: &Repo) {
    for dir in std::fs::read_dir(from.objects_dir()).unwrap() {
        let dir = dir.unwrap().path();
        let name = file_name(&dir);
        if name.len() != 2 {
            continue;
        }
        let into = to.objects_dir().join(&name);
        std::fs::create_dir_all(&into).unwrap();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            let target = into.join(file_name(&f));
            if !target.exists() {
                std::fs::copy(&f, &target).unwrap();
            }
        }
    }
}

/// The fixture, built once for the tests running at the same time (and removed when the last
/// of them is done).
fn fixture() -> Arc<Fixture> {
    static SHARED: Mutex<Weak<Fixture>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = shared.upgrade() {
        return f;
    }
    let f = Arc::new(build());
    *shared = Arc::downgrade(&f);
    f
}

// ---------------------------------------------------------------------------------------------
// Oracles and pack inspection
// ---------------------------------------------------------------------------------------------

/// The first word of each line.
fn id_set(out: &[u8]) -> Ids {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `git rev-list --objects EXTRA... <wants> --not <haves>` in `repo`.
fn rev_list(repo: &Repo, extra: &[&str], wants: &[String], haves: &[String]) -> Ids {
    let mut input = String::new();
    for w in wants {
        input.push_str(w);
        input.push('\n');
    }
    for h in haves {
        input.push('^');
        input.push_str(h);
        input.push('\n');
    }
    let mut args = vec!["rev-list", "--objects"];
    args.extend_from_slice(extra);
    args.push("--stdin");
    id_set(&repo.git_stdin(&args, input.as_bytes()))
}

/// Objects reachable from `wants` that `haves` do not reach (what a client with the haves'
/// whole history needs).
fn exact(repo: &Repo, wants: &[String], haves: &[String]) -> Ids {
    let want = rev_list(repo, &[], wants, &[]);
    if haves.is_empty() {
        return want;
    }
    let have = rev_list(repo, &[], haves, &[]);
    want.difference(&have).cloned().collect()
}

/// Asserts that a pack holds exactly `expected`, naming what it has extra and what it lacks.
fn assert_same_ids(ctx: &str, got: &Ids, expected: &Ids) {
    let extra: Ids = got.difference(expected).cloned().collect();
    let missing: Ids = expected.difference(got).cloned().collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{ctx}: pack has extra {} and lacks {}",
        show(&extra),
        show(&missing)
    );
}

fn show(ids: &Ids) -> String {
    let v: Vec<&str> = ids.iter().take(12).map(|s| s.as_str()).collect();
    format!("{} objects: {}", ids.len(), v.join(" "))
}

/// What `packd pack-objects` printed and wrote.
struct Produced {
    pack: Vec<u8>,
    count: u32,
    /// packd's stderr (the summary line, logs).
    stderr: String,
}

/// Runs `packd pack-objects FLAGS` with `wants` and `^haves` on stdin; checks the pack's
/// header, trailer and the summary line.
fn pack_objects(repo: &Repo, flags: &[&str], wants: &[String], haves: &[String]) -> Produced {
    pack_objects_env(repo, flags, wants, haves, &[])
}

fn pack_objects_env(
    repo: &Repo,
    flags: &[&str],
    wants: &[String],
    haves: &[String],
    env: &[(&str, &str)],
) -> Produced {
    let mut input = String::new();
    for w in wants {
        input.push_str(w);
        input.push('\n');
    }
    for h in haves {
        input.push('^');
        input.push_str(h);
        input.push('\n');
    }
    let mut cmd = Command::new(PACKD);
    apply_env(&mut cmd, &repo.home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.arg("-C")
        .arg(&repo.path)
        .arg("pack-objects")
        .args(flags);
    let run = run_cmd(cmd, Some(input.as_bytes()), PACKD_TIMEOUT);
    run.assert_no_crash().assert_success();
    let pack = run.stdout.clone();
    assert!(pack.len() >= 32, "pack too short: {} bytes", pack.len());
    assert_eq!(&pack[..4], b"PACK");
    assert_eq!(&pack[4..8], &2u32.to_be_bytes(), "pack version 2");
    let count = u32::from_be_bytes(pack[8..12].try_into().unwrap());
    let n = pack.len();
    assert_eq!(
        sha1(&pack[..n - 20]),
        pack[n - 20..],
        "the pack trailer is the SHA-1 of what precedes it"
    );
    let stderr = run.err();
    let summary = format!("Total {count} (delta ");
    assert!(
        stderr.contains(&summary) && stderr.contains(&format!(", {n} bytes")),
        "summary line should say {count} objects and {n} bytes: {stderr}"
    );
    Produced {
        pack,
        count,
        stderr,
    }
}

/// A pack indexed into a repository.
struct Indexed {
    /// Ids in the indexed pack (for a thin pack fixed by index-pack, with the bases added).
    ids: Ids,
    /// Entry type numbers (1-4, 6 ofs-delta, 7 ref-delta) of the stream's entries, when the
    /// pack was stored as it came (not thin).
    types: Vec<u8>,
    idx: std::path::PathBuf,
}

/// `git index-pack --stdin [--fix-thin]` in `dest`.
fn index_pack(dest: &Repo, pack: &[u8], fix_thin: bool) -> Indexed {
    let mut args = vec!["index-pack", "--stdin"];
    if fix_thin {
        args.push("--fix-thin");
    }
    let out = String::from_utf8(dest.git_stdin(&args, pack)).unwrap();
    let hash = out
        .split_whitespace()
        .last()
        .unwrap_or_else(|| panic!("index-pack printed no pack name: {out}"))
        .to_string();
    let idx = dest.pack_dir().join(format!("pack-{hash}.idx"));
    let stored = std::fs::read(idx.with_extension("pack")).unwrap();
    let (ids, mut offsets) = read_idx(&std::fs::read(&idx).unwrap());
    let mut types = Vec::new();
    if !fix_thin {
        assert_eq!(stored, pack, "index-pack stores a complete pack as it came");
        offsets.sort_unstable();
        types = offsets.iter().map(|&o| (pack[o] >> 4) & 7).collect();
    }
    Indexed { ids, types, idx }
}

/// The ids and offsets an idx v2 (as git index-pack writes it) lists.
fn read_idx(idx: &[u8]) -> (Ids, Vec<usize>) {
    assert_eq!(&idx[..8], &[0xff, b't', b'O', b'c', 0, 0, 0, 2], "idx v2");
    let n = u32::from_be_bytes(idx[8 + 255 * 4..8 + 256 * 4].try_into().unwrap()) as usize;
    let ids_at = 8 + 256 * 4;
    let offsets_at = ids_at + 24 * n;
    let large_at = offsets_at + 4 * n;
    let mut ids = Ids::new();
    let mut offsets = Vec::with_capacity(n);
    for i in 0..n {
        ids.insert(hex(&idx[ids_at + 20 * i..ids_at + 20 * i + 20]));
        let o = u32::from_be_bytes(
            idx[offsets_at + 4 * i..offsets_at + 4 * i + 4]
                .try_into()
                .unwrap(),
        );
        let offset = if o & 0x8000_0000 == 0 {
            o as u64
        } else {
            let at = large_at + 8 * (o & 0x7fff_ffff) as usize;
            u64::from_be_bytes(idx[at..at + 8].try_into().unwrap())
        };
        offsets.push(offset as usize);
    }
    (ids, offsets)
}

/// A fresh bare repository in `sb` holding what `haves` reach (taken from `source` with
/// `git pack-objects`).
fn repo_with(sb: &Sandbox, name: &str, source: &Repo, haves: &[String]) -> Repo {
    let dest = sb.init_bare(name);
    if !haves.is_empty() {
        let input = lines_input(haves);
        let pack = source.git_stdin(&["pack-objects", "--revs", "--stdout", "-q"], &input);
        dest.git_stdin(&["index-pack", "--stdin"], &pack);
    }
    dest
}

fn count_type(types: &[u8], t: u8) -> usize {
    types.iter().filter(|&&x| x == t).count()
}

// ---------------------------------------------------------------------------------------------
// Object sets for (wants, haves) pairs
// ---------------------------------------------------------------------------------------------

struct Case {
    name: &'static str,
    wants: Vec<String>,
    /// Haves, including some the server does not have.
    haves: Vec<String>,
}

/// An id no repository here has.
const UNKNOWN: &str = "1234567890abcdef1234567890abcdef12345678";

fn cases(fx: &Fixture) -> Vec<Case> {
    let r = |s: &str| fx.rev(s);
    let all_refs: Vec<String> =
        String::from_utf8(fx.mixed.git(&["for-each-ref", "--format=%(objectname)"]))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
    vec![
        Case {
            name: "full clone (every ref)",
            wants: all_refs,
            haves: vec![],
        },
        Case {
            name: "main vs main~1",
            wants: vec![r("main")],
            haves: vec![r("main~1")],
        },
        Case {
            name: "main vs main~10",
            wants: vec![r("main")],
            haves: vec![r("main~10")],
        },
        Case {
            name: "main vs main~100",
            wants: vec![r("main")],
            haves: vec![r("main~100")],
        },
        Case {
            name: "main and side vs old and side~5",
            wants: vec![r("main"), r("side"), r("topic")],
            haves: vec![r("old"), r("side~5")],
        },
        Case {
            name: "the merge vs its first parent",
            wants: vec![r("merge")],
            haves: vec![r("merge^1")],
        },
        Case {
            name: "unknown haves are ignored",
            wants: vec![r("main")],
            haves: vec![UNKNOWN.to_string(), r("main~10")],
        },
        Case {
            name: "only unknown haves",
            wants: vec![r("side")],
            haves: vec![UNKNOWN.to_string()],
        },
        Case {
            name: "annotated tag and tag of a tag",
            wants: vec![r("v3-outer"), r("v2")],
            haves: vec![r("v1^{commit}")],
        },
        Case {
            name: "tags of a tree and of a blob",
            wants: vec![r("tree-tag"), r("blob-tag")],
            haves: vec![r("main~1")],
        },
        Case {
            name: "side vs main (other branch)",
            wants: vec![r("side")],
            haves: vec![r("main")],
        },
        Case {
            name: "nothing new",
            wants: vec![r("main~3")],
            haves: vec![r("main")],
        },
    ]
}

/// The haves `repo` has.
fn known(repo: &Repo, haves: &[String]) -> Vec<String> {
    haves
        .iter()
        .filter(|h| repo.git_run(&["cat-file", "-e", h], None).success())
        .cloned()
        .collect()
}

/// The objects `repo`'s bitmap numbers: those of the pack with a `.bitmap`, or of the packs
/// its multi-pack-index lists.
fn bitmapped_ids(repo: &Repo) -> Ids {
    let midx = std::fs::read(repo.pack_dir().join("multi-pack-index")).unwrap_or_default();
    let mut ids = Ids::new();
    for pack in repo.packs() {
        let idx = pack.with_extension("idx");
        let name = file_name(&idx);
        let listed = midx.windows(name.len()).any(|w| w == name.as_bytes());
        if pack.with_extension("bitmap").exists() || listed {
            let out = repo.git_stdin(&["show-index"], &std::fs::read(&idx).unwrap());
            ids.extend(
                String::from_utf8(out)
                    .unwrap()
                    .lines()
                    .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string)),
            );
        }
    }
    ids
}

/// Whether packd may count `case` in `layout` as git's plain walk does (see
/// `PackServer::walk_is_cheaper`): a want outside the bitmap, every want a commit or a tag of
/// one, haves and none of them in the bitmapped objects. git 2.39 walks so too then (it takes
/// its bitmap only when a have is in the bitmapped pack), so the pack may hold what only the
/// haves' older commits hold, as git's does.
fn may_walk_as_git(repo: &Repo, layout: Layout, case: &Case, haves: &[String]) -> bool {
    if !matches!(layout, Layout::BitmapLoose | Layout::MidxNewerPack) || haves.is_empty() {
        return false;
    }
    let bitmapped = bitmapped_ids(repo);
    let id = |rev: &str| repo.git_str(&["rev-parse", "--verify", rev]);
    let peeled = |rev: &str| id(&format!("{rev}^{{}}"));
    let is_commit = |rev: &str| repo.git_str(&["cat-file", "-t", &peeled(rev)]) == "commit";
    case.wants.iter().any(|w| !bitmapped.contains(&id(w)))
        && case.wants.iter().all(|w| is_commit(w))
        && haves
            .iter()
            .all(|h| !bitmapped.contains(&id(h)) && !bitmapped.contains(&peeled(h)))
}

/// A case's oracle in one layout, shared by its thin, non-thin and no-ofs-delta runs.
struct Expect {
    /// The haves the repository has.
    haves: Vec<String>,
    /// What a client with the haves' whole history needs.
    needed: Ids,
    /// When packd may count the case as git's plain walk does, git's answer
    /// (`rev-list --objects --use-bitmap-index`, a walk here): the pack then holds at least
    /// `needed` and at most this.
    git_walk: Option<Ids>,
    /// Everything the wants reach.
    reach: Ids,
    /// A repository holding what the haves reach (an alternate of each destination).
    had: Repo,
}

fn expect(fx: &Fixture, layout: Layout, case: &Case, n: usize) -> Expect {
    let repo = fx.repo(layout);
    let haves = known(repo, &case.haves);
    let reach = rev_list(repo, &[], &case.wants, &[]);
    let needed = if haves.is_empty() {
        reach.clone()
    } else {
        let had = rev_list(repo, &[], &haves, &[]);
        reach.difference(&had).cloned().collect()
    };
    if layout == Layout::Bitmap && !haves.is_empty() {
        let git = rev_list(repo, &["--use-bitmap-index"], &case.wants, &haves);
        assert_eq!(
            git, needed,
            "{}: git's bitmap answer is the set difference",
            case.name
        );
    }
    let git_walk = may_walk_as_git(repo, layout, case, &haves)
        .then(|| rev_list(repo, &["--use-bitmap-index"], &case.wants, &haves));
    let had = repo_with(&fx.sb, &format!("had-{n}"), repo, &haves);
    Expect {
        haves,
        needed,
        git_walk,
        reach,
        had,
    }
}

/// Checks one case in one layout (thin or not, ofs-delta or not).
fn check_case(
    fx: &Fixture,
    layout: Layout,
    case: &Case,
    expect: &Expect,
    thin: bool,
    ofs: bool,
    n: usize,
) {
    let repo = fx.repo(layout);
    let ctx = format!("{layout:?} / {} / thin={thin} ofs={ofs}", case.name);
    let mut flags = Vec::new();
    if thin {
        flags.push("--thin");
    }
    if !ofs {
        flags.push("--no-ofs-delta");
    }
    let produced = pack_objects(repo, &flags, &case.wants, &case.haves);
    assert!(
        !produced.stderr.contains("WARN"),
        "{ctx}: warnings: {}",
        produced.stderr
    );
    let expected = &expect.needed;
    let reach = &expect.reach;
    let dest = fx.sb.init_bare(&format!("dest-{n}"));
    std::fs::write(
        dest.objects_dir().join("info/alternates"),
        format!("{}\n", expect.had.objects_dir().display()),
    )
    .unwrap();
    let indexed = index_pack(&dest, &produced.pack, thin);
    if thin {
        // The fixed pack holds what was sent plus bases the client has; the sent count is the
        // header's.
        let missing: Ids = expected.difference(&indexed.ids).cloned().collect();
        assert!(missing.is_empty(), "{ctx}: pack lacks {}", show(&missing));
        // With a bitmap, the haves' objects serve as delta bases: the pack is thin.
        if layout == Layout::Bitmap && expected.len() >= 40 {
            assert!(
                indexed.ids.len() > produced.count as usize,
                "{ctx}: no delta against an object the client has"
            );
        }
        if let Some(git) = &expect.git_walk {
            assert!(produced.count as usize >= expected.len());
            assert!(
                produced.count as usize <= git.len(),
                "{ctx}: sends more than git"
            );
        } else if layout.exact() {
            assert_eq!(
                produced.count as usize,
                expected.len(),
                "{ctx}: a bitmap count sends exactly the difference"
            );
        } else {
            assert!(produced.count as usize >= expected.len());
            assert!(produced.count as usize <= reach.len());
        }
    } else {
        let ids = &indexed.ids;
        assert_eq!(
            ids.len(),
            produced.count as usize,
            "{ctx}: distinct objects"
        );
        if let Some(git) = &expect.git_walk {
            let missing: Ids = expected.difference(ids).cloned().collect();
            assert!(missing.is_empty(), "{ctx}: pack lacks {}", show(&missing));
            let more: Ids = ids.difference(git).cloned().collect();
            assert!(
                more.is_empty(),
                "{ctx}: pack has objects git's walk does not send: {}",
                show(&more)
            );
        } else if layout.exact() {
            assert_same_ids(&ctx, ids, expected);
        } else {
            let missing: Ids = expected.difference(ids).cloned().collect();
            assert!(missing.is_empty(), "{ctx}: pack lacks {}", show(&missing));
            let foreign: Ids = ids.difference(reach).cloned().collect();
            assert!(
                foreign.is_empty(),
                "{ctx}: pack has objects the wants do not reach: {}",
                show(&foreign)
            );
        }
        dest.git(&["verify-pack", indexed.idx.to_str().unwrap()]);
        if !ofs {
            assert_eq!(
                count_type(&indexed.types, OBJ_OFS_DELTA),
                0,
                "{ctx}: --no-ofs-delta pack has ofs-deltas"
            );
        }
        let (ofs_n, ref_n) = (
            count_type(&indexed.types, OBJ_OFS_DELTA),
            count_type(&indexed.types, OBJ_REF_DELTA),
        );
        // Deltas on disk are reused (as ofs- or ref-deltas as asked), not all sent whole.
        if indexed.types.len() >= 200 {
            let deltas = if ofs { ofs_n } else { ref_n };
            assert!(
                deltas * 5 >= indexed.types.len(),
                "{ctx}: only {deltas} deltas among {} objects",
                indexed.types.len()
            );
        }
        assert_eq!(
            count_type(&indexed.types, OBJ_REF_DELTA)
                + count_type(&indexed.types, OBJ_OFS_DELTA)
                + indexed
                    .types
                    .iter()
                    .filter(|&&t| (1..=4).contains(&t))
                    .count(),
            indexed.types.len(),
            "{ctx}: entry types"
        );
    }
    // The wants are connected and the whole repository is sound.
    dest.git_stdin(
        &["rev-list", "--objects", "--stdin", "--quiet"],
        &lines_input(&case.wants),
    );
    dest.git(&["fsck", "--strict", "--no-dangling", "--no-progress"]);
}

fn check_layout(layout: Layout) {
    let fx = fixture();
    let cases = cases(&fx);
    let base = match layout {
        Layout::Bitmap => 0,
        Layout::OnePack => 1000,
        Layout::Mixed => 2000,
        Layout::BitmapLoose => 3000,
        Layout::MidxNewerPack => 4000,
    };
    for (k, case) in cases.iter().enumerate() {
        let n = base + 10 * k;
        let expect = expect(&fx, layout, case, n);
        check_case(&fx, layout, case, &expect, false, true, n + 1);
        if !expect.haves.is_empty() {
            check_case(&fx, layout, case, &expect, true, true, n + 2);
        }
        if k % 3 == 0 {
            check_case(&fx, layout, case, &expect, false, false, n + 3);
        }
    }
}

#[test]
fn object_sets_bitmap_layout() {
    check_layout(Layout::Bitmap);
}

#[test]
fn object_sets_one_pack_layout() {
    check_layout(Layout::OnePack);
}

#[test]
fn object_sets_mixed_layout() {
    check_layout(Layout::Mixed);
}

#[test]
fn object_sets_bitmap_and_loose_layout() {
    check_layout(Layout::BitmapLoose);
}

#[test]
fn object_sets_midx_and_newer_pack_layout() {
    check_layout(Layout::MidxNewerPack);
}

// ---------------------------------------------------------------------------------------------
// Whole-pack copy, include-tag, filters
// ---------------------------------------------------------------------------------------------

/// Every ref's value, deduplicated.
fn all_refs(fx: &Fixture) -> Vec<String> {
    let out = fx.mixed.git(&["for-each-ref", "--format=%(objectname)"]);
    id_set(&out).into_iter().collect()
}

/// The objects of `ids` whose type `repo` says is `kind`.
fn of_kind(repo: &Repo, ids: &Ids, kind: &str) -> Ids {
    let out = repo.git_stdin(
        &["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        &lines_input(&ids.iter().collect::<Vec<_>>()),
    );
    String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, t)| *t == kind)
        .map(|(id, _)| id.to_string())
        .collect()
}

#[test]
fn full_clone_of_bitmapped_repository_is_its_pack_file() {
    let fx = fixture();
    let wants = all_refs(&fx);
    let produced = pack_objects(&fx.bitmap, &[], &wants, &[]);
    let file = std::fs::read(&fx.bitmap.packs()[0]).unwrap();
    assert_eq!(
        produced.pack.len(),
        file.len(),
        "same length as the pack file"
    );
    assert!(
        produced.pack == file,
        "a full clone is the pack file byte for byte"
    );
    let count = produced.count;
    assert!(
        produced.stderr.contains(&format!("reused {count} ")),
        "every entry reused: {}",
        produced.stderr
    );
    // Not every ref: not the pack file.
    let main = vec![fx.rev("main")];
    let produced = pack_objects(&fx.bitmap, &[], &main, &[]);
    assert!(produced.pack != file);
}

/// `packd pack-objects --include-tag` and `git pack-objects --revs --include-tag` agree on
/// the tags; with a bitmap, on every object.
fn check_include_tag(fx: &Fixture, layout: Layout, wants: &[String], haves: &[String], n: usize) {
    let repo = fx.repo(layout);
    let ctx = format!("{layout:?} include-tag {n}");
    let produced = pack_objects(repo, &["--include-tag"], wants, haves);
    let ours = index_pack(
        &fx.sb.init_bare(&format!("tags-{n}-packd")),
        &produced.pack,
        false,
    );
    let mut input = String::new();
    for w in wants {
        input.push_str(&format!("{w}\n"));
    }
    for h in haves {
        input.push_str(&format!("^{h}\n"));
    }
    let git_pack = repo.git_stdin(
        &["pack-objects", "--revs", "--include-tag", "--stdout", "-q"],
        input.as_bytes(),
    );
    let git = index_pack(&fx.sb.init_bare(&format!("tags-{n}-git")), &git_pack, false);
    let our_tags = of_kind(repo, &ours.ids, "tag");
    let git_tags = of_kind(repo, &git.ids, "tag");
    assert_eq!(our_tags, git_tags, "{ctx}: tags sent");
    assert!(!our_tags.is_empty(), "{ctx}: some tags are included");
    let without = pack_objects(repo, &[], wants, haves);
    assert_eq!(
        without.count as usize + our_tags.len()
            - of_kind(repo, &wants.iter().cloned().collect(), "tag").len(),
        produced.count as usize,
        "{ctx}: include-tag adds only tags"
    );
    if layout.exact() {
        assert_eq!(ours.ids, git.ids, "{ctx}: every object");
    }
}

#[test]
fn include_tag_matches_git_pack_objects() {
    let fx = fixture();
    let main = fx.rev("main");
    for layout in [
        Layout::Bitmap,
        Layout::OnePack,
        Layout::Mixed,
        Layout::BitmapLoose,
        Layout::MidxNewerPack,
    ] {
        let base = 10 * layout as usize;
        // v2, v3 and v3-outer (a tag of a tag) point into main~100..main; v1 does not.
        check_include_tag(
            &fx,
            layout,
            std::slice::from_ref(&main),
            &[fx.rev("main~100")],
            base,
        );
        // Everything main reaches: also v1 and blob-tag (a blob of main), not tree-tag.
        check_include_tag(&fx, layout, std::slice::from_ref(&main), &[], base + 1);
    }
}

/// Checks `--filter SPEC` for `wants` and `haves` in `layout`.
fn check_filter(
    fx: &Fixture,
    layout: Layout,
    spec: &str,
    wants: &[String],
    haves: &[String],
    n: usize,
) {
    let repo = fx.repo(layout);
    let ctx = format!("{layout:?} --filter {spec} ({n})");
    let filter = format!("--filter={spec}");
    let produced = pack_objects(repo, &["--filter", spec], wants, haves);
    let dest = fx.sb.init_bare(&format!("filter-{n}"));
    let indexed = index_pack(&dest, &produced.pack, false);
    dest.git(&["verify-pack", indexed.idx.to_str().unwrap()]);
    let ids = &indexed.ids;
    let git = rev_list(repo, &[&filter], wants, haves);
    if haves.is_empty() {
        assert_same_ids(&format!("{ctx} (git rev-list {filter})"), ids, &git);
        return;
    }
    let filtered = rev_list(repo, &[&filter], wants, &[]);
    let had = rev_list(repo, &[], haves, &[]);
    let needed: Ids = filtered.difference(&had).cloned().collect();
    let missing: Ids = needed.difference(ids).cloned().collect();
    assert!(missing.is_empty(), "{ctx}: pack lacks {}", show(&missing));
    let foreign: Ids = ids.difference(&filtered).cloned().collect();
    assert!(
        foreign.is_empty(),
        "{ctx}: pack has filtered-out objects {}",
        show(&foreign)
    );
    let bitmap_filter = !spec.starts_with("tree:") || spec == "tree:0";
    if layout.exact() && bitmap_filter {
        assert_eq!(ids.len(), needed.len(), "{ctx}: exactly what is needed");
    }
}

#[test]
fn filters_match_rev_list() {
    let fx = fixture();
    let tips = vec![fx.rev("main"), fx.rev("side")];
    let haves = vec![fx.rev("main~30")];
    let specs = [
        "blob:none",
        "blob:limit=2200",
        "blob:limit=1k",
        "tree:0",
        "tree:1",
        "tree:2",
    ];
    for layout in [
        Layout::Bitmap,
        Layout::OnePack,
        Layout::Mixed,
        Layout::BitmapLoose,
        Layout::MidxNewerPack,
    ] {
        let base = 100 * layout as usize;
        for (k, spec) in specs.iter().enumerate() {
            check_filter(&fx, layout, spec, &tips, &[], base + 2 * k);
            if layout != Layout::Mixed {
                check_filter(&fx, layout, spec, &tips, &haves, base + 2 * k + 1);
            }
        }
    }
}

/// Git sends what a want names even when the filter leaves such objects out: the tag of a
/// blob and the blob (`git rev-list --objects --filter=blob:none <tag>` lists both). A named
/// tree's contents are filtered with its entries at depth 0 (`tree:1` keeps them, as
/// git's rev-list does), not 1 as under a commit.
#[test]
fn filter_keeps_objects_named_by_wants() {
    let fx = fixture();
    let wants = vec![fx.rev("blob-tag"), fx.rev("tree-tag")];
    for layout in [
        Layout::Bitmap,
        Layout::OnePack,
        Layout::BitmapLoose,
        Layout::MidxNewerPack,
    ] {
        for (k, spec) in ["blob:none", "tree:0", "tree:1", "blob:limit=10"]
            .iter()
            .enumerate()
        {
            check_filter(
                &fx,
                layout,
                spec,
                &wants,
                &[],
                1000 + 10 * layout as usize + k,
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shallow requests
// ---------------------------------------------------------------------------------------------

/// The shallow boundary changes packd logged (`PACKD_LOG=packd=info`): (shallow, unshallow).
fn logged_shallow(stderr: &str) -> (Ids, Ids) {
    let grab = |marker: &str| -> Ids {
        stderr
            .split(marker)
            .skip(1)
            .filter_map(|rest| rest.get(..40))
            .map(str::to_string)
            .collect()
    };
    (grab("Shallow("), grab("Unshallow("))
}

/// `git clone --bare --depth DEPTH --single-branch --branch BRANCH --no-tags` of `source` over
/// file:// (git's upload-pack), into `name`.
fn shallow_clone(fx: &Fixture, source: &Repo, depth: u32, branch: &str, name: &str) -> Repo {
    let url = format!("file://{}", source.path.display());
    let depth = depth.to_string();
    fx.sb.git_in(
        fx.sb.path(),
        &[
            "clone",
            "-q",
            "--bare",
            "--depth",
            &depth,
            "--single-branch",
            "--branch",
            branch,
            "--no-tags",
            &url,
            name,
        ],
    );
    Repo {
        path: fx.sb.path().join(name),
        git_dir: fx.sb.path().join(name),
        home: fx.sb.home.clone(),
    }
}

/// The ids in a repository's `shallow` file.
fn shallow_file(repo: &Repo) -> Ids {
    id_set(&std::fs::read(repo.git_dir.join("shallow")).unwrap_or_default())
}

fn write_shallow_file(repo: &Repo, ids: &Ids) {
    let text: String = ids.iter().map(|id| format!("{id}\n")).collect();
    std::fs::write(repo.git_dir.join("shallow"), text).unwrap();
}

const LOG: &[(&str, &str)] = &[("PACKD_LOG", "packd=info")];

/// `--depth N --include-tag` sends what `git clone --depth N` receives, and the same shallow
/// boundary.
#[test]
fn depth_matches_git_shallow_clone() {
    let fx = fixture();
    let main = vec![fx.rev("main")];
    // 35 reaches through the merge of topic: two boundary commits.
    for depth in [1u32, 5, 35] {
        let clone = shallow_clone(&fx, &fx.mixed, depth, "main", &format!("clone-{depth}"));
        let expected = id_set(&clone.git(&[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ]));
        let boundary = shallow_file(&clone);
        assert_eq!(boundary.len(), if depth == 35 { 2 } else { 1 });
        for layout in [Layout::Bitmap, Layout::OnePack, Layout::Mixed] {
            let ctx = format!("{layout:?} --depth {depth}");
            let d = depth.to_string();
            // git clone follows tags (here blob-tag, and v3 and v3-outer at depth 35).
            let produced = pack_objects_env(
                fx.repo(layout),
                &["--depth", &d, "--include-tag"],
                &main,
                &[],
                LOG,
            );
            let (shallow, unshallow) = logged_shallow(&produced.stderr);
            assert_eq!(shallow, boundary, "{ctx}: boundary: {}", produced.stderr);
            assert!(unshallow.is_empty(), "{ctx}");
            let dest = fx
                .sb
                .init_bare(&format!("depth-{depth}-{}", layout as usize));
            let indexed = index_pack(&dest, &produced.pack, false);
            assert_same_ids(
                &format!("{ctx} (git clone --depth)"),
                &indexed.ids,
                &expected,
            );
            write_shallow_file(&dest, &shallow);
            dest.git(&["update-ref", "refs/heads/main", &main[0]]);
            dest.git(&["fsck", "--strict", "--no-dangling", "--no-progress"]);
            dest.git(&["rev-list", "--objects", "--quiet", "main"]);
        }
    }
}

/// A client cloned at depth 3 fetches the rest of main (`--shallow`, thin), and a client
/// cloned at depth 3 of main deepens to 10 (`--depth 10 --shallow`).
#[test]
fn shallow_client_fetches_and_deepens() {
    let fx = fixture();
    let main = fx.rev("main");
    let old = fx.rev("old");
    for layout in [Layout::Bitmap, Layout::OnePack, Layout::Mixed] {
        let repo = fx.repo(layout);
        let n = layout as usize;
        // Fetch: the client has old, old~1 and old~2 (shallow).
        let ctx = format!("{layout:?} shallow fetch");
        let client = shallow_clone(&fx, repo, 3, "old", &format!("shallow-old-{n}"));
        let shallow = shallow_file(&client);
        assert_eq!(shallow, [fx.rev("old~2")].into_iter().collect::<Ids>());
        let s = shallow.first().unwrap().clone();
        let produced = pack_objects_env(
            repo,
            &["--thin", "--shallow", &s],
            std::slice::from_ref(&main),
            std::slice::from_ref(&old),
            LOG,
        );
        let (new_shallow, unshallow) = logged_shallow(&produced.stderr);
        assert!(new_shallow.is_empty() && unshallow.is_empty(), "{ctx}");
        let expected = exact(
            repo,
            std::slice::from_ref(&main),
            std::slice::from_ref(&old),
        );
        let indexed = index_pack(&client, &produced.pack, true);
        let missing: Ids = expected.difference(&indexed.ids).cloned().collect();
        assert!(missing.is_empty(), "{ctx}: pack lacks {}", show(&missing));
        client.git(&["update-ref", "refs/heads/main", &main]);
        client.git(&["fsck", "--strict", "--no-dangling", "--no-progress"]);
        client.git(&["rev-list", "--objects", "--quiet", "main"]);

        // Deepen: the client has main, main~1 and main~2 (shallow) and asks for depth 10.
        let ctx = format!("{layout:?} deepen");
        let client = shallow_clone(&fx, repo, 3, "main", &format!("shallow-main-{n}"));
        let old_shallow = shallow_file(&client);
        let s = fx.rev("main~2");
        assert_eq!(old_shallow, [s.clone()].into_iter().collect::<Ids>());
        let produced = pack_objects_env(
            repo,
            &["--depth", "10", "--shallow", &s, "--include-tag"],
            std::slice::from_ref(&main),
            std::slice::from_ref(&main),
            LOG,
        );
        let (new_shallow, unshallow) = logged_shallow(&produced.stderr);
        assert_eq!(
            new_shallow,
            [fx.rev("main~9")].into_iter().collect::<Ids>(),
            "{ctx}: {}",
            produced.stderr
        );
        assert_eq!(unshallow, old_shallow, "{ctx}: {}", produced.stderr);
        index_pack(&client, &produced.pack, false);
        write_shallow_file(&client, &new_shallow);
        client.git(&["fsck", "--strict", "--no-dangling", "--no-progress"]);
        client.git(&["rev-list", "--objects", "--quiet", "main"]);
        // What a depth-10 clone holds (with v3 and v3-outer on main~5, followed).
        let deep = shallow_clone(&fx, repo, 10, "main", &format!("deep-main-{n}"));
        let want = id_set(&deep.git(&[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ]));
        let have = id_set(&client.git(&[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ]));
        let missing: Ids = want.difference(&have).cloned().collect();
        assert!(missing.is_empty(), "{ctx}: client lacks {}", show(&missing));
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_revisions_fail_with_a_message() {
    let fx = fixture();
    let main = fx.rev("main");
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        ("no-such-branch\n".into(), vec![], "no-such-branch"),
        (
            format!("{main}\n^no-such-branch\n"),
            vec![],
            "no-such-branch",
        ),
        (format!("{UNKNOWN}\n"), vec![], UNKNOWN),
        (format!("{main}\n"), vec!["--filter", "bogus:1"], "bogus:1"),
        (
            format!("{main}\n"),
            vec!["--shallow", "no-such-commit"],
            "no-such-commit",
        ),
        (format!("{main}\n"), vec!["--depth", "many"], "many"),
    ];
    for layout in [Layout::Bitmap, Layout::Mixed] {
        for (stdin, flags, expect) in &cases {
            let mut args = vec!["pack-objects"];
            args.extend(flags);
            let run = fx.repo(layout).packd(&args, Some(stdin.as_bytes()));
            run.assert_no_crash();
            let ctx = format!("{layout:?} {flags:?} {stdin:?}");
            assert!(!run.success(), "{ctx}: should fail");
            assert!(run.stdout.is_empty(), "{ctx}: no pack");
            assert!(
                run.err().contains(expect),
                "{ctx}: message should name {expect}: {}",
                run.err()
            );
        }
    }
}

/// A byte flipped inside an entry's compressed data: packd checks the index's CRC before
/// copying an entry, and fails naming the pack file and the entry's offset.
#[test]
fn damaged_entry_is_reported_not_sent() {
    let fx = fixture();
    let main = fx.rev("main");
    let on_main = rev_list(&fx.mixed, &[], std::slice::from_ref(&main), &[]);
    // (layout, every ref or main only, a delta entry or a whole one)
    let runs = [
        (Layout::Bitmap, true, false),
        (Layout::Bitmap, false, true),
        (Layout::OnePack, false, false),
        (Layout::OnePack, false, true),
    ];
    for (k, (layout, every_ref, delta)) in runs.into_iter().enumerate() {
        let ctx = format!("{layout:?} every_ref={every_ref} delta={delta}");
        let copy = Repo {
            path: fx.sb.path().join(format!("damaged-{k}")),
            git_dir: fx.sb.path().join(format!("damaged-{k}")),
            home: fx.sb.home.clone(),
        };
        copy_dir(&fx.repo(layout).path, &copy.path);
        let pack = copy.packs()[0].clone();
        let entries = verify_pack_entries(&copy, &pack.with_extension("idx"));
        let entry = entries
            .iter()
            .filter(|e| e.kind == "blob" && e.depth.is_some() == delta && e.size_in_pack >= 40)
            .find(|e| on_main.contains(&e.id))
            .unwrap_or_else(|| panic!("{ctx}: no suitable entry"))
            .clone();
        damage_entry(&pack, &entry);
        let wants = if every_ref {
            all_refs(&fx)
        } else {
            vec![main.clone()]
        };
        let run = copy.packd(&["pack-objects"], Some(&lines_input(&wants)));
        run.assert_no_crash();
        let err = run.err();
        assert!(!run.success(), "{ctx}: should fail: {err}");
        assert!(
            err.contains(&file_name(&pack)),
            "{ctx}: names the pack file: {err}"
        );
        assert!(
            mentions_offset(&err, entry.offset),
            "{ctx}: names offset {}: {err}",
            entry.offset
        );
    }
}

/// Without a bitmap (no name hashes), a thin fetch of a few commits that each change one line
/// of large files sends those files as deltas against the versions the client has, as git
/// does, not whole: the pack stays near git's size, and completes with `--fix-thin`.
#[test]
fn thin_fetch_without_bitmap_sends_changed_files_as_deltas() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("nobitmap.git");
    let mut stream = Vec::new();
    let big = |version: usize, file: usize| -> String {
        (0..2000)
            .map(|line| {
                if line == 1000 {
                    format!("file {file} version {version}\n")
                } else {
                    // Pseudo-random lines: a whole file does not compress to nothing.
                    let x = (file * 2000 + line) as u64;
                    let r = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    format!("{file} {line} {r:016x} {:016x}\n", r.rotate_left(29) ^ x)
                }
            })
            .collect()
    };
    for version in 0..12 {
        stream.extend_from_slice(
            format!(
                "commit refs/heads/main\ncommitter A <a@example.com> {} +0000\ndata 2\nc\n",
                1_700_000_000 + version
            )
            .as_bytes(),
        );
        for file in 0..4 {
            let body = big(version, file);
            stream.extend_from_slice(
                format!(
                    "M 644 inline d{file}/big.txt\ndata {}\n{body}\n",
                    body.len()
                )
                .as_bytes(),
            );
        }
        stream.push(b'\n');
    }
    repo.fast_import(&stream);
    repo.git(&["repack", "-adf", "-q", "--no-write-bitmap-index"]);
    assert!(
        !std::fs::read_dir(repo.pack_dir())
            .unwrap()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "bitmap")),
        "the repository must have no bitmap"
    );
    let want = vec![repo.git_str(&["rev-parse", "main"])];
    let have = vec![repo.git_str(&["rev-parse", "main~3"])];
    let ours = pack_objects(&repo, &["--thin"], &want, &have);
    let input = format!("{}\n^{}\n", want[0], have[0]);
    let theirs = repo.git_stdin(
        &[
            "pack-objects",
            "--revs",
            "--stdout",
            "--thin",
            "--delta-base-offset",
            "-q",
        ],
        input.as_bytes(),
    );
    let whole_file = big(11, 0).len();
    assert!(
        ours.pack.len() < whole_file,
        "12 changed files should be deltas: packd sent {} bytes, one file is {whole_file}",
        ours.pack.len()
    );
    assert!(
        ours.pack.len() <= 2 * theirs.len(),
        "packd sent {} bytes, git {}",
        ours.pack.len(),
        theirs.len()
    );
    // The client at main~3 completes the thin pack and has everything.
    let client = repo_with(&sb, "client.git", &repo, &have);
    let indexed = index_pack(&client, &ours.pack, true);
    let needed = exact(&repo, &want, &have);
    assert!(
        needed.is_subset(&indexed.ids),
        "missing from the pack: {}",
        show(&needed.difference(&indexed.ids).cloned().collect())
    );
    let fsck = client.git_run(&["fsck", "--strict", want[0].as_str()], None);
    assert!(fsck.success(), "{}", fsck.err());
}

/// Made since the repack (loose): a commit whose tree holds a gitlink, and an annotated tag of
/// a tag stored in the bitmapped pack. Counting walks them into the pack: a clone of `main`
/// with include-tag holds exactly what git's rev-list lists for `main` and the outer tag (both
/// tags), and the gitlink's commit, which the repository does not have, is not looked for.
#[test]
fn loose_gitlink_and_tag_of_a_packed_tag_are_walked_into_the_bitmapped_pack() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("gitlink.git");
    let mut fi = FastImport::with_time(1_700_000_000);
    let mut gen = HistoryGen::new(5, 6, 20);
    gen.commits(&mut fi, "refs/heads/main", 6, false);
    repo.fast_import(&fi.finish());
    git_at(
        &repo,
        1_700_000_100,
        &["tag", "-a", "-m", "inner", "inner", "main"],
        None,
    );
    repo.git(&["repack", "-adbq"]);
    let blob = repo.git_str(&["rev-parse", "main:file0.txt"]);
    let tree = repo.git_stdin(
        &["mktree"],
        format!("100644 blob {blob}\tfile0.txt\n160000 commit {UNKNOWN}\tsub\n").as_bytes(),
    );
    let tree = String::from_utf8(tree).unwrap().trim().to_string();
    let commit = git_at(
        &repo,
        1_700_000_200,
        &["commit-tree", "-p", "main", "-m", "a submodule", &tree],
        None,
    );
    repo.git(&["update-ref", "refs/heads/main", &commit]);
    git_at(
        &repo,
        1_700_000_300,
        &[
            "-c",
            "advice.nestedTag=false",
            "tag",
            "-a",
            "-m",
            "outer",
            "outer",
            "inner",
        ],
        None,
    );
    assert!(repo.loose_count() >= 3, "made since the repack, loose");
    let main = repo.git_str(&["rev-parse", "main"]);
    let outer = repo.git_str(&["rev-parse", "outer"]);
    let produced = pack_objects_env(
        &repo,
        &["--include-tag"],
        std::slice::from_ref(&main),
        &[],
        &[("PACKD_LOG", "packd_reach=debug")],
    );
    assert!(
        produced.stderr.contains("outside the bitmapped objects"),
        "counted without the bitmap: {}",
        produced.stderr
    );
    let dest = sb.init_bare("gitlink-dest.git");
    let indexed = index_pack(&dest, &produced.pack, false);
    let expected = rev_list(&repo, &[], &[main, outer], &[]);
    assert_same_ids("gitlink and tags", &indexed.ids, &expected);
}
