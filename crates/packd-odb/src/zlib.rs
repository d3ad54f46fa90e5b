//! Inflating zlib streams.
//!
//! Pack entries and loose objects declare their inflated size up front, and a pack entry's compressed
//! extent is known from the next entry's offset, so the fast path inflates a whole buffer in one
//! call with libdeflate (about twice zlib's speed here). A streaming inflater (flate2) is used only to
//! peek at the first bytes of a stream: a loose object's header or a delta's declared sizes.

use std::cell::RefCell;

/// Deflate cannot expand data by more than about 1032:1; a declared size beyond that for the
/// compressed bytes present is a lie, and is refused before anything is allocated for it.
const MAX_RATIO: u64 = 1032;

/// Why a stream did not inflate to what it declared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// The declared size is impossible for the number of compressed bytes.
    #[error("declared size {declared} is impossible for {compressed} compressed bytes")]
    ImpossibleSize {
        /// The size the header claims.
        declared: u64,
        /// The compressed bytes available.
        compressed: u64,
    },
    /// The stream is not valid zlib (bad header, bad code, bad checksum) or is cut short.
    #[error("the zlib stream is corrupt or truncated")]
    BadData,
    /// The stream would inflate past its declared size (or is damaged so that it seems to).
    #[error("the zlib stream is corrupt or inflates to more than the {declared} bytes declared")]
    TooLarge {
        /// The size the header claims.
        declared: u64,
    },
    /// The stream inflates to fewer bytes than declared.
    #[error("the zlib stream inflates to only {actual} bytes, not the {declared} declared")]
    WrongSize {
        /// The size the header claims.
        declared: u64,
        /// What the stream held.
        actual: u64,
    },
}

/// Checks that `declared` bytes could come out of `compressed` bytes of zlib.
pub fn check_declared_size(declared: u64, compressed: usize) -> Result<(), InflateError> {
    let limit = (compressed as u64)
        .saturating_mul(MAX_RATIO)
        .saturating_add(64);
    if declared > limit {
        return Err(InflateError::ImpossibleSize {
            declared,
            compressed: compressed as u64,
        });
    }
    Ok(())
}

thread_local! {
    static DECOMPRESSOR: RefCell<libdeflater::Decompressor> = RefCell::new(libdeflater::Decompressor::new());
}

/// Inflates the zlib stream at the start of `input`, which must produce exactly `size` bytes.
pub fn inflate_exact(input: &[u8], size: u64) -> Result<Vec<u8>, InflateError> {
    check_declared_size(size, input.len())?;
    let size_usize = usize::try_from(size).map_err(|_| InflateError::ImpossibleSize {
        declared: size,
        compressed: input.len() as u64,
    })?;
    // One spare byte tells "exactly size" from "more than size".
    let mut out = vec![0u8; size_usize + 1];
    let n = DECOMPRESSOR.with(|d| d.borrow_mut().zlib_decompress(input, &mut out));
    match n {
        Ok(n) if n == size_usize => {
            out.truncate(n);
            Ok(out)
        }
        Ok(n) if n > size_usize => Err(InflateError::TooLarge { declared: size }),
        Ok(n) => Err(InflateError::WrongSize {
            declared: size,
            actual: n as u64,
        }),
        Err(libdeflater::DecompressionError::InsufficientSpace) => {
            Err(InflateError::TooLarge { declared: size })
        }
        Err(libdeflater::DecompressionError::BadData) => Err(InflateError::BadData),
    }
}

/// Inflates at most `max` bytes from the start of the zlib stream in `input`, for peeking at a
/// header. Returns fewer bytes when the stream is shorter.
pub fn inflate_prefix(input: &[u8], max: usize) -> Result<Vec<u8>, InflateError> {
    let mut inflater = flate2::Decompress::new(true);
    let mut out = Vec::with_capacity(max);
    // All input is given at once, so one call inflates as much as fits (or as much as there is).
    inflater
        .decompress_vec(input, &mut out, flate2::FlushDecompress::Sync)
        .map_err(|_| InflateError::BadData)?;
    out.truncate(max);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn inflates_exactly_and_refuses_wrong_sizes() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let z = deflate(&data);
        assert_eq!(inflate_exact(&z, data.len() as u64).unwrap(), data);
        assert!(matches!(
            inflate_exact(&z, data.len() as u64 - 1),
            Err(InflateError::TooLarge { .. })
        ));
        assert!(matches!(
            inflate_exact(&z, data.len() as u64 + 1),
            Err(InflateError::WrongSize { .. })
        ));
        assert!(matches!(
            inflate_exact(&z, 1 << 60),
            Err(InflateError::ImpossibleSize { .. })
        ));
        assert!(inflate_exact(&z[..z.len() - 3], data.len() as u64).is_err());
        assert!(inflate_exact(&z[..z.len() / 2], data.len() as u64).is_err());
        let mut trailing = z.clone();
        trailing.extend_from_slice(&[0x78, 0x9c, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            inflate_exact(&trailing, data.len() as u64).unwrap(),
            data,
            "bytes after the stream (the next pack entry) are ignored"
        );
        assert_eq!(inflate_prefix(&z, 16).unwrap()[..16], data[..16]);
        assert_eq!(inflate_prefix(&deflate(b"abc"), 16).unwrap(), b"abc");
    }
}
