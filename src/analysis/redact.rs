//! Redaction of what leaves the node: the `[analysis] redact` list (literal strings and
//! `re:` patterns) and every secret this process knows (the API key, the receivers' secrets
//! read so far) are replaced by [`REDACTED`] in a prompt before it is stored or sent.
//!
//! Invariant: [`redact`] is applied to the whole serialised request; [`check_clean`] then
//! refuses a request that still contains the API key, so a secret can never be sent even if
//! a redaction rule were wrong.

use crate::config::analysis::Redaction;

/// What replaces a redacted string.
pub const REDACTED: &str = "[redacted]";

/// `text` with every match of `rules` and every known secret replaced.
pub fn redact(text: &str, rules: &[Redaction], secrets: &[&str]) -> String {
    let mut out = text.to_string();
    // Secrets first and longest first, so that one containing another is replaced whole.
    let mut secrets: Vec<&str> = secrets.iter().copied().filter(|s| !s.is_empty()).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in secrets {
        out = out.replace(s, REDACTED);
    }
    out = crate::secret::scrub(&out);
    for r in rules {
        out = match r {
            Redaction::Literal(s) => out.replace(s.as_str(), REDACTED),
            Redaction::Pattern(re) => re.replace_all(&out, REDACTED).into_owned(),
        };
    }
    out
}

/// Refuses `text` when it still contains one of `secrets`.
pub fn check_clean(text: &str, secrets: &[&str]) -> Result<(), String> {
    if secrets.iter().any(|s| !s.is_empty() && text.contains(s)) {
        return Err("the request still contains a secret after redaction; nothing was sent".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_patterns_and_secrets_are_replaced() {
        let rules = vec![
            Redaction::Literal("node-17.corp".into()),
            Redaction::Pattern(regex::Regex::new(r"/home/[a-z]+").expect("re")),
        ];
        let t = "host node-17.corp ran /home/alice/train.py with key sk-123456";
        let r = redact(t, &rules, &["sk-123456"]);
        assert_eq!(
            r,
            "host [redacted] ran [redacted]/train.py with key [redacted]"
        );
        assert!(check_clean(&r, &["sk-123456"]).is_ok());
        assert!(check_clean(t, &["sk-123456"]).is_err());
    }
}
