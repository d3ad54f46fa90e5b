//! The stack on a local disk (`LocalStorage`): updates, expected old values, the merged view
//! (newest wins, tombstones hide), racing writers, geometric compaction and the sweep.

use packd_reftable::{
    Expected, RefUpdate, RefValue, Reflog, ReftableError, Stack, StackOptions, TABLES_LIST,
};
use packd_storage::{LocalStorage, Storage};
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

fn id(n: u32) -> [u8; 20] {
    let mut id = [0x22u8; 20];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id
}

fn set(name: &str, expected: Expected, n: u32) -> RefUpdate {
    RefUpdate {
        name: name.into(),
        expected,
        new: RefValue::Object(id(n)),
        reflog: Some(Reflog {
            name: "P Usher".into(),
            email: "pusher@example.com".into(),
            time: 1_700_000_000,
            tz_offset: 60,
            message: format!("push {n}"),
        }),
    }
}

fn stack(dir: &std::path::Path, opts: StackOptions) -> Stack {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.join("reftable")));
    Stack::with_options(storage, opts)
}

fn no_compaction() -> StackOptions {
    StackOptions {
        auto_compact: false,
        ..StackOptions::default()
    }
}

#[test]
fn updates_stack_up_and_the_newest_table_wins() {
    let dir = tempfile::tempdir().unwrap();
    let s = stack(dir.path(), no_compaction());
    assert_eq!(s.snapshot().unwrap().max_update_index(), 0);
    let a = s
        .apply(&[
            set("refs/heads/main", Expected::Absent, 1),
            set("refs/heads/topic", Expected::Absent, 2),
            RefUpdate {
                name: "HEAD".into(),
                expected: Expected::Any,
                new: RefValue::Symref("refs/heads/main".into()),
                reflog: None,
            },
        ])
        .unwrap();
    assert_eq!(a.update_index, 1);
    assert!(
        a.table.starts_with("0x000000000001-0x000000000001-") && a.table.ends_with(".ref"),
        "{}",
        a.table
    );
    let b = s
        .apply(&[
            set(
                "refs/heads/main",
                Expected::Value(RefValue::Object(id(1))),
                3,
            ),
            RefUpdate {
                name: "refs/heads/topic".into(),
                expected: Expected::Value(RefValue::Object(id(2))),
                new: RefValue::Deletion,
                reflog: None,
            },
        ])
        .unwrap();
    assert_eq!(b.update_index, 2);
    let list = std::fs::read_to_string(dir.path().join("reftable").join(TABLES_LIST)).unwrap();
    assert_eq!(list, format!("{}\n{}\n", a.table, b.table));

    let snap = s.snapshot().unwrap();
    let refs: Vec<(String, RefValue)> = snap
        .refs()
        .map(|r| r.map(|r| (r.name, r.value)))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        refs,
        vec![
            ("HEAD".into(), RefValue::Symref("refs/heads/main".into())),
            ("refs/heads/main".into(), RefValue::Object(id(3))),
        ],
        "the tombstone hides topic"
    );
    assert_eq!(snap.read_ref("refs/heads/topic").unwrap(), None);
    let log = snap.logs_of("refs/heads/main").unwrap();
    assert_eq!(log.len(), 2);
    let newest = log[0].update.as_ref().unwrap();
    assert_eq!(
        (log[0].update_index, newest.old_id, newest.new_id),
        (2, id(1), id(3))
    );

    // A stale old value fails, naming the ref, and changes nothing.
    let err = s
        .apply(&[
            set("refs/heads/new", Expected::Absent, 9),
            set(
                "refs/heads/main",
                Expected::Value(RefValue::Object(id(1))),
                4,
            ),
        ])
        .unwrap_err();
    assert!(
        matches!(err, ReftableError::OldValueMismatch { ref refname, .. } if refname == "refs/heads/main"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&packd_reftable::hex(&id(3))),
        "{err}"
    );
    assert_eq!(
        s.snapshot().unwrap().read_ref("refs/heads/new").unwrap(),
        None
    );
    assert_eq!(s.snapshot().unwrap().names().len(), 2);
}

#[test]
fn eight_writers_of_different_refs_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let writers = 8;
    let rounds = 6;
    let barrier = Barrier::new(writers);
    std::thread::scope(|scope| {
        for w in 0..writers {
            let (dir, barrier) = (dir.path(), &barrier);
            scope.spawn(move || {
                // Each thread a stack of its own, as separate servers would have.
                let s = stack(dir, StackOptions::default());
                barrier.wait();
                for r in 0..rounds {
                    let name = format!("refs/heads/w{w}");
                    let expected = if r == 0 {
                        Expected::Absent
                    } else {
                        Expected::Value(RefValue::Object(id((w * 100 + r - 1) as u32)))
                    };
                    s.apply(&[set(&name, expected, (w * 100 + r) as u32)])
                        .unwrap_or_else(|e| panic!("writer {w} round {r}: {e}"));
                }
            });
        }
    });
    let s = stack(dir.path(), no_compaction());
    let snap = s.snapshot().unwrap();
    for w in 0..writers {
        let r = snap.read_ref(&format!("refs/heads/w{w}")).unwrap().unwrap();
        assert_eq!(r.value, RefValue::Object(id((w * 100 + rounds - 1) as u32)));
        assert_eq!(snap.logs_of(&r.name).unwrap().len(), rounds);
    }
    assert_eq!(snap.max_update_index(), (writers * rounds) as u64);
    // Auto-compaction kept the stack short.
    assert!(snap.names().len() < 10, "{:?}", snap.names());
}

#[test]
fn two_writers_of_one_ref_from_the_same_old_value_one_wins() {
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        stack(dir.path(), no_compaction())
            .apply(&[set("refs/heads/main", Expected::Absent, 1)])
            .unwrap();
        let barrier = Barrier::new(2);
        let results: Vec<Result<_, ReftableError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2u32)
                .map(|w| {
                    let (dir, barrier) = (dir.path(), &barrier);
                    scope.spawn(move || {
                        let s = stack(dir, no_compaction());
                        barrier.wait();
                        s.apply(&[set(
                            "refs/heads/main",
                            Expected::Value(RefValue::Object(id(1))),
                            10 + w,
                        )])
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = (0..2).filter(|&i| results[i].is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        let lost = &results[1 - won[0]];
        assert!(
            matches!(lost, Err(ReftableError::OldValueMismatch { .. })),
            "{lost:?}"
        );
        let value = stack(dir.path(), no_compaction())
            .snapshot()
            .unwrap()
            .read_ref("refs/heads/main")
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(value, RefValue::Object(id(10 + won[0] as u32)));
        // The loser's table was deleted: only the two listed ones are left.
        let files = std::fs::read_dir(dir.path().join("reftable"))
            .unwrap()
            .count();
        assert_eq!(files, 3, "round {round}: two tables and the list");
    }
}

#[test]
fn compaction_is_geometric_keeps_tombstones_above_the_base_and_the_sweep_waits() {
    let dir = tempfile::tempdir().unwrap();
    let s = stack(dir.path(), no_compaction());
    // A large base table, then small updates (one a deletion of a base ref).
    let base: Vec<RefUpdate> = (0..200)
        .map(|i| set(&format!("refs/tags/t{i:03}"), Expected::Absent, i))
        .collect();
    s.apply(&base).unwrap();
    s.apply(&[set("refs/heads/a", Expected::Absent, 1)])
        .unwrap();
    s.apply(&[RefUpdate {
        name: "refs/tags/t007".into(),
        expected: Expected::Any,
        new: RefValue::Deletion,
        reflog: None,
    }])
    .unwrap();
    s.apply(&[set("refs/heads/b", Expected::Absent, 2)])
        .unwrap();
    let before = s.snapshot().unwrap();
    assert_eq!(before.names().len(), 4);
    let merged = s
        .compact()
        .unwrap()
        .expect("small tables over a big one are merged");
    let after = s.snapshot().unwrap();
    assert_eq!(after.names().len(), 2, "{:?}", after.names());
    assert_eq!(
        after.names()[0],
        before.names()[0],
        "the base is left alone"
    );
    assert_eq!(after.names()[1], merged);
    assert!(
        merged.starts_with("0x000000000002-0x000000000004-"),
        "{merged}"
    );
    // The merged table still holds the tombstone, hiding the base's t007.
    let top = &after.tables()[1];
    assert_eq!(
        top.read_ref("refs/tags/t007").unwrap().unwrap().value,
        RefValue::Deletion
    );
    assert_eq!(after.read_ref("refs/tags/t007").unwrap(), None);
    let all = |snap: &packd_reftable::Snapshot| -> Vec<_> {
        snap.refs().collect::<Result<Vec<_>, _>>().unwrap()
    };
    assert_eq!(all(&after), all(&before));
    assert_eq!(all(&after).len(), 201);

    // Merging everything drops the tombstone.
    s.compact_all().unwrap().unwrap();
    let last = s.snapshot().unwrap();
    assert_eq!(last.names().len(), 1);
    assert_eq!(last.tables()[0].read_ref("refs/tags/t007").unwrap(), None);
    assert_eq!(all(&last), all(&before));

    // Five tables are unlisted now; the first sweep only notes them, a sweep within the
    // grace period keeps them, one after it deletes them.
    let grace = Duration::from_secs(600);
    let t0 = SystemTime::now();
    let first = s.sweep_at(grace, t0).unwrap();
    assert_eq!(
        (first.deleted.len(), first.waiting.len()),
        (0, 5),
        "{first:?}"
    );
    let again = s.sweep_at(grace, t0 + Duration::from_secs(599)).unwrap();
    assert_eq!(again.deleted.len(), 0);
    // A reader holding the old snapshot can still read every table it had.
    for t in before.tables() {
        t.refs().collect::<Result<Vec<_>, _>>().unwrap();
    }
    let late = s.sweep_at(grace, t0 + Duration::from_secs(600)).unwrap();
    assert_eq!(late.deleted.len(), 5, "{late:?}");
    let mut files: Vec<String> = std::fs::read_dir(dir.path().join("reftable"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        vec![
            last.names()[0].clone(),
            TABLES_LIST.to_string(),
            "tables.retired".to_string()
        ]
    );
    let retired = std::fs::read_to_string(dir.path().join("reftable/tables.retired")).unwrap();
    assert_eq!(retired, "", "nothing is left to sweep");
    assert_eq!(all(&s.snapshot().unwrap()), all(&before));
}

#[test]
fn a_damaged_list_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = stack(dir.path(), no_compaction());
    std::fs::create_dir_all(dir.path().join("reftable")).unwrap();
    std::fs::write(
        dir.path().join("reftable/tables.list"),
        "0x1-0x1-aa.ref\n../../etc/passwd\n",
    )
    .unwrap();
    let err = s.snapshot().unwrap_err().to_string();
    assert!(err.contains("tables.list: offset 15"), "{err}");
}

#[test]
fn one_request_reads_the_list_once_unless_this_process_wrote_one() {
    let dir = tempfile::tempdir().unwrap();
    let ours = stack(dir.path(), no_compaction());
    // Another server's stack on the same storage; its writes are simulated below by
    // writing the list the way another process would (not through this process's stacks).
    let storage = LocalStorage::new(dir.path().join("reftable"));
    ours.apply(&[set("refs/heads/main", Expected::Absent, 1)])
        .unwrap();
    let read = |s: &Stack| {
        s.snapshot()
            .unwrap()
            .read_ref("refs/heads/main")
            .unwrap()
            .map(|r| r.value)
    };
    let other = stack(dir.path(), no_compaction());
    other
        .apply(&[set(
            "refs/heads/main",
            Expected::Value(RefValue::Object(id(1))),
            2,
        )])
        .unwrap();
    // Roll the list back to the first table only, as a write this process did not make.
    let (list, version) = storage.read_versioned(TABLES_LIST).unwrap().unwrap();
    let first = String::from_utf8(list.to_vec()).unwrap();
    let first_table = first.lines().next().unwrap().to_string();
    let request = packd_storage::RequestReads::new();
    let guard = request.enter();
    assert_eq!(read(&ours), Some(RefValue::Object(id(2))));
    storage
        .replace(
            TABLES_LIST,
            Some(&version),
            format!("{first_table}\n").as_bytes(),
        )
        .unwrap();
    assert_eq!(
        read(&ours),
        Some(RefValue::Object(id(2))),
        "the request's second question is answered from its first snapshot"
    );
    drop(guard);
    assert_eq!(
        read(&ours),
        Some(RefValue::Object(id(1))),
        "outside a request the list is read again"
    );
    let next = packd_storage::RequestReads::new();
    let _guard = next.enter();
    assert_eq!(
        read(&ours),
        Some(RefValue::Object(id(1))),
        "a new request reads it again"
    );
    // Another writer moves the list on again; this request's update must not race against
    // the snapshot it reused (it would lose every attempt).
    let (_, now) = storage.read_versioned(TABLES_LIST).unwrap().unwrap();
    storage.replace(TABLES_LIST, Some(&now), &list).unwrap();
    ours.apply(&[set("refs/heads/main", Expected::Any, 3)])
        .unwrap();
    assert_eq!(
        read(&ours),
        Some(RefValue::Object(id(3))),
        "a request that wrote refs sees its own write"
    );
}
