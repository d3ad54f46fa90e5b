//! (being written: see lib.rs)
