//! The process's TLS crypto provider.
//!
//! reqwest (models) and octocrab (GitHub) are built on rustls without a provider of their
//! own choosing; each looks for the process-wide one. This installs ring,
//! the one this crate is built with, once; every client calls it before building.

/// Install ring as the process's rustls provider, unless one is installed already.
pub(crate) fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one first: that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
