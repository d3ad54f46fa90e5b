//! The reference-transaction hook's points in a transaction, as git calls it: `prepared` once
//! every ref is locked and verified (its refusal aborts the transaction), `committed` once the
//! refs are written, `aborted` when a prepared-or-preparing transaction fails. Each call gets
//! the transaction's updates (for a non-atomic push: the one ref of that transaction).

use crate::RefUpdate;

/// Where a transaction is when the hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookState {
    /// Every ref locked and verified; nothing written yet. An `Err` aborts.
    Prepared,
    /// Every ref written.
    Committed,
    /// The transaction failed; nothing was written.
    Aborted,
}

impl HookState {
    /// The word git passes to the hook (`prepared`, `committed`, `aborted`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookState::Prepared => "prepared",
            HookState::Committed => "committed",
            HookState::Aborted => "aborted",
        }
    }
}

/// A reference-transaction hook. `run` returns `Err(message)` to refuse; only a refusal at
/// [`HookState::Prepared`] changes anything (git ignores the others' exit codes).
pub trait TransactionHook {
    /// Runs the hook for `updates` at `state`.
    fn run(&mut self, state: HookState, updates: &[RefUpdate]) -> Result<(), String>;
}

/// No hook: every call succeeds.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHook;

impl TransactionHook for NoHook {
    fn run(&mut self, _state: HookState, _updates: &[RefUpdate]) -> Result<(), String> {
        Ok(())
    }
}
