//! Partial-clone filter specs, as sent after `filter ` (v0 want list, v2 fetch argument).
//!
//! ```text
//! "blob:none"              no blobs
//! "blob:limit=<n>[kmg]"    no blobs of n bytes or more (k/m/g: binary multiples)
//! "tree:<n>"               no trees or blobs deeper than n (tree:0: commits and tags only)
//! ```
//! Other filters git knows (`sparse:oid=`, `object:type=`, `combine:`) are refused.

use crate::ProtocolError;
use packd_pack::Filter;

/// Parses a filter spec.
pub fn parse_filter(spec: &str) -> Result<Filter, ProtocolError> {
    let unsupported = || ProtocolError::Refused(format!("filter '{spec}' not supported"));
    if spec == "blob:none" {
        return Ok(Filter::BlobNone);
    }
    if let Some(limit) = spec.strip_prefix("blob:limit=") {
        // A size as git reads one (`10k`, `1m`), refused when it is not.
        return packd_odb::config::parse_size(limit)
            .map(Filter::BlobLimit)
            .ok_or_else(|| {
                ProtocolError::Refused(format!("invalid filter-spec '{spec}': bad blob size"))
            });
    }
    if let Some(depth) = spec.strip_prefix("tree:") {
        return depth
            .parse::<u64>()
            .map(Filter::TreeDepth)
            .map_err(|_| ProtocolError::Refused(format!("invalid filter-spec '{spec}'")));
    }
    Err(unsupported())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_supported_filters() {
        assert_eq!(parse_filter("blob:none").unwrap(), Filter::BlobNone);
        assert_eq!(
            parse_filter("blob:limit=10k").unwrap(),
            Filter::BlobLimit(10240)
        );
        assert_eq!(parse_filter("blob:limit=3").unwrap(), Filter::BlobLimit(3));
        assert_eq!(
            parse_filter("blob:limit=1G").unwrap(),
            Filter::BlobLimit(1 << 30)
        );
        assert_eq!(parse_filter("tree:0").unwrap(), Filter::TreeDepth(0));
    }

    #[test]
    fn refuses_the_rest() {
        for bad in [
            "sparse:oid=abc",
            "combine:blob:none+tree:0",
            "blob:limit=",
            "blob:limit=x",
            "blob:limit=99999999999999999999g",
            "tree:-1",
            "",
        ] {
            let err = parse_filter(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
