//! The `[analysis]` section: the optional language model that explains incidents
//! (`gpuwatch incident ID --explain`, docs/ANALYSIS.md). Absent: off.
//!
//! Invariants: like every section, unknown keys are errors and every error names
//! `file:line:col` with the fix; the API key is never in the config, only where to read it
//! (`api_key_env` / `api_key_file`); `url` is a base URL without credentials, query or
//! trailing `/` (`/chat/completions` is appended); every `redact` pattern compiles.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::SecretSource;
use super::raw::Checker;

/// Where an analysis's follow-up message may go.
pub const ATTACH_KINDS: &[&str] = &["slack"];

/// One `redact` entry: a literal string, or a regular expression written `re:PATTERN`.
#[derive(Debug, Clone)]
pub enum Redaction {
    Literal(String),
    Pattern(regex::Regex),
}

impl PartialEq for Redaction {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Redaction::Literal(a), Redaction::Literal(b)) => a == b,
            (Redaction::Pattern(a), Redaction::Pattern(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// The validated `[analysis]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisConfig {
    /// Base URL of an OpenAI-compatible API, e.g. `http://127.0.0.1:8000/v1`.
    pub url: String,
    pub model: String,
    /// The bearer token, if the server wants one.
    pub api_key: Option<SecretSource>,
    /// Deadline of one request (connect + the whole answer).
    pub timeout: Duration,
    pub max_tokens: u32,
    /// Replaced by `[redacted]` in everything sent.
    pub redact: Vec<Redaction>,
    /// Receiver kinds that get the answer as a follow-up message (`"slack"`).
    pub attach_to: Vec<String>,
    /// Ask for a streamed answer (server-sent events).
    pub stream: bool,
    /// The most bytes the facts part of a prompt may take.
    pub max_prompt_bytes: usize,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnalysis {
    enabled: Option<bool>,
    url: Option<Spanned<String>>,
    model: Option<Spanned<String>>,
    api_key_env: Option<Spanned<String>>,
    api_key_file: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    max_tokens: Option<Spanned<i64>>,
    max_prompt_bytes: Option<Spanned<i64>>,
    #[serde(default)]
    redact: Vec<Spanned<String>>,
    #[serde(default)]
    attach_to: Vec<Spanned<String>>,
    stream: Option<bool>,
}

impl RawAnalysis {
    /// Checks the section; `None` when it is disabled or has errors (pushed into `c`).
    pub(super) fn compile(
        self,
        c: &mut Checker<'_>,
        section: std::ops::Range<usize>,
    ) -> Option<AnalysisConfig> {
        let errors_before = c.errors.len();
        let url = match &self.url {
            None => {
                c.error(
                    section.clone(),
                    "`analysis.url` is missing".into(),
                    "add url = \"http://127.0.0.1:8000/v1\" (the base of an OpenAI-compatible API), or remove the section",
                );
                String::new()
            }
            Some(u) => check_url(c, u),
        };
        let model = match &self.model {
            Some(m) if !m.get_ref().trim().is_empty() => m.get_ref().trim().to_string(),
            Some(m) => {
                c.error(
                    m.span(),
                    "`analysis.model` is empty".into(),
                    "name the model the server serves, e.g. model = \"llama-3.1-8b-instruct\"",
                );
                String::new()
            }
            None => {
                c.error(
                    section,
                    "`analysis.model` is missing".into(),
                    "add model = \"...\": the name the server serves the model under",
                );
                String::new()
            }
        };
        let api_key =
            super::prometheus::secret(c, "analysis.api_key", &self.api_key_env, &self.api_key_file)
                .map(|(_, s)| s);
        let s = Duration::from_secs;
        let timeout = c.duration(
            "analysis.timeout",
            &self.timeout,
            s(30),
            Duration::from_millis(100),
            s(600),
        );
        let max_tokens = bounded(c, "analysis.max_tokens", &self.max_tokens, 400, (16, 8192));
        let max_prompt_bytes = bounded(
            c,
            "analysis.max_prompt_bytes",
            &self.max_prompt_bytes,
            16_384,
            (1024, 262_144),
        );
        let mut redact = Vec::new();
        for r in &self.redact {
            let text = r.get_ref();
            if text.is_empty() {
                c.error(
                    r.span(),
                    "an `analysis.redact` entry is empty".into(),
                    "remove it, or write the string (or re:PATTERN) to redact",
                );
                continue;
            }
            match text.strip_prefix("re:") {
                Some(p) => match regex::Regex::new(p) {
                    Ok(re) => redact.push(Redaction::Pattern(re)),
                    Err(e) => c.error(
                        r.span(),
                        format!("`analysis.redact` pattern {p:?} is not a valid regular expression: {}", e.to_string().lines().last().unwrap_or("invalid")),
                        "fix the pattern (Rust regex syntax), or drop the re: prefix to redact the literal text",
                    ),
                },
                None => redact.push(Redaction::Literal(text.clone())),
            }
        }
        let mut attach_to = Vec::new();
        for a in &self.attach_to {
            let k = a.get_ref().trim().to_ascii_lowercase();
            if ATTACH_KINDS.contains(&k.as_str()) {
                attach_to.push(k);
            } else {
                c.error(
                    a.span(),
                    format!(
                        "`analysis.attach_to` = {:?} is not a receiver kind that takes follow-ups",
                        a.get_ref()
                    ),
                    "use attach_to = [\"slack\"] (the only kind with threads), or remove the key",
                );
            }
        }
        if c.errors.len() > errors_before || self.enabled == Some(false) {
            return None;
        }
        Some(AnalysisConfig {
            url,
            model,
            api_key,
            timeout,
            max_tokens: max_tokens as u32,
            redact,
            attach_to,
            stream: self.stream.unwrap_or(false),
            max_prompt_bytes: max_prompt_bytes as usize,
        })
    }
}

fn bounded(
    c: &mut Checker<'_>,
    key: &str,
    v: &Option<Spanned<i64>>,
    default: i64,
    (lo, hi): (i64, i64),
) -> i64 {
    match v {
        None => default,
        Some(n) if (lo..=hi).contains(n.get_ref()) => *n.get_ref(),
        Some(n) => {
            c.error(
                n.span(),
                format!("`{key}` = {} is out of range", n.get_ref()),
                &format!("use a number from {lo} to {hi}"),
            );
            default
        }
    }
}

fn check_url(c: &mut Checker<'_>, u: &Spanned<String>) -> String {
    let text = u.get_ref().trim();
    let parsed = match reqwest::Url::parse(text) {
        Ok(p) => p,
        Err(e) => {
            c.error(u.span(), format!("`analysis.url` is not a URL: {e}"), "write e.g. \"http://127.0.0.1:8000/v1\" (vLLM), \"http://127.0.0.1:11434/v1\" (Ollama)");
            return String::new();
        }
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        c.error(
            u.span(),
            "`analysis.url` must be http or https".into(),
            "write http://... or https://...",
        );
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        c.error(
            u.span(),
            "`analysis.url` contains credentials, which would end up in logs".into(),
            "remove them and use api_key_env / api_key_file",
        );
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        c.error(
            u.span(),
            "`analysis.url` has a query or fragment".into(),
            "give the base URL only; gpuwatch appends /chat/completions",
        );
    }
    let base = text.trim_end_matches('/');
    if base.ends_with("/chat/completions") {
        c.error(
            u.span(),
            "`analysis.url` already ends with /chat/completions".into(),
            "give the base URL (e.g. http://host:8000/v1); gpuwatch appends /chat/completions",
        );
    }
    base.to_string()
}
