//! Redaction of secrets in process command lines before they are stored.
//!
//! Invariant: what leaves this module never contains the value of an argument or `KEY=value`
//! pair whose key looks like a secret, the password of a URL, or a string shaped like a
//! well-known token. Redacted values become `***`; the key stays so people can still read
//! the command line.

use regex::Regex;

const MASK: &str = "***";

/// Names that mark the next value as secret: one of the words, alone or as a `_.-`-separated
/// part of the key (`hf-token`, `DB_PASSWORD`), but not inside another word (`--author`,
/// `--tokenizer`).
const SECRET_KEY: &str = r"(?i:(?:[a-z0-9]+[_.-])*(?:token|secret|passw(?:or)?d|passwd|pwd|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|auth|authorization|bearer|session[_-]?key|signature)(?:[_.-][a-z0-9]+)*)";

/// Compiled redaction rules.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// `--token=v`, `token=v`, `TOKEN: v`, `-password=v`
    key_value: Regex,
    /// `--token v` as two arguments: matched on the key argument alone.
    flag: Regex,
    /// `scheme://user:password@host`
    url_password: Regex,
    /// Strings shaped like well-known tokens wherever they appear.
    token_shapes: Regex,
    extra: Vec<Regex>,
}

impl Redactor {
    /// Builds the redactor; `extra` are user patterns (already validated by config).
    pub fn new(extra: &[String]) -> Result<Self, regex::Error> {
        Ok(Self {
            key_value: Regex::new(&format!(r"^(-{{0,2}}{SECRET_KEY}\s*[=:]\s*)(.+)$"))?,
            flag: Regex::new(&format!(r"^-{{1,2}}{SECRET_KEY}$"))?,
            url_password: Regex::new(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)@")?,
            token_shapes: Regex::new(concat!(
                r"\b(?:",
                r"gh[pousr]_[A-Za-z0-9]{20,}",
                r"|github_pat_[A-Za-z0-9_]{20,}",
                r"|xox[abposr]-[A-Za-z0-9-]{10,}",
                r"|sk-[A-Za-z0-9_-]{20,}",
                r"|hf_[A-Za-z0-9]{20,}",
                r"|AKIA[0-9A-Z]{16}",
                r"|AIza[0-9A-Za-z_-]{35}",
                r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
                r")"
            ))?,
            extra: extra
                .iter()
                .map(|p| Regex::new(p))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Redacts an argv and joins it with spaces.
    pub fn redact_argv(&self, argv: &[String]) -> String {
        let mut out: Vec<String> = Vec::with_capacity(argv.len());
        let mut hide_next = false;
        for arg in argv {
            if hide_next {
                out.push(MASK.to_string());
                hide_next = false;
                continue;
            }
            if self.flag.is_match(arg) {
                hide_next = true;
                out.push(self.redact_text(arg));
                continue;
            }
            if let Some(c) = self.key_value.captures(arg) {
                out.push(format!("{}{MASK}", &c[1]));
                continue;
            }
            out.push(self.redact_text(arg));
        }
        out.join(" ")
    }

    /// Redacts secrets that can appear anywhere inside one string.
    fn redact_text(&self, s: &str) -> String {
        let s = self.url_password.replace_all(s, format!("${{1}}{MASK}@"));
        let s = self.token_shapes.replace_all(&s, MASK);
        let mut s = s.into_owned();
        for re in &self.extra {
            s = re.replace_all(&s, MASK).into_owned();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> String {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Redactor::new(&[]).expect("valid").redact_argv(&argv)
    }

    #[test]
    fn key_value_arguments() {
        assert_eq!(
            r(&["python", "train.py", "--api-key=abc123", "--lr=3e-4"]),
            "python train.py --api-key=*** --lr=3e-4"
        );
        assert_eq!(
            r(&["env", "WANDB_API_KEY=deadbeef", "x"]),
            "env WANDB_API_KEY=*** x"
        );
        assert_eq!(r(&["app", "PASSWORD=hunter2"]), "app PASSWORD=***");
        assert_eq!(r(&["app", "--hf-token=hf_x"]), "app --hf-token=***");
    }

    #[test]
    fn flag_then_value() {
        assert_eq!(
            r(&["app", "--password", "hunter2", "--epochs", "3"]),
            "app --password *** --epochs 3"
        );
        assert_eq!(r(&["app", "--token", "t"]), "app --token ***");
    }

    #[test]
    fn url_credentials() {
        assert_eq!(
            r(&["app", "--db=postgres://bob:s3cret@db:5432/x"]),
            "app --db=postgres://bob:***@db:5432/x"
        );
    }

    #[test]
    fn token_shapes_anywhere() {
        let t = "ghp_0123456789abcdefghijABCDEFGHIJ";
        assert_eq!(r(&["git", "clone", t]), "git clone ***");
        assert_eq!(r(&["x", "AKIAABCDEFGHIJKLMNOP"]), "x ***");
    }

    #[test]
    fn ordinary_arguments_survive() {
        let args = [
            "torchrun",
            "--nproc_per_node=8",
            "train.py",
            "--batch-size",
            "32",
            "--author=keystone",
        ];
        assert_eq!(r(&args), args.join(" "));
    }

    #[test]
    fn extra_patterns() {
        let red = Redactor::new(&["customer-[0-9]+".to_string()]).expect("valid");
        let argv = vec!["x".to_string(), "--who=customer-42".to_string()];
        assert_eq!(red.redact_argv(&argv), "x --who=***");
    }
}
