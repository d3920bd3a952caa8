//! `X-Hub-Signature-256`: HMAC-SHA256 of the raw body under the webhook secret.

use hmac::{Hmac, KeyInit as _, Mac as _};
use secrecy::{ExposeSecret as _, SecretString};
use sha2::Sha256;

/// Why a signature was refused. Every variant is answered with 401; the kind is for logs
/// and metrics only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `X-Hub-Signature-256` header (an `X-Hub-Signature` SHA-1 header alone counts as none).
    Missing,
    /// The header does not start with `sha256=`.
    NoPrefix,
    /// The digest is not 64 hexadecimal digits (32 bytes).
    BadLength,
    /// The digest does not match.
    Mismatch,
}

impl Refused {
    /// A label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Missing => "missing",
            Refused::NoPrefix => "no_prefix",
            Refused::BadLength => "bad_length",
            Refused::Mismatch => "mismatch",
        }
    }
}

/// Check `header` (the `X-Hub-Signature-256` value) against `body` under `secret`. The digest
/// comparison is constant-time (`Mac::verify_slice`).
pub fn verify(secret: &SecretString, header: Option<&[u8]>, body: &[u8]) -> Result<(), Refused> {
    let header = header.ok_or(Refused::Missing)?;
    let hex_digest = header.strip_prefix(b"sha256=").ok_or(Refused::NoPrefix)?;
    if hex_digest.len() != 64 {
        return Err(Refused::BadLength);
    }
    let mut expected = [0u8; 32];
    hex::decode_to_slice(hex_digest, &mut expected).map_err(|_| Refused::BadLength)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose_secret().as_bytes())
        .map_err(|_| Refused::Mismatch)?;
    mac.update(body);
    mac.verify_slice(&expected).map_err(|_| Refused::Mismatch)
}

/// The header value GitHub would send for `body` (for clients, tests and the benchmark).
pub fn sign(secret: &SecretString, body: &[u8]) -> String {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.expose_secret().as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> SecretString {
        SecretString::from("It's a Secret to Everybody")
    }

    /// GitHub's published example ("Validating webhook deliveries").
    const VECTOR: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_published_vector() {
        assert_eq!(sign(&secret(), b"Hello, World!"), VECTOR);
        assert_eq!(
            verify(&secret(), Some(VECTOR.as_bytes()), b"Hello, World!"),
            Ok(())
        );
    }

    #[test]
    fn refusals() {
        let body = b"Hello, World!";
        assert_eq!(verify(&secret(), None, body), Err(Refused::Missing));
        assert_eq!(
            verify(&secret(), Some(&VECTOR.as_bytes()[7..]), body),
            Err(Refused::NoPrefix)
        );
        assert_eq!(
            verify(
                &secret(),
                Some(b"sha1=0123456789abcdef0123456789abcdef01234567"),
                body
            ),
            Err(Refused::NoPrefix)
        );
        assert_eq!(
            verify(&secret(), Some(&VECTOR.as_bytes()[..70]), body),
            Err(Refused::BadLength)
        );
        let long = format!("{VECTOR}00");
        assert_eq!(
            verify(&secret(), Some(long.as_bytes()), body),
            Err(Refused::BadLength)
        );
        let not_hex = format!("sha256={}", "zz".repeat(32));
        assert_eq!(
            verify(&secret(), Some(not_hex.as_bytes()), body),
            Err(Refused::BadLength)
        );
        assert_eq!(
            verify(&secret(), Some(VECTOR.as_bytes()), b"Hello, World?"),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify(
                &SecretString::from("another secret"),
                Some(VECTOR.as_bytes()),
                body
            ),
            Err(Refused::Mismatch)
        );
    }
}
