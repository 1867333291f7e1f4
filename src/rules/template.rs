//! Summary and description templates: `GPU {gpu} ({model}) grows {rate:.0} MiB/min`.
//!
//! Syntax: `{name}` inserts a variable, `{name:.N}` a number with N decimals (0–9),
//! `{name:xid}` a number as an XID with its meaning and action from the XID catalogue
//! (`79 (GPU has fallen off the bus; action: drain the node)`), `{name:.N|above|below}` the
//! number's size with N decimals followed by the first word when it is 0 or more and by the
//! second when it is negative (`3 °C below` / `1 °C above` for `{margin:.0|°C below|°C
//! above}`), `{name:?yes|no}` the first text when the number is not 0 and the second when it
//! is (a flag said in words); `{{` and `}}` are literal braces. Everything else is literal
//! text.
//!
//! Invariants: a `Template` is parsed once at load and rendering never fails; which names
//! exist is checked by the rule loader against the rule's scope and values (a name the
//! caller does not know renders as its placeholder, `{name}`, so a bug shows in the text);
//! missing data renders as "unknown", never as NaN or 0.

use std::fmt::Write;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    pub source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Var {
        name: String,
        decimals: Option<usize>,
        /// `{name:xid}`: the number is an XID, rendered with its catalogue entry.
        xid: bool,
        /// `{name:.N|pos|neg}`: the size, then `pos` (>= 0) or `neg` (< 0).
        signed: Option<(String, String)>,
        /// `{name:?yes|no}`: `yes` when the number is not 0, else `no`.
        flag: Option<(String, String)>,
        /// Character offset of the name in the source.
        offset: usize,
    },
}

/// The value of one template variable.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateValue {
    Text(String),
    Number(f64),
    /// The variable exists but has no value now (renders as "unknown").
    NoData,
}

impl Template {
    /// Parses a template; on error returns the character offset of the problem and a
    /// message that ends with how to fix it.
    pub fn parse(src: &str) -> Result<Template, (usize, String)> {
        let chars: Vec<char> = src.chars().collect();
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while i < chars.len() {
            match (chars[i], chars.get(i + 1)) {
                ('{', Some('{')) | ('}', Some('}')) => {
                    text.push(chars[i]);
                    i += 2;
                }
                ('}', _) => {
                    return Err((i, "`}` without `{` (write `}}` for a literal brace)".into()));
                }
                ('{', _) => {
                    let Some(len) = chars[i + 1..].iter().position(|&c| c == '}') else {
                        return Err((
                            i,
                            "`{` is not closed (write `{{` for a literal brace)".into(),
                        ));
                    };
                    let inner: String = chars[i + 1..i + 1 + len].iter().collect();
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(placeholder(&inner, i + 1)?);
                    i += len + 2;
                }
                (c, _) => {
                    text.push(c);
                    i += 1;
                }
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template {
            source: src.to_string(),
            parts,
        })
    }

    /// The text with every placeholder replaced by `vars(name)`.
    pub fn render(&self, vars: &dyn Fn(&str) -> Option<TemplateValue>) -> String {
        let mut out = String::with_capacity(self.source.len() + 32);
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var {
                    name,
                    decimals,
                    xid,
                    signed,
                    flag,
                    ..
                } => match vars(name) {
                    Some(TemplateValue::Text(t)) => out.push_str(&t),
                    Some(TemplateValue::Number(x)) if flag.is_some() && x.is_finite() => {
                        if let Some((yes, no)) = flag {
                            out.push_str(if x != 0.0 { yes } else { no });
                        }
                    }
                    Some(TemplateValue::Number(x)) if signed.is_some() && x.is_finite() => {
                        if let Some((pos, neg)) = signed {
                            let size = number(x.abs(), *decimals);
                            // The word follows the number as printed: -0.3 at 0 decimals is "0".
                            let negative =
                                x < 0.0 && size.chars().any(|c| ('1'..='9').contains(&c));
                            let _ = write!(out, "{size} {}", if negative { neg } else { pos });
                        }
                    }
                    Some(TemplateValue::Number(x))
                        if (flag.is_some() || signed.is_some()) && !x.is_finite() =>
                    {
                        out.push_str("unknown");
                    }
                    Some(TemplateValue::Number(x))
                        if *xid && x.fract() == 0.0 && x.abs() < 1e15 =>
                    {
                        let _ = write!(out, "{x:.0} ({})", crate::xid::describe(x as i64));
                    }
                    Some(TemplateValue::Number(x)) => out.push_str(&number(x, *decimals)),
                    Some(TemplateValue::NoData) => out.push_str("unknown"),
                    None => {
                        let _ = write!(out, "{{{name}}}");
                    }
                },
            }
        }
        out
    }

    /// The names of the variables used, in order of appearance (repeats included).
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.placeholders().map(|(_, n)| n)
    }

    /// The variables used with the character offset of each name in the source.
    pub fn placeholders(&self) -> impl Iterator<Item = (usize, &str)> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var { name, offset, .. } => Some((*offset, name.as_str())),
            Part::Text(_) => None,
        })
    }
}

/// Parses the inside of `{...}`, which starts at character `offset`.
fn placeholder(inner: &str, offset: usize) -> Result<Part, (usize, String)> {
    if let Some(j) = inner.find('{') {
        let at = offset + inner[..j].chars().count();
        return Err((
            at,
            "`{` inside a placeholder (write `{{` for a literal brace)".into(),
        ));
    }
    let (name, spec) = match inner.split_once(':') {
        Some((n, s)) => (n, Some(s)),
        None => (inner, None),
    };
    if name.is_empty() {
        return Err((
            offset,
            "empty placeholder (write `{name}`, or `{{` for a literal brace)".into(),
        ));
    }
    let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err((
            offset,
            format!("`{name}` is not a variable name (names are letters, digits and `_`)"),
        ));
    }
    let at = offset + name.chars().count() + 1;
    let words = |w: &str| -> Result<(String, String), (usize, String)> {
        match w.split_once('|') {
            Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() && !b.contains('|') => {
                Ok((a.trim().to_string(), b.trim().to_string()))
            }
            _ => Err((
                at,
                format!(
                    "`:{}` needs two texts separated by `|` (e.g. `{{{name}:.0|°C below|°C above}}` or `{{{name}:?yes|no}}`)",
                    spec.unwrap_or_default()
                ),
            )),
        }
    };
    if let Some(w) = spec.and_then(|s| s.strip_prefix('?')) {
        return Ok(Part::Var {
            name: name.to_string(),
            decimals: None,
            xid: false,
            signed: None,
            flag: Some(words(w)?),
            offset,
        });
    }
    let (spec, signed) = match spec.and_then(|s| s.split_once('|')) {
        Some((number, w)) => (Some(number), Some(words(w)?)),
        None => (spec, None),
    };
    let xid = spec == Some("xid") && signed.is_none();
    let decimals = match spec {
        None => None,
        Some("xid") if signed.is_none() => None,
        Some(s) => match s.strip_prefix('.').map(str::parse::<usize>) {
            Some(Ok(n)) if n <= 9 => Some(n),
            _ => {
                return Err((
                    at,
                    format!(
                        "invalid format `:{s}` (write `{{{name}:.1}}` for one decimal, `{{{name}:xid}}` for an XID with its meaning, `{{{name}:.0|above|below}}` for a signed size in words, or `{{{name}:?yes|no}}` for a flag)"
                    ),
                ));
            }
        },
    };
    Ok(Part::Var {
        name: name.to_string(),
        decimals,
        xid,
        signed,
        flag: None,
        offset,
    })
}

/// A number as text: `decimals` places when given; otherwise whole numbers without a point
/// and others with up to 3 decimals, trailing zeros dropped. Never "-0".
fn number(x: f64, decimals: Option<usize>) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "unknown".into()
        } else {
            format!("{x}")
        };
    }
    let mut s = match decimals {
        Some(n) => format!("{x:.n$}"),
        None if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        None => {
            let s = format!("{x:.3}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    };
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s.remove(0);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str) -> String {
        let t = Template::parse(src).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        t.render(&|name| match name {
            "gpu" => Some(TemplateValue::Number(3.0)),
            "model" => Some(TemplateValue::Text("H100".into())),
            "rate" => Some(TemplateValue::Number(112.4567)),
            "xid" => Some(TemplateValue::Number(79.0)),
            "unlisted" => Some(TemplateValue::Number(2.0)),
            "neg" => Some(TemplateValue::Number(-0.0001)),
            "left" => Some(TemplateValue::NoData),
            _ => None,
        })
    }

    #[test]
    fn renders_values() {
        assert_eq!(
            render("GPU {gpu} ({model}) grows {rate:.0} MiB/min; full in ~{left} min"),
            "GPU 3 (H100) grows 112 MiB/min; full in ~unknown min"
        );
        assert_eq!(
            render("{rate} {rate:.2} {neg:.1} {neg}"),
            "112.457 112.46 0.0 0"
        );
        assert_eq!(render("{{literal}} {{{gpu}}}"), "{literal} {3}");
        assert_eq!(
            render("XID {xid:xid}, {unlisted:xid}, {rate:xid}, {left:xid}"),
            "XID 79 (GPU has fallen off the bus; action: drain the node), \
             2 (not in the catalogue), 112.457, unknown"
        );
        assert_eq!(render("{unknown} é"), "{unknown} é");
        assert_eq!(render(""), "");
        assert_eq!(number(f64::NAN, None), "unknown");
        assert_eq!(number(f64::INFINITY, Some(1)), "inf");
        assert_eq!(number(2.5, None), "2.5");
    }

    #[test]
    fn signs_and_flags_are_said_in_words() {
        let t = |src: &str, x: Option<f64>| {
            Template::parse(src)
                .unwrap_or_else(|e| panic!("{src}: {e:?}"))
                .render(&|_| Some(x.map_or(TemplateValue::NoData, TemplateValue::Number)))
        };
        let margin = "{m:.0|°C below|°C above} its slowdown threshold";
        assert_eq!(t(margin, Some(3.2)), "3 °C below its slowdown threshold");
        assert_eq!(t(margin, Some(-1.0)), "1 °C above its slowdown threshold");
        assert_eq!(t(margin, Some(-0.3)), "0 °C below its slowdown threshold");
        assert_eq!(t(margin, None), "unknown its slowdown threshold");
        let flag = "{f:?throttled|not throttled}";
        assert_eq!(t(flag, Some(1.0)), "throttled");
        assert_eq!(t(flag, Some(0.0)), "not throttled");
        assert_eq!(t(flag, None), "unknown");
        assert!(Template::parse("{f:?only one}").is_err());
        assert!(Template::parse("{f:.0|a|b|c}").is_err());
        assert!(Template::parse("{f:.x|a|b}").is_err());
    }

    #[test]
    fn lists_variables_with_offsets() {
        let t = Template::parse("é {gpu} and {rate:.1}{gpu}").expect("parses");
        assert_eq!(t.variables().collect::<Vec<_>>(), ["gpu", "rate", "gpu"]);
        assert_eq!(
            t.placeholders().collect::<Vec<_>>(),
            [(3, "gpu"), (13, "rate"), (22, "gpu")]
        );
        assert_eq!(t.source, "é {gpu} and {rate:.1}{gpu}");
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = |s: &str| Template::parse(s).expect_err(s);
        assert_eq!(
            e("a } b"),
            (2, "`}` without `{` (write `}}` for a literal brace)".into())
        );
        assert_eq!(
            e("é {gpu"),
            (
                2,
                "`{` is not closed (write `{{` for a literal brace)".into()
            )
        );
        assert_eq!(e("x {}").0, 3);
        assert_eq!(
            e("{a {b}"),
            (
                3,
                "`{` inside a placeholder (write `{{` for a literal brace)".into()
            )
        );
        assert_eq!(
            e("{rate:2}"),
            (
                6,
                "invalid format `:2` (write `{rate:.1}` for one decimal, `{rate:xid}` for an XID with its meaning, `{rate:.0|above|below}` for a signed size in words, or `{rate:?yes|no}` for a flag)".into()
            )
        );
        assert_eq!(e("{rate:.10}").0, 6);
        assert_eq!(
            e("{a-b}"),
            (
                1,
                "`a-b` is not a variable name (names are letters, digits and `_`)".into()
            )
        );
        assert_eq!(e("{1x}").0, 1);
    }
}
