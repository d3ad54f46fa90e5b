//! Reachability: which objects a set of tips reaches, minus what another set reaches.
//!
//! ```text
//! walk.rs      commits and trees parsed and walked (no bitmaps needed)
//! ```
//! Reachability bitmaps (`.bitmap`, `.rev`) come next, behind the same questions.

pub mod walk;
