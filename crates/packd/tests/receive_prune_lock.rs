//! A push into packd's receive-pack holds the prune lock shared from its received pack until
//! its refs are updated (packd_maint::lock): while maintenance holds it exclusively (deleting
//! unreachable objects), the push waits, and it completes once the lock is released.

mod common;

use common::{Repo, Run, Sandbox};
use std::time::Duration;

fn push(client: &Repo, server: &Repo, args: &[&str]) -> Run {
    let rp = format!("--receive-pack={} receive-pack", common::PACKD);
    let target = server.git_dir.to_str().unwrap().to_string();
    let mut all = vec!["push", rp.as_str(), target.as_str()];
    all.extend_from_slice(args);
    client.git_run(&all, None)
}

#[test]
fn a_push_waits_for_a_prune_before_moving_its_refs() {
    let sb = Sandbox::new();
    let server = sb.init_bare("srv.git");
    let client = sb.client_with_two_commits("client");
    push(&client, &server, &["main"]).assert_success();
    let before = server.git_str(&["rev-parse", "refs/heads/main"]);
    std::fs::write(client.path.join("g"), "three\n").unwrap();
    client.git(&["add", "g"]);
    client.git(&["commit", "-q", "-m", "three"]);

    // Maintenance deleting objects: the prune lock held exclusively.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(server.objects_dir().join("packd-prune.lock"))
        .unwrap();
    lock.lock().unwrap();
    std::thread::scope(|s| {
        let pushing = s.spawn(|| push(&client, &server, &["main"]));
        std::thread::sleep(Duration::from_millis(500));
        assert!(!pushing.is_finished(), "the push waits for the prune");
        assert_eq!(
            server.git_str(&["rev-parse", "refs/heads/main"]),
            before,
            "no ref moved while the prune runs"
        );
        drop(lock);
        pushing.join().unwrap().assert_success();
    });
    assert_eq!(
        server.git_str(&["rev-parse", "refs/heads/main"]),
        client.git_str(&["rev-parse", "HEAD"])
    );
    server.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
}

/// A prune that runs while the push waits for the lock, after its pack was received, deletes
/// the objects the push's new branch builds on: the push must see them gone (its view of the
/// repository opened again) and be refused, not leave a ref whose history is missing.
#[test]
fn a_push_after_a_prune_sees_what_it_deleted() {
    let sb = Sandbox::new();
    let server = sb.init_bare("srv.git");
    let client = sb.client_with_two_commits("client");
    let big = |changed: usize| -> String {
        (0..300)
            .map(|l| {
                format!(
                    "line {l} of a file long enough for a delta {}\n",
                    l == changed
                )
            })
            .collect()
    };
    std::fs::write(client.path.join("big"), big(usize::MAX)).unwrap();
    client.git(&["add", "big"]);
    client.git(&["commit", "-q", "-m", "big"]);
    push(&client, &server, &["main"]).assert_success();
    std::fs::write(client.path.join("big"), big(150)).unwrap();
    client.git(&["commit", "-q", "-am", "three"]);

    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(server.objects_dir().join("packd-prune.lock"))
        .unwrap();
    lock.lock().unwrap();
    let run = std::thread::scope(|s| {
        // Only the new commit travels, its blob a delta against the server's (a thin pack):
        // receiving it reads the server's pack, which the prune then deletes.
        let pushing = s.spawn(|| push(&client, &server, &["HEAD:refs/heads/topic"]));
        std::thread::sleep(Duration::from_millis(500));
        assert!(!pushing.is_finished(), "the push waits for the prune");
        // The prune: main deleted and every object of the repository with it.
        server.git(&["update-ref", "-d", "refs/heads/main"]);
        for entry in std::fs::read_dir(server.objects_dir().join("pack")).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("pack-")
            {
                std::fs::remove_file(path).unwrap();
            }
        }
        drop(lock);
        pushing.join().unwrap()
    });
    eprintln!("{}", run.err());
    assert!(
        !run.success(),
        "the push built on deleted objects: {}",
        run.err()
    );
    assert!(
        !server
            .git_run(&["rev-parse", "--verify", "-q", "refs/heads/topic"], None)
            .success(),
        "no ref to missing history"
    );
    server.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
}
