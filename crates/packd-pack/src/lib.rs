//! Pack generation for fetches: what to send (counting with bitmaps) and the pack stream, reusing on-disk entries.
