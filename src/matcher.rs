//! Label matchers, shared by routes (`[[notify.route]] match`) and silences
//! (`gpuwatch silence add --match rule=gpu_idle,gpu=3`): `name=value`, `name!=value`,
//! `name=~regex`, `name!~regex` (regexes are anchored, as in Alertmanager).
//!
//! Invariant: a label the alert does not have matches as the empty string (so `gpu!=3`
//! matches a host alert and `gpu=` matches only alerts without a GPU).

use std::collections::BTreeMap;

use regex::Regex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Re,
    NotRe,
}

#[derive(Debug, Clone)]
pub struct Matcher {
    pub name: String,
    pub op: Op,
    pub value: String,
    regex: Option<Regex>,
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.op == other.op && self.value == other.value
    }
}

impl Matcher {
    /// Parses one matcher, e.g. `rule=gpu_idle` or `severity=~warning|critical`.
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let text = text.trim();
        let at = text
            .find(['=', '!'])
            .ok_or_else(|| format!("{text:?} has no operator (=, !=, =~, !~)"))?;
        let name = text[..at].trim();
        let rest = &text[at..];
        let (op, value) = if let Some(v) = rest.strip_prefix("=~") {
            (Op::Re, v)
        } else if let Some(v) = rest.strip_prefix("!~") {
            (Op::NotRe, v)
        } else if let Some(v) = rest.strip_prefix("!=") {
            (Op::Ne, v)
        } else if let Some(v) = rest.strip_prefix('=') {
            (Op::Eq, v)
        } else {
            return Err(format!("{text:?} has no operator (=, !=, =~, !~)"));
        };
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!("{name:?} in {text:?} is not a label name"));
        }
        let value = value.trim().trim_matches('"').to_string();
        let regex = match op {
            Op::Re | Op::NotRe => Some(Regex::new(&format!("^(?:{value})$")).map_err(|e| {
                let last = e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                format!("bad regular expression in {text:?}: {last}")
            })?),
            _ => None,
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
            value,
            regex,
        })
    }

    /// Parses a comma-separated list (`rule=gpu_idle,gpu=3`).
    pub fn parse_list(text: &str) -> Result<Vec<Matcher>, String> {
        let list: Vec<Matcher> = text
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(Matcher::parse)
            .collect::<Result<_, _>>()?;
        if list.is_empty() {
            return Err("no matchers given".into());
        }
        Ok(list)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.name).map_or("", String::as_str);
        match (self.op, &self.regex) {
            (Op::Eq, _) => v == self.value,
            (Op::Ne, _) => v != self.value,
            (Op::Re, Some(r)) => r.is_match(v),
            (Op::NotRe, Some(r)) => !r.is_match(v),
            (Op::Re | Op::NotRe, None) => false,
        }
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Re => "=~",
            Op::NotRe => "!~",
        };
        write!(f, "{}{op}{}", self.name, self.value)
    }
}

/// True when every matcher matches.
pub fn all_match(matchers: &[Matcher], labels: &BTreeMap<String, String>) -> bool {
    matchers.iter().all(|m| m.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn operators() {
        let l = labels(&[("rule", "gpu_idle"), ("gpu", "3"), ("severity", "warning")]);
        assert!(Matcher::parse("rule=gpu_idle").unwrap().matches(&l));
        assert!(!Matcher::parse("rule!=gpu_idle").unwrap().matches(&l));
        assert!(
            Matcher::parse("severity=~warning|critical")
                .unwrap()
                .matches(&l)
        );
        assert!(
            !Matcher::parse("severity=~warn").unwrap().matches(&l),
            "anchored"
        );
        assert!(Matcher::parse("gpu!~1|2").unwrap().matches(&l));
        assert!(
            Matcher::parse("pid=").unwrap().matches(&l),
            "absent = empty"
        );
        let list = Matcher::parse_list("rule=gpu_idle, gpu=3").unwrap();
        assert!(all_match(&list, &l));
        assert!(!all_match(
            &Matcher::parse_list("rule=gpu_idle,gpu=4").unwrap(),
            &l
        ));
    }

    #[test]
    fn errors() {
        assert!(Matcher::parse("rule").unwrap_err().contains("no operator"));
        assert!(
            Matcher::parse("=x")
                .unwrap_err()
                .contains("not a label name")
        );
        assert!(
            Matcher::parse("rule=~(")
                .unwrap_err()
                .contains("regular expression")
        );
        assert!(Matcher::parse_list(" , ").is_err());
        assert_eq!(Matcher::parse("gpu!=3").unwrap().to_string(), "gpu!=3");
    }
}
