//! Answers kept for the rest of one request ([`PerRequest`]): in object storage each read of a
//! repository's small files (its `config`, the listing of `pack/`, `tables.list`) is a round
//! trip, and one request asks the same question more than once (a stamp, then an open; a
//! push's gate, then its target). The request is its [`RequestReads`] scope, so code outside
//! any request (the command line, tests) always asks again.

use crate::RequestReads;
use std::sync::Mutex;

/// The last answer one request got for a key, reused by that request only. One request's at
/// a time: another request's answer replaces it (a miss then, never a wrong answer).
#[derive(Debug)]
pub struct PerRequest<K, V> {
    last: Mutex<Option<(RequestReads, K, V)>>,
}

impl<K, V> Default for PerRequest<K, V> {
    fn default() -> Self {
        PerRequest {
            last: Mutex::new(None),
        }
    }
}

impl<K: PartialEq, V: Clone> PerRequest<K, V> {
    /// Nothing kept yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The answer the current request keeps for `key`, if any (kept for later asks too).
    pub fn get(&self, key: &K) -> Option<V> {
        let request = RequestReads::current()?;
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((r, k, v)) if r.same(&request) && k == key => Some(v.clone()),
            _ => None,
        }
    }

    /// [`PerRequest::get`], once: the answer is dropped, so the next ask goes to the store
    /// (for a caller that asks again because it found the answer out of date).
    pub fn take(&self, key: &K) -> Option<V> {
        let request = RequestReads::current()?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((r, k, _)) if r.same(&request) && k == key => last.take().map(|(_, _, v)| v),
            _ => None,
        }
    }

    /// Keeps `value` for `key` for the current request; outside a request, nothing.
    pub fn put(&self, key: K, value: V) {
        if let Some(request) = RequestReads::current() {
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((request, key, value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_for_its_own_request_and_key_only() {
        let kept: PerRequest<&str, u32> = PerRequest::new();
        kept.put("a", 1);
        assert_eq!(kept.get(&"a"), None, "outside a request nothing is kept");
        let one = RequestReads::new();
        let guard = one.enter();
        kept.put("a", 1);
        assert_eq!(kept.get(&"a"), Some(1));
        assert_eq!(kept.get(&"b"), None);
        drop(guard);
        let two = RequestReads::new();
        let _guard = two.enter();
        assert_eq!(kept.get(&"a"), None, "another request asks again");
        kept.put("a", 2);
        assert_eq!(kept.take(&"a"), Some(2));
        assert_eq!(kept.take(&"a"), None, "taken once");
    }
}
