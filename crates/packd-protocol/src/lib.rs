//! git's wire protocol for upload-pack: pkt-line, capability advertisement, ls-refs, want/have negotiation (v0, v1, v2).
