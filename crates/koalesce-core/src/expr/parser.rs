//! Tokenizer and recursive-descent parser of GridWay's expression syntax.
//!
//! ```text
//! stmt   := [ logic ] [ ';' ] EOF                   (empty: requirements true, rank 0)
//! logic  := unary { ('&' | '|') unary }             GridWay: one precedence level, left to right
//! unary  := '!' unary | cmp
//! cmp    := arith [ ('=' | '==' | '!=' | '<' | '>' | '<=' | '>=') arith ]
//! arith  := term { ('+' | '-') term }
//! term   := factor { ('*' | '/') factor }
//! factor := '-' factor | '(' logic ')' | INTEGER | STRING | NAME [ '(' STRING ')' ]
//! ```
//!
//! `&`, `|` and `!` share one precedence level in GridWay's grammar (bison `%left '!' '&' '|'`),
//! so `A | B & C` means `(A | B) & C`. koalesce keeps that meaning so that templates written
//! for GridWay select the same sites; use parentheses to be explicit. Strings are written in
//! double quotes without escapes, as in GridWay.

use super::vars::{Function, Var};
use super::ExprError;

/// Deepest nesting accepted (keeps the recursive descent far from the thread's stack limit).
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Int(i64),
    Str(String),
    Name(String),
    Op(&'static str),
    LParen,
    RParen,
    Semi,
    Eof,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Cmp(CmpOp),
    And,
    Or,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnOp {
    Neg,
    Not,
}

/// A parsed expression; `col` is the 1-based character column where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub kind: Kind,
    pub col: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Int(i64),
    Str(String),
    Var(Var),
    Call(Function, String),
    Unary(UnOp, Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
}

fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, ExprError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            if i < chars.len() && (chars[i] == '.' || chars[i].is_alphabetic() || chars[i] == '_') {
                return Err(ExprError::new(
                    i + 1,
                    "only whole numbers are allowed (GridWay expressions are integer)",
                ));
            }
            let text: String = chars[start..i].iter().collect();
            let v: i64 = text
                .parse()
                .map_err(|_| ExprError::new(col, format!("number {text} is too large")))?;
            out.push((Tok::Int(v), col));
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Tok::Name(chars[start..i].iter().collect()), col));
            continue;
        }
        if c == '"' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += 1;
            }
            if i >= chars.len() {
                return Err(ExprError::new(col, "string is not closed (missing '\"')"));
            }
            out.push((Tok::Str(chars[start..i].iter().collect()), col));
            i += 1;
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        let op: Option<(&'static str, usize)> = match two.as_str() {
            "==" => Some(("=", 2)),
            "!=" => Some(("!=", 2)),
            "<=" => Some(("<=", 2)),
            ">=" => Some((">=", 2)),
            "&&" => Some(("&", 2)),
            "||" => Some(("|", 2)),
            _ => match c {
                '=' => Some(("=", 1)),
                '<' => Some(("<", 1)),
                '>' => Some((">", 1)),
                '!' => Some(("!", 1)),
                '&' => Some(("&", 1)),
                '|' => Some(("|", 1)),
                '+' => Some(("+", 1)),
                '-' => Some(("-", 1)),
                '*' => Some(("*", 1)),
                '/' => Some(("/", 1)),
                _ => None,
            },
        };
        if let Some((op, len)) = op {
            out.push((Tok::Op(op), col));
            i += len;
            continue;
        }
        match c {
            '(' => out.push((Tok::LParen, col)),
            ')' => out.push((Tok::RParen, col)),
            ';' => out.push((Tok::Semi, col)),
            _ => return Err(ExprError::new(col, format!("unexpected character '{c}'"))),
        }
        i += 1;
    }
    out.push((Tok::Eof, chars.len() + 1));
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
}

/// Parses an expression; `Ok(None)` for an empty one (only blanks and an optional `;`).
pub(crate) fn parse(src: &str) -> Result<Option<Node>, ExprError> {
    let toks = tokenize(src)?;
    let mut p = Parser { toks, pos: 0, depth: 0 };
    if matches!(p.peek(), Tok::Semi) {
        p.pos += 1;
    }
    if matches!(p.peek(), Tok::Eof) {
        return Ok(None);
    }
    let node = p.logic()?;
    if matches!(p.peek(), Tok::Semi) {
        p.pos += 1;
    }
    match p.peek() {
        Tok::Eof => Ok(Some(node)),
        t => Err(ExprError::new(
            p.col(),
            format!("unexpected {} after the end of the expression", describe(t)),
        )),
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Int(v) => format!("number {v}"),
        Tok::Str(s) => format!("string \"{s}\""),
        Tok::Name(n) => format!("name '{n}'"),
        Tok::Op(o) => format!("'{o}'"),
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Semi => "';'".into(),
        Tok::Eof => "end of expression".into(),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn col(&self) -> usize {
        self.toks[self.pos].1
    }

    fn next(&mut self) -> (Tok, usize) {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ExprError::new(
                self.col(),
                format!("expression nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn logic(&mut self) -> Result<Node, ExprError> {
        self.enter()?;
        let mut left = self.unary()?;
        loop {
            let op = if self.is_op("&") {
                BinOp::And
            } else if self.is_op("|") {
                BinOp::Or
            } else {
                break;
            };
            let (_, col) = self.next();
            let right = self.unary()?;
            left = Node {
                kind: Kind::Binary(op, Box::new(left), Box::new(right)),
                col,
            };
        }
        self.depth -= 1;
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.is_op("!") {
            let (_, col) = self.next();
            self.enter()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Node {
                kind: Kind::Unary(UnOp::Not, Box::new(inner)),
                col,
            });
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Node, ExprError> {
        let left = self.arith()?;
        let col = self.col();
        let op = match self.peek() {
            Tok::Op("=") => CmpOp::Eq,
            Tok::Op("!=") => CmpOp::Ne,
            Tok::Op("<") => CmpOp::Lt,
            Tok::Op(">") => CmpOp::Gt,
            Tok::Op("<=") => CmpOp::Le,
            Tok::Op(">=") => CmpOp::Ge,
            // GridWay's grammar reads '!' '=' as two tokens: "A ! = 3" is "A != 3".
            Tok::Op("!") if matches!(self.toks.get(self.pos + 1), Some((Tok::Op("="), _))) => {
                self.next();
                CmpOp::Ne
            }
            _ => return Ok(left),
        };
        self.next();
        let right = self.arith()?;
        if let Tok::Op(o @ ("=" | "!=" | "<" | ">" | "<=" | ">=")) = self.peek() {
            return Err(ExprError::new(
                self.col(),
                format!("comparisons cannot be chained ('{o}' after a comparison); use '&'"),
            ));
        }
        Ok(Node {
            kind: Kind::Binary(BinOp::Cmp(op), Box::new(left), Box::new(right)),
            col,
        })
    }

    fn arith(&mut self) -> Result<Node, ExprError> {
        let mut left = self.term()?;
        loop {
            let op = if self.is_op("+") {
                BinOp::Add
            } else if self.is_op("-") {
                BinOp::Sub
            } else {
                break;
            };
            let (_, col) = self.next();
            let right = self.term()?;
            left = Node {
                kind: Kind::Binary(op, Box::new(left), Box::new(right)),
                col,
            };
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Node, ExprError> {
        let mut left = self.factor()?;
        loop {
            let op = if self.is_op("*") {
                BinOp::Mul
            } else if self.is_op("/") {
                BinOp::Div
            } else {
                break;
            };
            let (_, col) = self.next();
            let right = self.factor()?;
            left = Node {
                kind: Kind::Binary(op, Box::new(left), Box::new(right)),
                col,
            };
        }
        Ok(left)
    }

    fn factor(&mut self) -> Result<Node, ExprError> {
        self.enter()?;
        let (tok, col) = self.next();
        let node = match tok {
            Tok::Op("-") => Node {
                kind: Kind::Unary(UnOp::Neg, Box::new(self.factor()?)),
                col,
            },
            Tok::LParen => {
                let inner = self.logic()?;
                match self.next() {
                    (Tok::RParen, _) => inner,
                    (t, c) => {
                        return Err(ExprError::new(
                            c,
                            format!("expected ')' to close the '(' at column {col}, found {}", describe(&t)),
                        ))
                    }
                }
            }
            Tok::Int(v) => Node { kind: Kind::Int(v), col },
            Tok::Str(s) => Node { kind: Kind::Str(s), col },
            Tok::Name(name) => {
                if matches!(self.peek(), Tok::LParen) {
                    let Some(f) = Function::from_name(&name) else {
                        return Err(ExprError::new(
                            col,
                            format!(
                                "unknown function '{name}' (known: CLOSE_DATA, HAS_CLOSE_DATA, SIZE_CLOSE_DATA, HAS_SOFTWARE, HAS_FEATURE)"
                            ),
                        ));
                    };
                    self.next();
                    let arg = match self.next() {
                        (Tok::Str(s), _) => s,
                        (t, c) => {
                            return Err(ExprError::new(
                                c,
                                format!("{}() takes one string argument, found {}", f.name(), describe(&t)),
                            ))
                        }
                    };
                    match self.next() {
                        (Tok::RParen, _) => {}
                        (t, c) => {
                            return Err(ExprError::new(
                                c,
                                format!("expected ')' after the argument of {}(), found {}", f.name(), describe(&t)),
                            ))
                        }
                    }
                    Node {
                        kind: Kind::Call(f, arg),
                        col,
                    }
                } else {
                    match Var::from_name(&name) {
                        Some(v) => Node { kind: Kind::Var(v), col },
                        None if Function::from_name(&name).is_some() => {
                            return Err(ExprError::new(col, format!("{name} is a function: write {name}(\"file\")")))
                        }
                        None => return Err(ExprError::new(col, format!("unknown variable '{name}'"))),
                    }
                }
            }
            t => return Err(ExprError::new(col, format!("expected a value, found {}", describe(&t)))),
        };
        self.depth -= 1;
        Ok(node)
    }
}
