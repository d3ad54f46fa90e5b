//! Tables written and read back: small ones, ones of many blocks (ref index, log index),
//! lookups through the index and restart points, and hostile bytes (every truncation and
//! thousands of bit flips) that must fail with an error naming the table, never a panic.

use bytes::Bytes;
use packd_reftable::format::{Footer, Header, FOOTER_LEN};
use packd_reftable::{
    write_table, LogRecord, LogUpdate, RefRecord, RefValue, ReftableError, Table, WriteOptions,
};
use packd_storage::MemoryBlob;
use std::sync::Arc;

fn id(n: u32) -> [u8; 20] {
    let mut id = [0u8; 20];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id[19] = 0xa5;
    id
}

fn table(bytes: Vec<u8>) -> Result<Table, ReftableError> {
    Table::open(Arc::new(MemoryBlob::new("t.ref", Bytes::from(bytes))))
}

fn small() -> (Vec<RefRecord>, Vec<LogRecord>) {
    let refs = vec![
        RefRecord {
            name: "HEAD".into(),
            update_index: 3,
            value: RefValue::Symref("refs/heads/main".into()),
        },
        RefRecord {
            name: "refs/heads/main".into(),
            update_index: 4,
            value: RefValue::Object(id(1)),
        },
        RefRecord {
            name: "refs/heads/gone".into(),
            update_index: 5,
            value: RefValue::Deletion,
        },
        RefRecord {
            name: "refs/tags/v1".into(),
            update_index: 3,
            value: RefValue::Peeled {
                target: id(2),
                peeled: id(1),
            },
        },
    ];
    let logs = vec![
        log("refs/heads/main", 3, 0, 1, "create"),
        log("refs/heads/main", 4, 1, 1, "push"),
        LogRecord {
            ref_name: "refs/heads/gone".into(),
            update_index: 5,
            update: None,
        },
    ];
    (refs, logs)
}

fn log(name: &str, index: u64, old: u32, new: u32, msg: &str) -> LogRecord {
    LogRecord {
        ref_name: name.into(),
        update_index: index,
        update: Some(LogUpdate {
            old_id: if old == 0 { [0; 20] } else { id(old) },
            new_id: id(new),
            name: "A U Thor".into(),
            email: "author@example.com".into(),
            time: 1_700_000_000 + index,
            tz_offset: -480,
            message: msg.into(),
        }),
    }
}

#[test]
fn a_small_table_reads_back_as_written() {
    let (refs, logs) = small();
    let bytes = write_table(&WriteOptions::default(), 3, 5, &refs, &logs).unwrap();
    // One unpadded ref block, logs, no indexes.
    assert!(bytes.len() < 600, "{} bytes", bytes.len());
    let (h, f) = Footer::decode("t", 0, &bytes[bytes.len() - FOOTER_LEN..]).unwrap();
    assert_eq!(
        h,
        Header {
            block_size: 4096,
            min_update_index: 3,
            max_update_index: 5
        }
    );
    assert_eq!((f.ref_index_position, f.log_index_position), (0, 0));
    assert_eq!(&bytes[24..25], b"r");
    let t = table(bytes).unwrap();
    let mut sorted = refs.clone();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let read: Vec<RefRecord> = t.refs().collect::<Result<_, _>>().unwrap();
    assert_eq!(read, sorted);
    assert_eq!(t.read_ref("refs/tags/v1").unwrap().as_ref(), Some(&refs[3]));
    assert_eq!(
        t.read_ref("refs/heads/gone").unwrap().unwrap().value,
        RefValue::Deletion
    );
    assert_eq!(t.read_ref("refs/heads/mai").unwrap(), None);
    assert_eq!(t.read_ref("refs/z").unwrap(), None);
    let main: Vec<LogRecord> = t
        .logs_of("refs/heads/main")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(main, vec![logs[1].clone(), logs[0].clone()], "newest first");
    assert_eq!(t.logs_of("refs/heads").unwrap().count(), 0);
    assert_eq!(t.logs().count(), 3);
}

#[test]
fn an_empty_table_and_a_log_only_table() {
    let bytes = write_table(&WriteOptions::default(), 1, 1, &[], &[]).unwrap();
    assert_eq!(bytes.len(), 24 + 68);
    let t = table(bytes).unwrap();
    assert!(t.is_empty());
    assert_eq!(t.refs().count(), 0);
    assert_eq!(t.read_ref("HEAD").unwrap(), None);

    let logs = vec![log("refs/heads/a", 1, 0, 1, "x")];
    let bytes = write_table(&WriteOptions::default(), 1, 1, &[], &logs).unwrap();
    assert_eq!(&bytes[24..25], b"g", "the log block follows the header");
    let t = table(bytes).unwrap();
    assert_eq!(t.refs().count(), 0);
    let read: Vec<_> = t
        .logs_of("refs/heads/a")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(read, logs);
}

/// 5000 refs and 3000 log records: many ref blocks (with the ref index), many log blocks
/// (with the log index).
fn big() -> (Vec<RefRecord>, Vec<LogRecord>, Vec<u8>) {
    let refs: Vec<RefRecord> = (0..5000u32)
        .map(|i| RefRecord {
            name: format!("refs/changes/{:02}/{i}/meta", i % 100),
            update_index: 1 + u64::from(i % 7),
            value: match i % 3 {
                0 => RefValue::Object(id(i)),
                1 => RefValue::Peeled {
                    target: id(i),
                    peeled: id(i + 1),
                },
                _ => RefValue::Symref(format!("refs/heads/{i}")),
            },
        })
        .collect();
    let logs: Vec<LogRecord> = (0..3000u32)
        .map(|i| {
            log(
                &format!("refs/heads/b{}", i / 3),
                1 + u64::from(i % 3),
                i,
                i + 1,
                &format!("message {i}"),
            )
        })
        .collect();
    let bytes = write_table(
        &WriteOptions {
            block_size: 1024,
            restart_interval: 16,
        },
        1,
        7,
        &refs,
        &logs,
    )
    .unwrap();
    (refs, logs, bytes)
}

#[test]
fn a_table_of_many_blocks_is_sought_through_its_indexes() {
    let (mut refs, logs, bytes) = big();
    let (_, f) = Footer::decode("t", 0, &bytes[bytes.len() - FOOTER_LEN..]).unwrap();
    assert!(
        f.ref_index_position > 0 && f.log_index_position > 0,
        "{f:?}"
    );
    // Ref blocks are aligned: the second one starts at 1024.
    assert_eq!(bytes[1024], b'r');
    let t = table(bytes).unwrap();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let read: Vec<RefRecord> = t.refs().collect::<Result<_, _>>().unwrap();
    assert_eq!(read, refs);
    for r in refs.iter().step_by(37) {
        assert_eq!(t.read_ref(&r.name).unwrap().as_ref(), Some(r));
    }
    assert_eq!(t.read_ref("refs/changes/00/0/meta0").unwrap(), None);
    let from: Vec<_> = t
        .refs_from("refs/changes/50")
        .unwrap()
        .take(2)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert!(
        from[0].name.starts_with("refs/changes/50/"),
        "{:?}",
        from[0]
    );
    for b in [0u32, 1, 500, 999] {
        let name = format!("refs/heads/b{b}");
        let got: Vec<LogRecord> = t.logs_of(&name).unwrap().collect::<Result<_, _>>().unwrap();
        let mut want: Vec<LogRecord> = logs
            .iter()
            .filter(|l| l.ref_name == name)
            .cloned()
            .collect();
        want.sort_by_key(|l| std::cmp::Reverse(l.update_index));
        assert_eq!(got, want, "{name}");
    }
    assert_eq!(t.logs().count(), logs.len());
}

#[test]
fn records_outside_the_update_index_range_or_twice_are_refused() {
    let (refs, logs) = small();
    let err = write_table(&WriteOptions::default(), 4, 5, &refs, &logs).unwrap_err();
    assert!(err.to_string().contains("outside 4..=5"), "{err}");
    let twice = vec![refs[1].clone(), refs[1].clone()];
    let err = write_table(&WriteOptions::default(), 3, 5, &twice, &[]).unwrap_err();
    assert!(err.to_string().contains("written twice"), "{err}");
}

/// Every error from damaged bytes names the table and an offset in it.
fn check_damaged(bytes: Vec<u8>, what: &str) {
    let result = std::panic::catch_unwind(|| {
        let t = match table(bytes) {
            Ok(t) => t,
            Err(e) => return Err(e),
        };
        for r in t.refs() {
            r?;
        }
        for l in t.logs() {
            l?;
        }
        for name in ["HEAD", "refs/changes/42/342/meta", "refs/heads/main", "zzz"] {
            t.read_ref(name)?;
            for l in t.logs_of(name)? {
                l?;
            }
        }
        for name in ["refs/heads/b17", "refs/heads/b998"] {
            for l in t.logs_of(name)? {
                l?;
            }
        }
        Ok(())
    });
    match result {
        Err(_) => panic!("{what}: the reader panicked"),
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let msg = e.to_string();
            assert!(msg.starts_with("t.ref"), "{what}: {msg}");
        }
    }
}

#[test]
fn truncated_tables_fail_cleanly() {
    let (refs, logs) = small();
    let bytes = write_table(&WriteOptions::default(), 3, 5, &refs, &logs).unwrap();
    for len in 0..bytes.len() {
        let mut cut = bytes[..len].to_vec();
        check_damaged(cut.clone(), &format!("cut at {len}"));
        // A cut with the footer put back: the blocks end early.
        if len >= 24 {
            cut.extend_from_slice(&bytes[bytes.len() - FOOTER_LEN..]);
            check_damaged(cut, &format!("cut at {len}, footer kept"));
        }
    }
    let (_, _, big) = big();
    for len in (0..big.len()).step_by(97) {
        check_damaged(big[..len].to_vec(), &format!("big cut at {len}"));
    }
}

#[test]
fn bit_flipped_tables_fail_cleanly() {
    let (refs, logs) = small();
    let small = write_table(&WriteOptions::default(), 3, 5, &refs, &logs).unwrap();
    let (_, _, big) = big();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for bytes in [&small, &big] {
        for round in 0..600 {
            let mut b = bytes.clone();
            let flips = 1 + rand() % 4;
            for _ in 0..flips {
                let at = (rand() % b.len() as u64) as usize;
                b[at] ^= 1 << (rand() % 8);
            }
            // Flips in the footer fail its CRC; fix the CRC so the reader looks further.
            if round % 2 == 0 {
                let n = b.len();
                let crc = crc32fast::hash(&b[n - FOOTER_LEN..n - 4]);
                b[n - 4..].copy_from_slice(&crc.to_be_bytes());
            }
            check_damaged(b, &format!("flip round {round}"));
        }
    }
}
