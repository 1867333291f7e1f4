//! The client of an OpenAI-compatible chat-completions API (vLLM, Ollama, llama.cpp's
//! server, a hosted one): POSTs a prepared body to `{url}/chat/completions` with the API key
//! as a bearer token, and reads the answer as one JSON object or as server-sent events
//! (`stream: true`).
//!
//! Invariants: one request, bounded by the configured timeout (connect and whole answer);
//! never retried (the caller prints the rule-based analysis whatever happens); errors are one
//! line, typed ([`LlmError`]), and never contain the key or the answer's raw body beyond a
//! short excerpt.

use std::time::Duration;

use serde_json::Value;

use crate::config::analysis::AnalysisConfig;
use crate::secret::Secret;

/// Why no answer came.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the server is rate-limiting requests (HTTP 429)")]
    RateLimited,
    #[error("the server failed (HTTP {0})")]
    Server(u16),
    #[error("the server refused the request (HTTP {0}): {1}")]
    Refused(u16, String),
    #[error("the answer is not a chat completion: {0}")]
    Malformed(String),
    #[error("cannot read the API key: {0}")]
    Key(String),
    #[error("{0}")]
    Unsafe(String),
}

/// The endpoint requests go to.
pub fn endpoint(cfg: &AnalysisConfig) -> String {
    format!("{}/chat/completions", cfg.url)
}

/// Reads the API key, if one is configured.
pub fn api_key(cfg: &AnalysisConfig) -> Result<Option<Secret>, LlmError> {
    cfg.api_key
        .as_ref()
        .map(|s| crate::secret::read("analysis API key", s))
        .transpose()
        .map_err(LlmError::Key)
}

/// Sends `body` (already redacted) and returns the model's text.
pub async fn complete(
    cfg: &AnalysisConfig,
    key: Option<&Secret>,
    body: String,
) -> Result<String, LlmError> {
    let client = crate::outbound::builder(cfg.timeout)
        .build()
        .map_err(|e| LlmError::Unreachable(format!("HTTP client: {e}")))?;
    let url = endpoint(cfg);
    let mut req = client
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(k) = key {
        req = req.bearer_auth(k.expose());
    }
    let fail = |e: reqwest::Error| {
        if e.is_timeout() {
            LlmError::Timeout(cfg.timeout)
        } else {
            LlmError::Unreachable(cfg.url.clone())
        }
    };
    let resp = req.send().await.map_err(fail)?;
    let status = resp.status().as_u16();
    let sse = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let text = resp.text().await.map_err(fail)?;
    match status {
        200..=299 => {}
        429 => return Err(LlmError::RateLimited),
        500..=599 => return Err(LlmError::Server(status)),
        _ => return Err(LlmError::Refused(status, excerpt(&text))),
    }
    let answer = if sse || text.trim_start().starts_with("data:") {
        parse_sse(&text)?
    } else {
        parse_json(&text)?
    };
    if answer.trim().is_empty() {
        return Err(LlmError::Malformed("the answer is empty".into()));
    }
    Ok(answer.trim().to_string())
}

fn excerpt(s: &str) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = one.chars().take(120).collect();
    crate::secret::scrub(&cut)
}

/// `choices[0].message.content` of a completion.
pub fn parse_json(text: &str) -> Result<String, LlmError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| LlmError::Malformed(format!("not JSON ({e}): {}", excerpt(text))))?;
    v.pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            LlmError::Malformed(format!("no choices[0].message.content: {}", excerpt(text)))
        })
}

/// The concatenated `choices[0].delta.content` of a stream of `data:` events, up to
/// `data: [DONE]`.
pub fn parse_sse(text: &str) -> Result<String, LlmError> {
    let mut out = String::new();
    let mut events = 0;
    let mut done = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Malformed(format!("an event is not JSON ({e}): {}", excerpt(data)))
        })?;
        events += 1;
        if let Some(c) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            out.push_str(c);
        }
    }
    if events == 0 {
        return Err(LlmError::Malformed("a stream without events".into()));
    }
    if !done {
        return Err(LlmError::Malformed(
            "the stream ended without [DONE]".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_streamed_answers_parse_and_garbage_does_not() {
        let j = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"a hang"}}]}"#;
        assert_eq!(parse_json(j), Ok("a hang".into()));
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"a \"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"hang\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(parse_sse(s), Ok("a hang".into()));
        assert!(matches!(
            parse_json("<html>oops"),
            Err(LlmError::Malformed(_))
        ));
        assert!(matches!(
            parse_json("{\"choices\":[]}"),
            Err(LlmError::Malformed(_))
        ));
        assert!(matches!(
            parse_sse("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n"),
            Err(LlmError::Malformed(_))
        ));
    }
}
