//! Bytes already in memory, served through the [`Blob`] trait: a pack or index just written
//! and read back without its file, or a file built in a test.

use crate::{check_range, Blob, StorageError};
use bytes::Bytes;
use std::ops::Range;

/// A blob whose bytes are in memory.
#[derive(Debug, Clone)]
pub struct MemoryBlob {
    name: String,
    bytes: Bytes,
}

impl MemoryBlob {
    /// `bytes` under `name` (the file they are the contents of, for messages).
    pub fn new(name: impl Into<String>, bytes: Bytes) -> MemoryBlob {
        MemoryBlob {
            name: name.into(),
            bytes,
        }
    }
}

impl Blob for MemoryBlob {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        check_range(&self.name, &range, self.len())?;
        Ok(self.bytes.slice(range.start as usize..range.end as usize))
    }
}
