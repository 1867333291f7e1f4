//! The parser of the condition language: tokens → a checked [`Expr`] for one rule scope.
//!
//! Grammar, loosest binding first:
//! `or` · `and` · `not` (prefix) · comparisons `< <= > >= == !=` (not chainable) · `+ -` ·
//! `* /` · unary `-` · literals, names, calls `f(args)`, ranges `metric[window]` (function
//! arguments only) and parentheses.
//!
//! Invariants: an expression is parsed once, at load; a syntax error stops the parse, while
//! errors of meaning (unknown names, wrong arguments, scope violations) are collected so one
//! pass reports all of them, each at the byte offset of its cause; `and`/`or`/`not` take
//! true/false values and a condition must be one (0/1 flags such as `lost` count as both);
//! nesting and the expression tree are at most [`MAX_DEPTH`] deep, which bounds every
//! recursion over them.

use std::ops::Range;

use super::ast::{BinOp, Expr, UnOp};
use super::functions::{self, Arg, Kind};
use super::lex::{ExprError, Tok, Token, lex};
use super::rule::Scope;

mod primary;
#[cfg(test)]
mod tests;

/// What the expression is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Any value (`values` entries).
    Value,
    /// True or false (`condition`, `critical`, `resolve`).
    Condition,
}

/// Parses an expression that yields any value (a number, or true/false as 1/0).
pub fn parse_expr(src: &str, scope: Scope) -> Result<Expr, ExprError> {
    parse_checked(src, scope, Want::Value).map_err(first)
}

/// Parses an expression that must yield true or false.
pub fn parse_condition(src: &str, scope: Scope) -> Result<Expr, ExprError> {
    parse_checked(src, scope, Want::Condition).map_err(first)
}

fn first(mut errors: Vec<ExprError>) -> ExprError {
    errors.swap_remove(0)
}

/// Parses `src` and returns the expression or every error found, sorted by position, each
/// with its column set. The error list is never empty.
pub fn parse_checked(src: &str, scope: Scope, want: Want) -> Result<Expr, Vec<ExprError>> {
    let (expr, mut errors) = match lex(src) {
        Err(e) => (None, vec![e]),
        Ok(toks) => {
            let mut p = Parser {
                src,
                toks,
                pos: 0,
                scope,
                errors: Vec::new(),
                in_peer: false,
                depth: 0,
            };
            match p.top(want) {
                Ok(e) => (Some(e), p.errors),
                // After a syntax error the rest is guesswork: report only the syntax error.
                Err(e) => (None, vec![e]),
            }
        }
    };
    match expr {
        Some(e) if errors.is_empty() => Ok(e),
        _ => {
            errors.sort_by_key(|e| e.offset);
            errors.dedup();
            Err(errors.into_iter().map(|e| e.locate(src)).collect())
        }
    }
}

/// The deepest nesting (parentheses, calls, `not`, unary `-`) and the deepest expression tree
/// (an operator chain `a + b + c` is as deep as it is long) an expression may have. It bounds
/// the parser's recursion and that of printing, comparing, checking and evaluating: fuzzing
/// found thousands of nested parentheses or signs overflowing a thread's stack.
pub const MAX_DEPTH: usize = 100;

type Parsed = Result<Arg, ExprError>;

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    scope: Scope,
    /// Errors of meaning so far (the parse goes on after them; syntax errors stop it).
    errors: Vec<ExprError>,
    /// Inside the argument of a peer function.
    in_peer: bool,
    /// Nesting of the rule being parsed now (see [`MAX_DEPTH`]).
    depth: usize,
}

/// What an operand becomes after an error of meaning, so that the parse can go on without
/// reporting follow-on errors (a flag fits everywhere).
fn placeholder(span: Range<usize>) -> Arg {
    Arg::Value {
        expr: Expr::Number(0.0),
        kind: Kind::Flag,
        span,
    }
}

fn span_of(a: &Arg) -> Range<usize> {
    match a {
        Arg::Value { span, .. } | Arg::Range { span, .. } => span.clone(),
    }
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Range<usize> {
        self.toks[self.pos.min(self.toks.len() - 1)].span.clone()
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        self.pos += 1;
        t
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        let hit = self.peek() == tok;
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// The current token as people read it in a message.
    fn found(&self) -> String {
        match self.peek() {
            Tok::Eof => "the end of the expression".to_string(),
            _ => format!("`{}`", &self.src[self.span()]),
        }
    }

    fn top(&mut self, want: Want) -> Result<Expr, ExprError> {
        if *self.peek() == Tok::Eof {
            return Err(ExprError::new(0, "the expression is empty"));
        }
        let e = self.or()?;
        if *self.peek() != Tok::Eof {
            return Err(ExprError::new(
                self.span().start,
                format!("expected an operator, found {}", self.found()),
            )
            .hint("join conditions with `and` or `or`"));
        }
        let (expr, kind) = self.value(e.clone());
        if want == Want::Condition && kind == Kind::Num {
            let text = self.src.trim();
            let example = if text.chars().count() <= 40 {
                text
            } else {
                "…"
            };
            self.errors.push(
                ExprError::new(
                    span_of(&e).start,
                    "the condition is a number, not true or false",
                )
                .hint(format!("compare it with a threshold, e.g. `{example} > 0`")),
            );
        }
        Ok(expr)
    }

    /// The operand as a plain value; a range is an error (reported, replaced by a placeholder).
    fn value(&mut self, a: Arg) -> (Expr, Kind) {
        match functions::value(&a) {
            Ok(v) => v,
            Err(e) => {
                self.errors.push(e);
                (Expr::Number(0.0), Kind::Flag)
            }
        }
    }

    fn binary(&mut self, op: BinOp, lhs: Arg, rhs: Arg, kind: Kind) -> Arg {
        let span = span_of(&lhs).start..span_of(&rhs).end;
        let (l, r) = (self.value(lhs), self.value(rhs));
        Arg::Value {
            expr: Expr::Binary {
                op,
                lhs: Box::new(l.0),
                rhs: Box::new(r.0),
            },
            kind,
            span,
        }
    }

    /// Checks that an operand of `and`/`or`/`not` is true/false.
    fn logical(&mut self, op: &str, a: &Arg) {
        if let Arg::Value {
            kind: Kind::Num,
            span,
            ..
        } = a
        {
            let text = &self.src[span.clone()];
            self.errors.push(
                ExprError::new(
                    span.start,
                    format!("`{op}` needs true or false, but `{text}` is a number"),
                )
                .hint(format!("compare it, e.g. `{text} > 0`")),
            );
        }
    }

    /// One level deeper into the source (parentheses, a call, `not`, `-`): an error past
    /// [`MAX_DEPTH`]. Every `enter` is paired with a `self.depth -= 1` on success (an error
    /// ends the parse).
    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.too_deep());
        }
        Ok(())
    }

    fn too_deep(&self) -> ExprError {
        ExprError::new(
            self.span().start,
            format!("the expression is nested too deeply (more than {MAX_DEPTH} levels)"),
        )
        .hint("split it into simpler rules or `values`")
    }

    /// An error when the tree built so far is deeper than [`MAX_DEPTH`] (long operator chains).
    fn check_depth(&self, a: &Arg) -> Result<(), ExprError> {
        match a {
            Arg::Value { expr, .. } if expr.deeper_than(MAX_DEPTH) => Err(self.too_deep()),
            _ => Ok(()),
        }
    }

    fn or(&mut self) -> Parsed {
        self.enter()?;
        let mut lhs = self.and()?;
        while self.eat(&Tok::Or) {
            let rhs = self.and()?;
            self.logical("or", &lhs);
            self.logical("or", &rhs);
            lhs = self.binary(BinOp::Or, lhs, rhs, Kind::Bool);
            self.check_depth(&lhs)?;
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn and(&mut self) -> Parsed {
        let mut lhs = self.not()?;
        while self.eat(&Tok::And) {
            let rhs = self.not()?;
            self.logical("and", &lhs);
            self.logical("and", &rhs);
            lhs = self.binary(BinOp::And, lhs, rhs, Kind::Bool);
            self.check_depth(&lhs)?;
        }
        Ok(lhs)
    }

    fn not(&mut self) -> Parsed {
        let start = self.span().start;
        if !self.eat(&Tok::Not) {
            return self.comparison();
        }
        self.enter()?;
        let inner = self.not()?;
        self.depth -= 1;
        self.logical("not", &inner);
        let span = start..span_of(&inner).end;
        let (expr, _) = self.value(inner);
        Ok(Arg::Value {
            expr: Expr::Unary {
                op: UnOp::Not,
                expr: Box::new(expr),
            },
            kind: Kind::Bool,
            span,
        })
    }

    fn comparison_op(&self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::Lt => BinOp::Lt,
            Tok::Le => BinOp::Le,
            Tok::Gt => BinOp::Gt,
            Tok::Ge => BinOp::Ge,
            Tok::EqEq => BinOp::Eq,
            Tok::Ne => BinOp::Ne,
            _ => return None,
        })
    }

    fn comparison(&mut self) -> Parsed {
        let lhs = self.additive()?;
        let Some(op) = self.comparison_op() else {
            return Ok(lhs);
        };
        self.pos += 1;
        let rhs = self.additive()?;
        if self.comparison_op().is_some() {
            return Err(
                ExprError::new(self.span().start, "comparisons cannot be chained")
                    .hint("write `a < b and b < c`"),
            );
        }
        Ok(self.binary(op, lhs, rhs, Kind::Bool))
    }

    fn additive(&mut self) -> Parsed {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.multiplicative()?;
            lhs = self.binary(op, lhs, rhs, Kind::Num);
            self.check_depth(&lhs)?;
        }
    }

    fn multiplicative(&mut self) -> Parsed {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.unary()?;
            lhs = self.binary(op, lhs, rhs, Kind::Num);
            self.check_depth(&lhs)?;
        }
    }

    fn unary(&mut self) -> Parsed {
        let start = self.span().start;
        if !self.eat(&Tok::Minus) {
            return self.primary();
        }
        self.enter()?;
        let inner = self.unary()?;
        self.depth -= 1;
        let span = start..span_of(&inner).end;
        let (expr, _) = self.value(inner);
        Ok(Arg::Value {
            expr: Expr::Unary {
                op: UnOp::Neg,
                expr: Box::new(expr),
            },
            kind: Kind::Num,
            span,
        })
    }
}
