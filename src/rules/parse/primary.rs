//! The operands of the condition language: literals, names, ranges `metric[window]`,
//! calls and parentheses — the part of the parser that knows about names and scopes.
//!
//! Invariants: a name is resolved here once (metric, inventory constant or function); an
//! error of meaning is recorded and replaced by a placeholder operand so the parse goes on
//! and reports the next error, but never a follow-on error of the same cause.

use std::ops::Range;
use std::time::Duration;

use super::{Parsed, Parser, placeholder};
use crate::rules::ast::Expr;
use crate::rules::functions::{self, Arg, Kind};
use crate::rules::lex::{ExprError, Tok};
use crate::rules::names::{is_flag, metric_by_name, static_by_name, unknown_name};
use crate::rules::rule::Scope;

impl Parser<'_> {
    pub(super) fn primary(&mut self) -> Parsed {
        let t = self.bump();
        let span = t.span.clone();
        let (expr, kind) = match t.tok {
            Tok::Num(v) => (Expr::Number(v), Kind::Num),
            Tok::Dur(s) => (Expr::Seconds(s), Kind::Num),
            Tok::True => (Expr::Number(1.0), Kind::Bool),
            Tok::False => (Expr::Number(0.0), Kind::Bool),
            Tok::LParen => {
                let inner = self.or()?;
                if !self.eat(&Tok::RParen) {
                    let found = self.found();
                    return Err(ExprError::new(span.start, "this `(` is not closed")
                        .hint(format!("expected `)`, found {found}")));
                }
                return Ok(inner);
            }
            Tok::Ident(name) => return self.name(name, span),
            Tok::Not => {
                return Err(ExprError::new(span.start, "`not` cannot stand here")
                    .hint("put parentheses around it: `(not x)`"));
            }
            _ => {
                self.pos -= 1;
                let what = if self.pos == 0 { "" } else { " here" };
                return Err(ExprError::new(
                    span.start,
                    format!("expected a value{what}, found {}", self.found()),
                ));
            }
        };
        Ok(Arg::Value { expr, kind, span })
    }

    /// A name: a call, a range, a metric or an inventory constant.
    fn name(&mut self, name: String, span: Range<usize>) -> Parsed {
        match self.peek() {
            Tok::LParen => return self.call(name, span),
            Tok::LBracket => return self.range(name, span),
            _ => {}
        }
        if let Some(s) = static_by_name(&name) {
            return Ok(Arg::Value {
                expr: Expr::Static(s),
                kind: Kind::Num,
                span,
            });
        }
        let Some(m) = metric_by_name(&name) else {
            self.errors.push(unknown_name(&name, span.start));
            return Ok(placeholder(span));
        };
        self.check_metric_scope(&name, span.start);
        let kind = if is_flag(m) { Kind::Flag } else { Kind::Num };
        Ok(Arg::Value {
            expr: Expr::Current(m),
            kind,
            span,
        })
    }

    fn check_metric_scope(&mut self, name: &str, at: usize) {
        if name != "process_mem" {
            return;
        }
        if self.scope != Scope::Process {
            self.errors.push(
                ExprError::new(
                    at,
                    "`process_mem` exists only in rules with scope = \"process\"",
                )
                .hint("add `scope = \"process\"` to the rule, or use `mem_used` (the whole GPU)"),
            );
        } else if self.in_peer {
            self.errors.push(
                ExprError::new(at, "`process_mem` cannot be compared across GPUs")
                    .hint("peer functions compare per-GPU values such as `mem_used`"),
            );
        }
    }

    /// `metric[window]`; the name is already consumed, `[` is next.
    fn range(&mut self, name: String, name_span: Range<usize>) -> Parsed {
        self.pos += 1;
        let t = self.bump();
        let window = match t.tok {
            Tok::Dur(s) if s > 0.0 => Duration::from_secs_f64(s),
            Tok::Dur(_) => {
                self.errors.push(ExprError::new(
                    t.span.start,
                    "the window must be longer than 0s",
                ));
                Duration::from_secs(1)
            }
            Tok::Num(v) => {
                return Err(ExprError::new(t.span.start, "a window needs a unit")
                    .hint(format!("write `{name}[{v}s]` or `{name}[5m]`")));
            }
            _ => {
                self.pos -= 1;
                return Err(ExprError::new(
                    t.span.start,
                    format!("expected a window like `[5m]`, found {}", self.found()),
                ));
            }
        };
        let end = self.span();
        if !self.eat(&Tok::RBracket) {
            return Err(ExprError::new(
                end.start,
                format!("expected `]`, found {}", self.found()),
            ));
        }
        let span = name_span.start..end.end;
        let metric = match metric_by_name(&name) {
            Some(m) => m,
            None => {
                let e = if static_by_name(&name).is_some() {
                    ExprError::new(
                        name_span.start,
                        format!("`{name}` is a constant of the GPU, it has no history"),
                    )
                    .hint(format!("write `{name}` without a window"))
                } else {
                    unknown_name(&name, name_span.start)
                };
                self.errors.push(e);
                return Ok(placeholder(span));
            }
        };
        self.check_metric_scope(&name, name_span.start);
        Ok(Arg::Range {
            metric,
            window,
            span,
        })
    }

    /// `name(args)`; the name is already consumed, `(` is next.
    fn call(&mut self, name: String, name_span: Range<usize>) -> Parsed {
        let open = self.bump().span;
        let peer = functions::is_peer(&name);
        let outer_peer = self.in_peer;
        if peer && self.scope == Scope::Host {
            self.errors.push(ExprError::new(
                name_span.start,
                format!("`{name}` compares GPUs; rules with scope = \"host\" have none"),
            ));
        } else if peer && outer_peer {
            self.errors.push(ExprError::new(
                name_span.start,
                "peer functions cannot be nested",
            ));
        }
        self.in_peer |= peer;
        let errors_before = self.errors.len();
        let args = self.arguments(&name, open.start);
        self.in_peer = outer_peer;
        let args = args?;
        let span = name_span.start..self.toks[self.pos - 1].span.end;
        if self.errors.len() > errors_before {
            // An argument is already wrong; checking the call would only repeat it.
            return Ok(placeholder(span));
        }
        match functions::call(&name, name_span.start, args) {
            Ok((expr, kind)) => Ok(Arg::Value { expr, kind, span }),
            Err(e) => {
                self.errors.push(e);
                Ok(placeholder(span))
            }
        }
    }

    fn arguments(&mut self, name: &str, open: usize) -> Result<Vec<Arg>, ExprError> {
        let mut args = Vec::new();
        if self.eat(&Tok::RParen) {
            return Ok(args);
        }
        loop {
            args.push(self.or()?);
            if self.eat(&Tok::RParen) {
                return Ok(args);
            }
            if *self.peek() == Tok::Eof {
                return Err(
                    ExprError::new(open, format!("the `(` of `{name}` is not closed"))
                        .hint("expected `)`"),
                );
            }
            if !self.eat(&Tok::Comma) {
                let at = self.span().start;
                let found = self.found();
                return Err(ExprError::new(
                    at,
                    format!("expected `,` or `)` after an argument of `{name}`, found {found}"),
                )
                .hint("separate arguments with `,`"));
            }
        }
    }
}
