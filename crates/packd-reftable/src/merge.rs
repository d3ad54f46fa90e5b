//! The merged view of a stack's tables: a merge join over their records in key order, where
//! for a key present in several tables the newest table's record wins.

use crate::ReftableError;

/// Merges sorted iterators of records (the first the oldest table's): each key once, with
/// the record of the newest iterator holding it. Tombstones are yielded like any record.
pub(crate) struct Merge<I, T> {
    iters: Vec<I>,
    heads: Vec<Option<(Vec<u8>, T)>>,
    key: fn(&T) -> Vec<u8>,
    started: bool,
    done: bool,
}

impl<I, T> Merge<I, T>
where
    I: Iterator<Item = Result<T, ReftableError>>,
{
    /// A merge of `iters` (oldest first), ordered by `key`.
    pub fn new(iters: Vec<I>, key: fn(&T) -> Vec<u8>) -> Merge<I, T> {
        Merge {
            heads: iters.iter().map(|_| None).collect(),
            iters,
            key,
            started: false,
            done: false,
        }
    }

    /// Moves iterator `i` to its next record.
    fn advance(&mut self, i: usize) -> Result<(), ReftableError> {
        self.heads[i] = match self.iters[i].next() {
            Some(Ok(t)) => Some(((self.key)(&t), t)),
            Some(Err(e)) => return Err(e),
            None => None,
        };
        Ok(())
    }

    fn step(&mut self) -> Result<Option<T>, ReftableError> {
        if !self.started {
            self.started = true;
            for i in 0..self.iters.len() {
                self.advance(i)?;
            }
        }
        // The smallest key; among equal keys the newest (last) iterator's record.
        let mut best: Option<usize> = None;
        for (i, h) in self.heads.iter().enumerate() {
            if let Some((k, _)) = h {
                match best {
                    Some(b) if self.heads[b].as_ref().is_some_and(|(bk, _)| bk < k) => {}
                    _ => best = Some(i),
                }
            }
        }
        let Some(b) = best else { return Ok(None) };
        let (key, winner) = self.heads[b].take().expect("a head");
        self.advance(b)?;
        for i in 0..self.heads.len() {
            if self.heads[i].as_ref().is_some_and(|(k, _)| *k == key) {
                self.advance(i)?;
            }
        }
        Ok(Some(winner))
    }
}

impl<I, T> Iterator for Merge<I, T>
where
    I: Iterator<Item = Result<T, ReftableError>>,
{
    type Item = Result<T, ReftableError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(t)) => Some(Ok(t)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
