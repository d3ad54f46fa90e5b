//! The corpus of crafted pushes receive_fsck.rs sends to git's receive-pack and packd's: one
//! client repository, one branch or tag per case, each carrying one crafted object (made with
//! `git hash-object --literally`), after git's t1450, t7415, t7416, t7417 and t0060 cases.

use crate::common::{Repo, Sandbox};
use crate::{ABSENT, ZERO};

/// One crafted push: `reference` (a branch or tag) carries the bad object.
pub struct Case {
    pub name: String,
    pub reference: String,
}

/// The client repository, its base commit (already on both servers) and what it is made of.
pub struct Corpus {
    pub client: Repo,
    pub base: String,
    pub cases: Vec<Case>,
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// A raw tree of (mode, name, id) entries, in the order given.
pub fn raw_tree(entries: &[(&str, &[u8], &str)]) -> Vec<u8> {
    let mut tree = Vec::new();
    for (mode, name, id) in entries {
        tree.extend_from_slice(mode.as_bytes());
        tree.push(b' ');
        tree.extend_from_slice(name);
        tree.push(0);
        tree.extend_from_slice(&hex_bytes(id));
    }
    tree
}

impl Corpus {
    pub fn write(&self, kind: &str, data: &[u8]) -> String {
        let out = self.client.git_stdin(
            &["hash-object", "--literally", "-t", kind, "-w", "--stdin"],
            data,
        );
        String::from_utf8(out).unwrap().trim().to_string()
    }

    pub fn commit_of_tree(&self, tree: &str) -> String {
        self.client
            .git_str(&["commit-tree", "-p", &self.base, "-m", "case", tree])
    }

    fn add(&mut self, name: &str, reference: String, target: &str) {
        self.client.git(&["update-ref", &reference, target]);
        self.cases.push(Case {
            name: name.to_string(),
            reference,
        });
    }

    /// A branch whose commit has `tree` (raw bytes) as its root.
    fn tree_case(&mut self, name: &str, tree: &[u8]) {
        let tree = self.write("tree", tree);
        let commit = self.commit_of_tree(&tree);
        self.add(name, format!("refs/heads/{name}"), &commit);
    }

    /// A branch whose root tree has `blob` (bytes) under `entry` with `mode`.
    fn blob_case(&mut self, name: &str, mode: &str, entry: &[u8], blob: &[u8]) {
        let blob = self.write("blob", blob);
        self.tree_case(name, &raw_tree(&[(mode, entry, &blob)]));
    }

    /// A branch on a crafted commit (`{tree}` and `{base}` filled in).
    fn commit_case(&mut self, name: &str, text: &[u8]) {
        let text = String::from_utf8_lossy(text)
            .replace("{tree}", &self.empty_tree())
            .replace("{base}", &self.base);
        let commit = self.write("commit", text.as_bytes());
        self.add(name, format!("refs/heads/{name}"), &commit);
    }

    /// A tag ref on a crafted tag (`{base}` filled in).
    fn tag_case(&mut self, name: &str, text: &str) {
        let tag = self.write("tag", text.replace("{base}", &self.base).as_bytes());
        self.add(name, format!("refs/tags/{name}"), &tag);
    }

    fn empty_tree(&self) -> String {
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904".to_string()
    }
}

pub const WHO: &str = "A U Thor <author@example.com> 1700000000 +0000";

pub fn corpus(sb: &Sandbox) -> Corpus {
    let client = sb.init("client");
    std::fs::write(client.path.join("f"), "base\n").unwrap();
    client.git(&["add", "f"]);
    client.git(&["commit", "-q", "-m", "base"]);
    let base = client.git_str(&["rev-parse", "HEAD"]);
    let mut c = Corpus {
        client,
        base,
        cases: Vec::new(),
    };
    c.write("tree", b""); // the empty tree, for commits
    let blob = c.write("blob", b"content\n");
    let sub = c.write("tree", &raw_tree(&[("100644", b"f", &blob)]));

    // Trees: names git refuses (t1450), .git as every filesystem spells it (t0060).
    for (i, name) in [
        &b".git"[..],
        b".GIT",
        b"git~1",
        b"GIT~1",
        b".git.",
        b".git ",
        b".git. . .",
        b".GIT ",
        b".g\xe2\x80\x8cit",
        b".gi\xe2\x80\x8dt",
        b".git\xef\xbb\xbf",
        b".git::$INDEX_ALLOCATION",
        b".git\xef\xbf\xbf",
        b"a\\.git",
        b"a\\git~1",
    ]
    .iter()
    .enumerate()
    {
        c.tree_case(&format!("dotgit-{i}"), &raw_tree(&[("40000", name, &sub)]));
    }
    c.tree_case("not-dotgit", &raw_tree(&[("40000", b".gitx", &sub)]));
    c.tree_case("has-dot", &raw_tree(&[("40000", b".", &sub)]));
    c.tree_case("has-dotdot", &raw_tree(&[("40000", b"..", &sub)]));
    c.tree_case("full-pathname", &raw_tree(&[("100644", b"a/b", &blob)]));
    c.tree_case("null-sha1", &raw_tree(&[("160000", b"sub", ZERO)]));
    c.tree_case("zero-padded", &raw_tree(&[("0100644", b"a", &blob)]));
    c.tree_case("mode-664", &raw_tree(&[("100664", b"a", &blob)]));
    c.tree_case("mode-600", &raw_tree(&[("100600", b"a", &blob)]));
    c.tree_case(
        "not-sorted",
        &raw_tree(&[("100644", b"b", &blob), ("100644", b"a", &blob)]),
    );
    c.tree_case(
        "duplicate",
        &raw_tree(&[("100644", b"a", &blob), ("100644", b"a", &blob)]),
    );
    c.tree_case(
        "file-and-dir",
        &raw_tree(&[
            ("100644", b"a", &blob),
            ("100644", b"a.b", &blob),
            ("40000", b"a", &sub),
        ]),
    );
    for (i, name) in [
        &b".gitmodules"[..],
        b"GITMOD~1",
        b".gitmodules ",
        b"gi7eba~9",
    ]
    .iter()
    .enumerate()
    {
        c.tree_case(
            &format!("gitmodules-symlink-{i}"),
            &raw_tree(&[("120000", name, &blob)]),
        );
    }
    c.tree_case(
        "gitattributes-symlink",
        &raw_tree(&[("120000", b".gitattributes", &blob)]),
    );
    c.tree_case(
        "gitignore-symlink",
        &raw_tree(&[("120000", b".gitignore", &blob)]),
    );
    c.tree_case(
        "mailmap-symlink",
        &raw_tree(&[("120000", b".mailmap", &blob)]),
    );
    c.tree_case(
        "gitmodules-tree",
        &raw_tree(&[("40000", b".gitmodules", &sub)]),
    );
    c.tree_case(
        "gitattributes-tree",
        &raw_tree(&[("40000", b".gitattributes", &sub)]),
    );
    let absent = ABSENT;
    c.tree_case(
        "gitmodules-missing",
        &raw_tree(&[("160000", b".gitmodules", absent)]),
    );
    c.tree_case(
        "gitattributes-missing",
        &raw_tree(&[("160000", b".gitattributes", absent)]),
    );

    // .gitmodules blobs (t7415, t7416, t7417), under their name or an alias.
    let modules: &[(&str, &[u8], &[u8])] = &[
        (
            "gm-good",
            b".gitmodules",
            b"[submodule \"a\"]\n\tpath = a\n\turl = https://example.com/a\n",
        ),
        (
            "gm-name",
            b".gitmodules",
            b"[submodule \"../../hooks\"]\n\tpath = x\n\turl = ./x\n",
        ),
        (
            "gm-name-alias",
            b"GITMOD~1",
            b"[submodule \"..\"]\n\turl = ./x\n",
        ),
        (
            "gm-name-ntfs",
            b".gitmodules.",
            b"[submodule \"a\\\\..\"]\n\turl = ./x\n",
        ),
        (
            "gm-name-hfs",
            b".gitm\xe2\x80\x8codules",
            b"[submodule \"../x\"]\n\turl = ./x\n",
        ),
        (
            "gm-name-backslash",
            b"x\\.gitmodules",
            b"[submodule \"..\\\\x\"]\n\turl = ./x\n",
        ),
        (
            "gm-url-dash",
            b".gitmodules",
            b"[submodule \"x\"]\n\tpath = x\n\turl = -upload-pack=evil\n",
        ),
        (
            "gm-url-dotdot-colon",
            b".gitmodules",
            b"[submodule \"x\"]\n\turl = ../../:example.com/x\n",
        ),
        (
            "gm-url-dotdot-slash",
            b".gitmodules",
            b"[submodule \"x\"]\n\turl = ../../../x\n",
        ),
        (
            "gm-url-newline",
            b".gitmodules",
            b"[submodule \"x\"]\n\turl = ./%0ahost=x\n",
        ),
        (
            "gm-url-http-newline",
            b".gitmodules",
            b"[submodule \"x\"]\n\turl = https://one.example.com%0a/x\n",
        ),
        (
            "gm-url-no-host",
            b".gitmodules",
            b"[submodule \"x\"]\n\turl = http::https:///x\n",
        ),
        (
            "gm-url-relative-ok",
            b".gitmodules",
            b"[submodule \"x\"]\n\turl = ../x\n",
        ),
        (
            "gm-path-dash",
            b".gitmodules",
            b"[submodule \"x\"]\n\tpath = -x\n\turl = ./x\n",
        ),
        (
            "gm-path-quoted-dash",
            b".gitmodules",
            b"[submodule \"x\"]\n\tpath = \"-x\"\n",
        ),
        (
            "gm-update",
            b".gitmodules",
            b"[submodule \"x\"]\n\tupdate = !rm -rf .\n",
        ),
        (
            "gm-update-ok",
            b".gitmodules",
            b"[submodule \"x\"]\n\tupdate = rebase\n",
        ),
        (
            "gm-parse",
            b".gitmodules",
            b"[submodule \"x\"\n\turl = ./x\n",
        ),
        (
            "gm-parse-after-bad",
            b".gitmodules",
            b"[submodule \"..\"]\nurl = ./x\n[bad\n",
        ),
        (
            "gm-old-style",
            b".gitmodules",
            b"[submodule.x]\n\turl = -x\n",
        ),
    ];
    for (name, entry, text) in modules {
        c.blob_case(name, "100644", entry, text);
    }
    let mut long = b"*.c diff ".to_vec();
    long.extend(std::iter::repeat_n(b'x', 2100));
    long.push(b'\n');
    c.blob_case("ga-long-line", "100644", b".gitattributes", &long);
    c.blob_case("ga-good", "100644", b".gitattributes", b"*.c diff\n");

    // Commits (t1450's ident cases and more).
    let commits: &[(&str, String)] = &[
        ("c-good", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\ncommitter {WHO}\n\nm\n")),
        ("c-bad-tz", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\ncommitter A <a@x> 1 +00000\n\nm\n")),
        ("c-bad-date", format!("tree {{tree}}\nparent {{base}}\nauthor A <a@x> x +0000\ncommitter {WHO}\n\nm\n")),
        ("c-zero-date", format!("tree {{tree}}\nparent {{base}}\nauthor A <a@x> 0123 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-overflow", format!("tree {{tree}}\nparent {{base}}\nauthor A <a@x> 18446744073709551617 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-bad-email", format!("tree {{tree}}\nparent {{base}}\nauthor A <a<x> 1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-bad-name", format!("tree {{tree}}\nparent {{base}}\nauthor A> <a@x> 1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-no-email", format!("tree {{tree}}\nparent {{base}}\nauthor A a@x 1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-no-name", format!("tree {{tree}}\nparent {{base}}\nauthor <a@x> 1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-no-space-email", format!("tree {{tree}}\nparent {{base}}\nauthor A<a@x> 1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-no-space-date", format!("tree {{tree}}\nparent {{base}}\nauthor A <a@x>1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-two-spaces-date", format!("tree {{tree}}\nparent {{base}}\nauthor A <a@x>  1 +0000\ncommitter {WHO}\n\nm\n")),
        ("c-no-author", format!("tree {{tree}}\nparent {{base}}\ncommitter {WHO}\n\nm\n")),
        ("c-two-authors", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\nauthor {WHO}\ncommitter {WHO}\n\nm\n")),
        ("c-no-committer", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\n\nm\n")),
        ("c-nul-body", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\ncommitter {WHO}\n\nm\0x\n")),
        ("c-unterminated", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\ncommitter {WHO}")),
        ("c-extra-header", format!("tree {{tree}}\nparent {{base}}\nauthor {WHO}\ncommitter {WHO}\nencoding x\n\nm\n")),
    ];
    for (name, text) in commits {
        c.commit_case(name, text.as_bytes());
    }

    // Tags.
    let tags: &[(&str, String)] = &[
        (
            "t-good",
            format!("object {{base}}\ntype commit\ntag t-good\ntagger {WHO}\n\nm\n"),
        ),
        (
            "t-no-tagger",
            "object {base}\ntype commit\ntag t\n\nm\n".to_string(),
        ),
        (
            "t-bad-name",
            format!("object {{base}}\ntype commit\ntag a..b\ntagger {WHO}\n\nm\n"),
        ),
        (
            "t-bad-tagger",
            "object {base}\ntype commit\ntag t\ntagger T t@x 1 +0000\n\nm\n".to_string(),
        ),
        (
            "t-extra-header",
            format!("object {{base}}\ntype commit\ntag t\ntagger {WHO}\nx y\n\nm\n"),
        ),
        (
            "t-unterminated",
            format!("object {{base}}\ntype commit\ntag t\ntagger {WHO}"),
        ),
    ];
    for (name, text) in tags {
        c.tag_case(name, text);
    }
    c
}
