//! A receiver killed (SIGKILL) at a random instant of a push of many refs leaves every ref old
//! or new, an atomic push's refs all old or all new once the next receiver has looked, a
//! repository `git fsck` finds clean, and nothing that blocks the next push. The delay before
//! the kill is drawn uniformly over the measured duration of the same push uninterrupted, so the
//! kills land in the ref phase (the push sends no objects: the ref phase is most of it).
//! `bench/push-crash.py` runs the same trials by the hundred and counts the outcomes.

mod common;

use common::{run_cmd, Repo, Rng, Sandbox};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ZERO: &str = "0000000000000000000000000000000000000000";

/// Refs the push updates, deletes (packed ones among them) and creates.
const UPDATED: usize = 160;
const DELETED: usize = 20;
const CREATED: usize = 20;

/// The refs before (`old`) and after (`new`) the push; `None`: absent.
struct Plan {
    old: BTreeMap<String, Option<String>>,
    new: BTreeMap<String, Option<String>>,
}

/// A bare repository with commits A and B (B's parent A); refs r000..r179 at A, packed, and
/// r150..r179 loose too (written again after packing); the plan moves r000..r159 to B, deletes
/// r160..r179 and creates n000..n019 at B.
fn template(sb: &Sandbox) -> (Repo, Plan) {
    let repo = sb.init_bare("template.git");
    let tree = repo.git_str(&["mktree"]);
    let commit = |parent: Option<&str>| {
        let mut args = vec!["commit-tree", tree.as_str(), "-m", "c"];
        if let Some(p) = parent {
            args.extend(["-p", p]);
        }
        repo.git_str(&args)
    };
    let a = commit(None);
    let b = commit(Some(&a));
    let mut plan = Plan {
        old: BTreeMap::new(),
        new: BTreeMap::new(),
    };
    let mut script = String::new();
    for i in 0..UPDATED + DELETED {
        let name = format!("refs/heads/r{i:03}");
        script.push_str(&format!("create {name} {a}\n"));
        plan.old.insert(name.clone(), Some(a.clone()));
        plan.new.insert(name, (i < UPDATED).then(|| b.clone()));
    }
    for i in 0..CREATED {
        let name = format!("refs/heads/n{i:03}");
        plan.old.insert(name.clone(), None);
        plan.new.insert(name, Some(b.clone()));
    }
    repo.git_stdin(&["update-ref", "--stdin"], script.as_bytes());
    repo.git(&["pack-refs", "--all"]);
    let loose: String = (150..UPDATED + DELETED)
        .map(|i| format!("update refs/heads/r{i:03} {a}\n"))
        .collect();
    repo.git_stdin(&["update-ref", "--no-deref", "--stdin"], loose.as_bytes());
    // Written loose by hand: update-ref leaves a packed ref's value in packed-refs.
    for i in 150..UPDATED + DELETED {
        std::fs::write(
            repo.git_dir.join(format!("refs/heads/r{i:03}")),
            format!("{a}\n"),
        )
        .unwrap();
    }
    (repo, plan)
}

fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", payload.len() + 4).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// The request moving every ref from `from` to `to` (refs equal in both are left out).
fn request(
    from: &BTreeMap<String, Option<String>>,
    to: &BTreeMap<String, Option<String>>,
    atomic: bool,
) -> Vec<u8> {
    let mut input = Vec::new();
    let caps = if atomic {
        "report-status atomic"
    } else {
        "report-status"
    };
    let mut first = true;
    let mut any_new = false;
    for (name, target) in to {
        let current = from.get(name).cloned().flatten();
        if current == *target {
            continue;
        }
        any_new |= target.is_some();
        let line = format!(
            "{} {} {name}{}\n",
            current.as_deref().unwrap_or(ZERO),
            target.as_deref().unwrap_or(ZERO),
            if first {
                format!("\0{caps}")
            } else {
                String::new()
            }
        );
        first = false;
        input.extend(pkt(line.as_bytes()));
    }
    input.extend_from_slice(b"0000");
    if any_new {
        input.extend(common::PackWriter::new().finish().0);
    }
    input
}

/// The refs git reads in `repo`.
fn refs_of(repo: &Path, sb: &Sandbox) -> BTreeMap<String, Option<String>> {
    let out = sb.git_in(repo, &["for-each-ref", "--format=%(objectname) %(refname)"]);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let (id, name) = l.split_once(' ').unwrap();
            (name.to_string(), Some(id.to_string()))
        })
        .collect()
}

/// How a trial ended.
#[derive(Debug, Default)]
struct Counts {
    old: usize,
    new: usize,
    mixed: usize,
    /// A ref neither old nor new (never acceptable).
    torn: usize,
    /// The next push did not go through.
    blocked: usize,
}

/// Compares `refs` with the plan: ("old", "new", "mixed" or "torn").
fn classify(plan: &Plan, refs: &BTreeMap<String, Option<String>>) -> &'static str {
    let (mut old, mut new) = (0, 0);
    for (name, before) in &plan.old {
        let now = refs.get(name).cloned().flatten();
        let after = plan.new.get(name).cloned().flatten();
        let is_old = now == *before;
        let is_new = now == after;
        if !is_old && !is_new {
            return "torn";
        }
        if is_old && !is_new {
            old += 1;
        }
        if is_new && !is_old {
            new += 1;
        }
    }
    match (old, new) {
        (_, 0) => "old",
        (0, _) => "new",
        _ => "mixed",
    }
}

/// `packd receive-pack` on `dir` with `input`, killed after `kill_after` (or run to its end).
fn receive(dir: &Path, input: &[u8], kill_after: Option<Duration>) -> std::process::ExitStatus {
    let mut child = Command::new(common::PACKD)
        .arg("receive-pack")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The whole request fits in the pipe buffer: written at once, then the clock runs.
    stdin.write_all(input).unwrap();
    drop(stdin);
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL; it may have finished already
    }
    child.wait().unwrap()
}

/// Runs `trials` killed pushes (atomic or not) from the template; returns the counts.
fn trials(sb: &Sandbox, template: &Repo, plan: &Plan, atomic: bool, trials: usize) -> Counts {
    let input = request(&plan.old, &plan.new, atomic);
    assert!(
        input.len() < 60_000,
        "the request must fit in a pipe buffer"
    );
    // The push's duration, uninterrupted.
    let copy = |name: &str| template.copy_as(sb, name);
    let full = copy(&format!("full-{atomic}"));
    let start = Instant::now();
    assert!(receive(&full.git_dir, &input, None).success());
    let duration = start.elapsed();
    assert_eq!(classify(plan, &refs_of(&full.git_dir, sb)), "new");
    eprintln!(
        "uninterrupted push of {} refs: {duration:?}",
        plan.new.len()
    );

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let mut counts = Counts::default();
    for t in 0..trials {
        let repo = copy(&format!("trial-{atomic}-{t}"));
        let micros = rng.below(duration.as_micros().max(1) as usize);
        receive(
            &repo.git_dir,
            &input,
            Some(Duration::from_micros(micros as u64)),
        );
        // At once, as git reads them: each ref old or new.
        let seen = classify(plan, &refs_of(&repo.git_dir, sb));
        assert_ne!(seen, "torn", "trial {t}: a ref is neither old nor new");
        // The next receiver's advertisement finishes or undoes the killed transaction.
        let run = sb.packd_in(
            &repo.git_dir,
            &["receive-pack", "--advertise-refs", "."],
            None,
        );
        run.assert_success();
        let after = refs_of(&repo.git_dir, sb);
        match classify(plan, &after) {
            "old" => counts.old += 1,
            "new" => counts.new += 1,
            "mixed" => counts.mixed += 1,
            _ => counts.torn += 1,
        }
        repo.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
        // The next push (from what is there to the plan's end) goes through whole.
        let next = request(&after, &plan.new, false);
        let mut cmd = Command::new(common::PACKD);
        common::apply_env(&mut cmd, &sb.home);
        cmd.arg("receive-pack").arg(&repo.git_dir);
        let out = run_cmd(cmd, Some(&next), common::PACKD_TIMEOUT).out();
        if out.contains(" ng ") || out.contains("ng refs/") {
            counts.blocked += 1;
            eprintln!("trial {t} (kill after {micros} us): next push refused:\n{out}");
        }
        assert_eq!(
            classify(plan, &refs_of(&repo.git_dir, sb)),
            "new",
            "trial {t}"
        );
        repo.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
        std::fs::remove_dir_all(&repo.path).unwrap();
    }
    eprintln!("atomic={atomic}: {counts:?}");
    counts
}

#[test]
fn a_receiver_killed_during_an_atomic_push_leaves_all_refs_old_or_all_new() {
    let sb = Sandbox::new();
    let (template, plan) = template(&sb);
    let counts = trials(&sb, &template, &plan, true, 6);
    assert_eq!(counts.mixed, 0, "{counts:?}");
    assert_eq!(counts.torn, 0, "{counts:?}");
    assert_eq!(counts.blocked, 0, "{counts:?}");
}

#[test]
fn a_receiver_killed_during_a_push_leaves_each_ref_old_or_new_and_nothing_blocking() {
    let sb = Sandbox::new();
    let (template, plan) = template(&sb);
    let counts = trials(&sb, &template, &plan, false, 6);
    assert_eq!(counts.torn, 0, "{counts:?}");
    assert_eq!(counts.blocked, 0, "{counts:?}");
}
