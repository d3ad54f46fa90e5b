//! Interop with JGit's reftable reader and writer (org.eclipse.jgit.internal.storage.reftable,
//! in the JGit that `scripts/install-test-clients.sh` installs for the client tests):
//! tables packd writes are dumped by JGit's `ReftableReader` (all refs, all logs, and lookups
//! by `seekRef`/`seekLog`) and the dump compared with what packd wrote; tables JGit's
//! `ReftableWriter` writes (with its obj blocks and indexes) are read by packd and compared
//! with the records JGit was given. Each side has symbolic refs, peeled tags, tombstones,
//! log entries and log deletions, in a one-block table and in one of many blocks.
//!
//! git 2.39 (the git of this machine) has no reftable support, so JGit is the other
//! implementation here.

use bytes::Bytes;
use packd_reftable::{
    hex, write_table, LogRecord, LogUpdate, RefRecord, RefValue, Table, WriteOptions,
};
use packd_storage::MemoryBlob;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

/// The workspace's root.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The classpath of JGit (installed by the project's script) and of ReftableTool.java,
/// compiled here once per test run.
fn classpath() -> &'static str {
    static CP: OnceLock<String> = OnceLock::new();
    CP.get_or_init(|| {
        let cache = match std::env::var_os("PACKD_TEST_CLIENTS_DIR") {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/packd-test-clients"),
        };
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/install-test-clients.sh"))
            .arg(&cache)
            .output()
            .expect("run scripts/install-test-clients.sh");
        let lib = cache.join("jgit/lib");
        assert!(
            cache.join("jgit/ready").exists(),
            "JGit is not installed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let classes = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reftable-jgit");
        std::fs::create_dir_all(&classes).unwrap();
        let jars = format!("{}/*", lib.display());
        let status = Command::new("javac")
            .arg("-d")
            .arg(&classes)
            .arg("-cp")
            .arg(&jars)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jgit/ReftableTool.java"))
            .status()
            .expect("run javac");
        assert!(status.success(), "javac failed");
        format!("{jars}:{}", classes.display())
    })
}

/// Runs ReftableTool with `args` and `stdin`; its stdout.
fn jgit(args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("java")
        .args([
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            classpath(),
            "ReftableTool",
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run java");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "ReftableTool {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn id(n: u32) -> [u8; 20] {
    let mut id = [0x11u8; 20];
    id[..4].copy_from_slice(&n.to_be_bytes());
    id
}

/// A record as ReftableTool prints and reads it.
fn ref_line(r: &RefRecord) -> String {
    let v = match &r.value {
        RefValue::Deletion => "delete".to_string(),
        RefValue::Object(i) => format!("id\t{}", hex(i)),
        RefValue::Peeled { target, peeled } => format!("peeled\t{}\t{}", hex(target), hex(peeled)),
        RefValue::Symref(t) => format!("symref\t{t}"),
    };
    format!("ref\t{}\t{}\t{v}", r.name, r.update_index)
}

fn log_line(l: &LogRecord) -> String {
    let v = match &l.update {
        None => "delete".to_string(),
        Some(u) => format!(
            "update\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            hex(&u.old_id),
            hex(&u.new_id),
            u.name,
            u.email,
            u.time,
            u.tz_offset,
            u.message
        ),
    };
    format!("log\t{}\t{}\t{v}", l.ref_name, l.update_index)
}

/// A set of records: refs sorted by name, logs by key (name, newest first).
struct Records {
    min: u64,
    max: u64,
    refs: Vec<RefRecord>,
    logs: Vec<LogRecord>,
    block_size: u32,
}

fn log(name: &str, index: u64, n: u32, msg: &str) -> LogRecord {
    LogRecord {
        ref_name: name.into(),
        update_index: index,
        update: Some(LogUpdate {
            old_id: if n == 0 { [0; 20] } else { id(n - 1) },
            new_id: id(n),
            name: "C O Mitter".into(),
            email: "committer@example.com".into(),
            time: 1_112_911_993 + u64::from(n),
            tz_offset: if n.is_multiple_of(2) { -420 } else { 150 },
            message: msg.into(),
        }),
    }
}

fn small() -> Records {
    let mut refs = vec![
        RefRecord {
            name: "HEAD".into(),
            update_index: 7,
            value: RefValue::Symref("refs/heads/main".into()),
        },
        RefRecord {
            name: "refs/heads/main".into(),
            update_index: 9,
            value: RefValue::Object(id(3)),
        },
        RefRecord {
            name: "refs/heads/old".into(),
            update_index: 9,
            value: RefValue::Deletion,
        },
        RefRecord {
            name: "refs/tags/v1.0".into(),
            update_index: 8,
            value: RefValue::Peeled {
                target: id(40),
                peeled: id(2),
            },
        },
    ];
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut logs = vec![
        log("refs/heads/main", 7, 1, "branch: Created from HEAD"),
        log("refs/heads/main", 8, 2, "commit: second"),
        log("refs/heads/main", 9, 3, "push"),
        LogRecord {
            ref_name: "refs/heads/old".into(),
            update_index: 8,
            update: None,
        },
    ];
    logs.sort_by_key(|l| l.key());
    Records {
        min: 7,
        max: 9,
        refs,
        logs,
        block_size: 4096,
    }
}

fn big() -> Records {
    let mut refs: Vec<RefRecord> = (0..3000u32)
        .map(|i| RefRecord {
            name: format!("refs/changes/{:02}/{i}/{}", i % 100, i % 5),
            update_index: 1 + u64::from(i % 4),
            value: match i % 4 {
                0 => RefValue::Object(id(i)),
                1 => RefValue::Peeled {
                    target: id(i),
                    peeled: id(i + 7),
                },
                2 => RefValue::Symref(format!("refs/heads/topic-{i}")),
                _ => RefValue::Deletion,
            },
        })
        .collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut logs: Vec<LogRecord> = (0..1200u32)
        .map(|i| {
            log(
                &format!("refs/heads/b{:03}", i / 4),
                1 + u64::from(i % 4),
                i + 1,
                &format!("update number {i}"),
            )
        })
        .collect();
    logs.sort_by_key(|l| l.key());
    Records {
        min: 1,
        max: 4,
        refs,
        logs,
        block_size: 1024,
    }
}

impl Records {
    fn text(&self) -> String {
        let mut s = format!("range\t{}\t{}\n", self.min, self.max);
        for r in &self.refs {
            s += &ref_line(r);
            s.push('\n');
        }
        for l in &self.logs {
            s += &log_line(l);
            s.push('\n');
        }
        s
    }

    /// What ReftableTool prints for lookups of `names`.
    fn seeks(&self, names: &[&str]) -> String {
        let mut s = String::new();
        for n in names {
            match self.refs.iter().find(|r| r.name == *n) {
                Some(r) => s += &format!("seek {}\n", ref_line(r)),
                None => s += &format!("seek missing\t{n}\n"),
            }
            for l in self.logs.iter().filter(|l| l.ref_name == *n) {
                s += &format!("seek {}\n", log_line(l));
            }
        }
        s
    }

    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .refs
            .iter()
            .step_by(41)
            .map(|r| r.name.as_str())
            .collect();
        names.extend(self.logs.iter().step_by(29).map(|l| l.ref_name.as_str()));
        names.extend([
            "refs/heads/main",
            "HEAD",
            "refs/heads/nope",
            "refs/heads/b1",
            "zz",
        ]);
        names
    }
}

#[test]
fn jgit_reads_the_tables_packd_writes() {
    let dir = tempfile::tempdir().unwrap();
    for (which, recs) in [("small", small()), ("big", big())] {
        let opts = WriteOptions {
            block_size: recs.block_size,
            restart_interval: 16,
        };
        let bytes = write_table(&opts, recs.min, recs.max, &recs.refs, &recs.logs).unwrap();
        let path = dir.path().join(format!("{which}.ref"));
        std::fs::write(&path, &bytes).unwrap();
        let names = recs.names();
        let mut args = vec!["dump", path.to_str().unwrap()];
        args.extend(&names);
        let got = jgit(&args, "");
        let want = recs.text() + &recs.seeks(&names);
        assert_eq!(got, want, "{which}: JGit's reading of packd's table");
    }
}

#[test]
fn packd_reads_the_tables_jgit_writes() {
    let dir = tempfile::tempdir().unwrap();
    for (which, recs) in [("small", small()), ("big", big())] {
        let path = dir.path().join(format!("{which}.ref"));
        jgit(
            &[
                "write",
                path.to_str().unwrap(),
                &recs.block_size.to_string(),
            ],
            &recs.text(),
        );
        let bytes = std::fs::read(&path).unwrap();
        let t = Table::open(Arc::new(MemoryBlob::new(
            path.display().to_string(),
            Bytes::from(bytes),
        )))
        .unwrap();
        assert_eq!(
            (t.min_update_index(), t.max_update_index()),
            (recs.min, recs.max)
        );
        let refs: Vec<RefRecord> = t.refs().collect::<Result<_, _>>().unwrap();
        assert_eq!(refs, recs.refs, "{which}: refs");
        let logs: Vec<LogRecord> = t.logs().collect::<Result<_, _>>().unwrap();
        assert_eq!(logs, recs.logs, "{which}: logs");
        for n in recs.names() {
            let want = recs.refs.iter().find(|r| r.name == n);
            assert_eq!(
                t.read_ref(n).unwrap().as_ref(),
                want,
                "{which}: lookup of {n}"
            );
            let got: Vec<LogRecord> = t.logs_of(n).unwrap().collect::<Result<_, _>>().unwrap();
            let want: Vec<LogRecord> = recs
                .logs
                .iter()
                .filter(|l| l.ref_name == n)
                .cloned()
                .collect();
            assert_eq!(got, want, "{which}: logs of {n}");
        }
        // JGit's round trip of the same records gives the same table packd writes, read back.
        let dump = jgit(&["dump", path.to_str().unwrap()], "");
        assert_eq!(dump, recs.text(), "{which}: JGit's own dump");
    }
}
