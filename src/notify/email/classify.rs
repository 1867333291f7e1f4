//! What a failed SMTP attempt means for the sender: retry later, or give up (dead letter).
//!
//! The choices, from the most specific to the least:
//! - A reply code from the server: 5xx (535 authentication failed, 550 mailbox unavailable,
//!   553 mailbox name not allowed, 552 too big, 554 transaction failed) is
//!   [`SendError::Permanent`]; 4xx (421 service not available, 450/451/452 try again) is
//!   [`SendError::Transient`] — RFC 5321's own split.
//! - A TLS failure (a certificate the roots do not trust, a name mismatch, a server that does
//!   not speak TLS on that port, TLS parameters that cannot be built) is Permanent: it is a
//!   configuration problem that retrying cannot fix, and it must not hold the queue forever.
//! - A client-side refusal by lettre (STARTTLS required but not offered, no AUTH mechanism in
//!   common, 8BITMIME needed but missing) is Permanent for the same reason.
//! - Everything else on the way (connection refused or reset, DNS failures, timeouts, a
//!   garbled reply, the deadline of the attempt) is Transient.
//!
//! Invariant: every message names the server (`host:port`) and, for replies, the code and
//! the server's reason; every message goes through [`secret::scrub`], and none is built from
//! credentials (lettre's errors never contain them).

use std::error::Error as StdError;

use lettre::transport::smtp::Error as SmtpError;

use crate::notify::SendError;
use crate::secret;

/// Classifies a lettre SMTP error for `server` (`host:port`).
pub fn classify(server: &str, e: &SmtpError) -> SendError {
    let detail = chain(e);
    if let Some(code) = e.status() {
        let code_text = code.to_string();
        let reason = lettre_reason(e);
        let what = meaning(&code_text);
        let msg = secret::scrub(&format!(
            "SMTP server {server} replied {code_text}{what}: {reason}"
        ));
        return if e.is_permanent() {
            SendError::Permanent(msg)
        } else {
            SendError::transient(msg)
        };
    }
    if e.is_tls() || is_tls_failure(e) {
        return SendError::Permanent(secret::scrub(&format!(
            "TLS with SMTP server {server} failed (check tls, smtp_port and ca_file): {detail}"
        )));
    }
    if e.is_client() {
        return SendError::Permanent(secret::scrub(&format!("SMTP server {server}: {detail}")));
    }
    if e.is_timeout() {
        return SendError::transient(secret::scrub(&format!(
            "SMTP server {server} timed out: {detail}"
        )));
    }
    SendError::transient(secret::scrub(&format!(
        "cannot talk to SMTP server {server}: {detail}"
    )))
}

/// What a common reply code means, for people reading the dead letter.
fn meaning(code: &str) -> &'static str {
    match code {
        "421" => " (service not available)",
        "450" | "550" => " (mailbox unavailable)",
        "451" => " (local error in processing)",
        "452" => " (insufficient storage)",
        "454" => " (temporary authentication failure)",
        "530" => " (authentication required)",
        "534" => " (authentication mechanism too weak)",
        "535" => " (authentication failed: check username and password)",
        "551" => " (user not local)",
        "552" => " (message too big or mailbox full)",
        "553" => " (mailbox name not allowed)",
        "554" => " (transaction failed)",
        _ => "",
    }
}

/// The server's text of a negative reply (lettre's Display is `permanent error (535): text`).
fn lettre_reason(e: &SmtpError) -> String {
    let full = e.to_string();
    match full.split_once("): ") {
        Some((_, reason)) => reason.trim().to_string(),
        None => full,
    }
}

/// The error and its sources, `a: b: c`, without repeating a text already included (lettre
/// nests its errors: `Connection error: Connection error: invalid peer certificate`), and
/// without lettre's "internal client error" preamble.
fn chain(e: &SmtpError) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        source = s.source();
    }
    let mut parts: Vec<&str> = out.split(": ").collect();
    parts.dedup();
    parts.retain(|p| *p != "internal client error");
    parts.join(": ")
}

/// True when the chain holds a TLS failure: a nested lettre TLS error, or the `InvalidData`
/// I/O error that tokio-rustls makes of every handshake failure (bad certificate, alert, not
/// TLS at all).
fn is_tls_failure(e: &SmtpError) -> bool {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(inner) = s.downcast_ref::<SmtpError>()
            && inner.is_tls()
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::InvalidData
        {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_are_explained() {
        assert!(meaning("535").contains("authentication failed"));
        assert!(meaning("550").contains("mailbox unavailable"));
        assert_eq!(meaning("299"), "");
    }
}
