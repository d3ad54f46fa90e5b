//! The licence every crate declares (`MIT OR Apache-2.0`) is shipped: both texts at the
//! workspace's root, whole, and named in the README.

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(name: &str) -> String {
    let path = workspace_root().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn both_declared_licence_texts_are_shipped() {
    let manifest = read("Cargo.toml");
    assert!(manifest.contains("license = \"MIT OR Apache-2.0\""));
    assert_eq!(env!("CARGO_PKG_LICENSE"), "MIT OR Apache-2.0");

    let apache = read("LICENSE-APACHE");
    assert!(apache.contains("Apache License\n                        Version 2.0, January 2004"));
    // The whole text, not a summary: its nine sections and the end of its terms.
    for section in 1..=9 {
        assert!(
            apache.contains(&format!("\n{section}. ")),
            "section {section}"
        );
    }
    assert!(apache.contains("END OF TERMS AND CONDITIONS"));

    let mit = read("LICENSE-MIT");
    assert!(mit.contains("Permission is hereby granted, free of charge"));
    assert!(mit.contains("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF"));

    let readme = read("README.md");
    assert!(readme.contains("LICENSE-APACHE") && readme.contains("LICENSE-MIT"));
}
