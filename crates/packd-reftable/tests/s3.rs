//! The stack in a bucket of a real S3 server (versitygw, started by `packd-test-s3`): two
//! `Stack`s on the same prefix, as two packd servers would have, race updates of different
//! refs; all are applied, and a snapshot read after shows every one, with its reflog.

use packd_reftable::{Expected, RefUpdate, RefValue, Reflog, Stack, StackOptions};
use packd_storage::{S3Config, S3Storage, Storage};
use packd_test_s3::S3Server;
use std::sync::{Arc, Barrier};

fn id(n: u32) -> [u8; 20] {
    let mut id = [0x33u8; 20];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id
}

/// A storage at `repos/r.git/reftable` of bucket `packd`, with a client of its own.
fn storage(server: &S3Server) -> Arc<dyn Storage> {
    let s3 = S3Storage::new(&S3Config {
        bucket: "packd".into(),
        prefix: String::new(),
        endpoint: Some(server.endpoint()),
        region: Some(packd_test_s3::REGION.into()),
        access_key_id: Some(server.access_key_id().into()),
        secret_access_key: Some(server.secret_access_key().into()),
        allow_http: false,
        ..S3Config::default()
    })
    .expect("an S3 storage");
    Arc::new(s3.at("repos/r.git/reftable"))
}

#[test]
fn two_stacks_on_one_bucket_race_updates_of_different_refs() {
    let server = S3Server::start();
    server.create_bucket("packd");
    let servers = 2;
    let threads_per_server = 3;
    let rounds = 4;
    let stacks: Vec<Stack> = (0..servers)
        .map(|_| Stack::with_options(storage(&server), StackOptions::default()))
        .collect();
    let barrier = Barrier::new(servers * threads_per_server);
    let mut attempts = 0;
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (s, stack) in stacks.iter().enumerate() {
            for t in 0..threads_per_server {
                let barrier = &barrier;
                handles.push(scope.spawn(move || {
                    barrier.wait();
                    let writer = (s * 10 + t) as u32;
                    let name = format!("refs/heads/s{s}-t{t}");
                    let mut attempts = 0;
                    for r in 0..rounds {
                        let expected = if r == 0 {
                            Expected::Absent
                        } else {
                            Expected::Value(RefValue::Object(id(writer * 100 + r - 1)))
                        };
                        let applied = stack
                            .apply(&[RefUpdate {
                                name: name.clone(),
                                expected,
                                new: RefValue::Object(id(writer * 100 + r)),
                                reflog: Some(Reflog {
                                    name: "S Erver".into(),
                                    email: format!("server{s}@example.com"),
                                    time: 1_700_000_000 + u64::from(r),
                                    tz_offset: 0,
                                    message: format!("push {r}"),
                                }),
                            }])
                            .unwrap_or_else(|e| panic!("{name} round {r}: {e}"));
                        attempts += applied.attempts;
                    }
                    attempts
                }));
            }
        }
        attempts = handles.into_iter().map(|h| h.join().unwrap()).sum::<u32>();
    });
    let updates = (servers * threads_per_server) as u32 * rounds;
    eprintln!("{updates} updates took {attempts} attempts");
    // A fresh reader (a third server) sees every ref at its last value.
    let reader = Stack::new(storage(&server));
    let snap = reader.snapshot().unwrap();
    assert_eq!(snap.max_update_index(), u64::from(updates));
    let refs: Vec<_> = snap.refs().collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(refs.len(), servers * threads_per_server);
    for s in 0..servers {
        for t in 0..threads_per_server {
            let writer = (s * 10 + t) as u32;
            let name = format!("refs/heads/s{s}-t{t}");
            let r = snap.read_ref(&name).unwrap().expect("the ref");
            assert_eq!(
                r.value,
                RefValue::Object(id(writer * 100 + rounds - 1)),
                "{name}"
            );
            let log = snap.logs_of(&name).unwrap();
            let messages: Vec<_> = log
                .iter()
                .map(|l| l.update.as_ref().unwrap().message.clone())
                .collect();
            assert_eq!(messages, ["push 3", "push 2", "push 1", "push 0"], "{name}");
        }
    }
    // The tables are in the bucket under git's names, and the list names them.
    let keys = std::fs::read_dir(server.bucket_dir("packd").join("repos/r.git/reftable"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect::<Vec<_>>();
    for name in snap.names() {
        assert!(keys.contains(name), "{name} not in {keys:?}");
    }
}
