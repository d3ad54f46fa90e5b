//! Transports for packd: git smart HTTP, git:// daemon and stdio.
