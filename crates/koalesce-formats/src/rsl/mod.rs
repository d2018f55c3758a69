//! Globus RSL v1.0 (GT2 "The Globus Resource Specification Language RSL v1.0") and NorduGrid
//! xRSL, which shares its syntax: a tokenizer and a recursive-descent parser with positions,
//! variable substitution (`rsl_substitution`, `$(NAME)`, `$(NAME default)`, scoped per
//! multi-request clause), explicit (`#`) and implicit concatenation, quoting (`"…"`, `'…'`
//! with doubled quotes, `^c…c` user delimiters) and `(* comments *)`. Attribute names are
//! case-insensitive and underscores in them are ignored (`max_wall_time` = `maxWallTime`), as
//! in GRAM and ARC.

mod gt2;
mod xrsl;

use std::collections::BTreeMap;

pub use gt2::{convert_gt2, convert_gt2_for_sites};
pub use xrsl::convert_xrsl;

use crate::common::FormatError;
use crate::Format;

/// Line and column (1-based) of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    pub line: usize,
    pub col: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    LParen,
    RParen,
    /// `&`, `|` or `+`.
    Bool(char),
    /// `=`, `!=`, `<`, `<=`, `>`, `>=`.
    Rel(&'static str),
    Concat,
    Dollar,
    Lit(String),
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    pos: Pos,
    /// Whitespace or a comment came right before it (no implicit concatenation across it).
    spaced: bool,
}

const SPECIAL: &str = "+&|()=<>!\"'^#$";

fn tokenize(src: &str, fmt: Format) -> Result<Vec<Token>, FormatError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let mut spaced = true;
    let err = |line: usize, col: usize, m: String| FormatError::at(fmt, line, Some(col), m);
    macro_rules! adv {
        () => {{
            if chars[i] == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
            i += 1;
        }};
    }
    while i < chars.len() {
        let c = chars[i];
        let pos = Pos { line, col };
        if c.is_whitespace() || c == '\u{feff}' {
            adv!();
            spaced = true;
            continue;
        }
        if c == '(' && chars.get(i + 1) == Some(&'*') {
            adv!();
            adv!();
            loop {
                if i >= chars.len() {
                    return Err(err(pos.line, pos.col, "comment '(*' is not closed with '*)'".into()));
                }
                if chars[i] == '*' && chars.get(i + 1) == Some(&')') {
                    adv!();
                    adv!();
                    break;
                }
                adv!();
            }
            spaced = true;
            continue;
        }
        let tok = match c {
            '(' => {
                adv!();
                Tok::LParen
            }
            ')' => {
                adv!();
                Tok::RParen
            }
            '&' | '|' | '+' => {
                adv!();
                Tok::Bool(c)
            }
            '#' => {
                adv!();
                Tok::Concat
            }
            '$' => {
                adv!();
                Tok::Dollar
            }
            '=' => {
                adv!();
                Tok::Rel("=")
            }
            '!' | '<' | '>' => {
                adv!();
                if i < chars.len() && chars[i] == '=' {
                    adv!();
                    Tok::Rel(match c {
                        '!' => "!=",
                        '<' => "<=",
                        _ => ">=",
                    })
                } else if c == '!' {
                    return Err(err(pos.line, pos.col, "'!' must be followed by '=' (the '!=' operator)".into()));
                } else {
                    Tok::Rel(if c == '<' { "<" } else { ">" })
                }
            }
            '"' | '\'' | '^' => {
                let delim = if c == '^' {
                    adv!();
                    if i >= chars.len() {
                        return Err(err(pos.line, pos.col, "'^' must be followed by a quote character".into()));
                    }
                    chars[i]
                } else {
                    c
                };
                adv!();
                let mut s = String::new();
                loop {
                    if i >= chars.len() {
                        return Err(err(pos.line, pos.col, format!("quoted string is not closed (missing {delim})")));
                    }
                    if chars[i] == delim {
                        if chars.get(i + 1) == Some(&delim) {
                            s.push(delim);
                            adv!();
                            adv!();
                            continue;
                        }
                        adv!();
                        break;
                    }
                    s.push(chars[i]);
                    adv!();
                }
                Tok::Lit(s)
            }
            _ => {
                let mut s = String::new();
                while i < chars.len() && !chars[i].is_whitespace() && !SPECIAL.contains(chars[i]) {
                    // "(*" cannot appear inside a literal; "*)" ends a comment only inside one.
                    s.push(chars[i]);
                    adv!();
                }
                Tok::Lit(s)
            }
        };
        out.push(Token { tok, pos, spaced });
        spaced = false;
    }
    out.push(Token {
        tok: Tok::Eof,
        pos: Pos { line, col },
        spaced: true,
    });
    Ok(out)
}

/// A value as written.
#[derive(Debug, Clone)]
enum Value {
    Lit(String),
    Var(Vec<Value>, Pos),
    Concat(Vec<Value>),
    Seq(Vec<Value>),
}

#[derive(Debug, Clone)]
struct Relation {
    attr: String,
    op: &'static str,
    values: Vec<Value>,
    pos: Pos,
}

#[derive(Debug, Clone)]
enum Spec {
    Bool(char, Vec<Spec>, Pos),
    Rel(Relation),
}

/// Deepest nesting of parentheses accepted.
const MAX_DEPTH: usize = 100;

struct Parser {
    toks: Vec<Token>,
    i: usize,
    fmt: Format,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.toks[self.i]
    }

    fn next(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn err(&self, t: &Token, m: impl Into<String>) -> FormatError {
        FormatError::at(self.fmt, t.pos.line, Some(t.pos.col), m)
    }

    fn deeper(&mut self) -> Result<(), FormatError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let t = self.peek().clone();
            return Err(self.err(&t, format!("nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn spec(&mut self) -> Result<Spec, FormatError> {
        self.deeper()?;
        let t = self.peek().clone();
        let s = match t.tok {
            Tok::Bool(op) => {
                self.next();
                let mut items = Vec::new();
                while matches!(self.peek().tok, Tok::LParen) {
                    self.next();
                    items.push(self.spec()?);
                    let close = self.next();
                    if close.tok != Tok::RParen {
                        return Err(self.err(&close, "expected ')' at the end of a clause"));
                    }
                }
                if items.is_empty() {
                    return Err(self.err(&t, format!("'{op}' must be followed by clauses in parentheses")));
                }
                Spec::Bool(op, items, t.pos)
            }
            Tok::Lit(_) => Spec::Rel(self.relation()?),
            _ => return Err(self.err(&t, "expected an attribute, '&', '|' or '+'")),
        };
        self.depth -= 1;
        Ok(s)
    }

    fn relation(&mut self) -> Result<Relation, FormatError> {
        let t = self.next();
        let Tok::Lit(attr) = t.tok.clone() else {
            return Err(self.err(&t, "expected an attribute name"));
        };
        let opt = self.next();
        let Tok::Rel(op) = opt.tok else {
            return Err(self.err(&opt, format!("expected '=' (or another relation) after attribute '{attr}'")));
        };
        let values = self.sequence()?;
        if values.is_empty() {
            let t = self.peek().clone();
            return Err(self.err(&t, format!("attribute '{attr}' has no value")));
        }
        Ok(Relation {
            attr,
            op,
            values,
            pos: t.pos,
        })
    }

    /// Values up to the closing parenthesis.
    fn sequence(&mut self) -> Result<Vec<Value>, FormatError> {
        let mut out = Vec::new();
        loop {
            match self.peek().tok {
                Tok::RParen | Tok::Eof => return Ok(out),
                Tok::LParen => {
                    self.next();
                    self.deeper()?;
                    let inner = self.sequence()?;
                    self.depth -= 1;
                    let close = self.next();
                    if close.tok != Tok::RParen {
                        return Err(self.err(&close, "expected ')' to close a value sequence"));
                    }
                    out.push(Value::Seq(inner));
                }
                _ => out.push(self.simple()?),
            }
        }
    }

    fn atom(&mut self) -> Result<Value, FormatError> {
        let t = self.next();
        match t.tok {
            Tok::Lit(s) => Ok(Value::Lit(s)),
            Tok::Dollar => {
                let open = self.next();
                if open.tok != Tok::LParen {
                    return Err(self.err(&open, "'$' must be followed by '(' (a variable reference $(NAME))"));
                }
                self.deeper()?;
                let inner = self.sequence()?;
                self.depth -= 1;
                let close = self.next();
                if close.tok != Tok::RParen {
                    return Err(self.err(&close, "expected ')' to close the variable reference"));
                }
                Ok(Value::Var(inner, t.pos))
            }
            _ => Err(self.err(&t, "expected a value")),
        }
    }

    /// An atom with `#` concatenations and implicit ones (no blank between a variable
    /// reference and a literal or another reference).
    fn simple(&mut self) -> Result<Value, FormatError> {
        let mut parts = vec![self.atom()?];
        loop {
            let t = self.peek().clone();
            match t.tok {
                Tok::Concat => {
                    self.next();
                    parts.push(self.atom()?);
                }
                Tok::Lit(_) | Tok::Dollar if !t.spaced => {
                    let prev_is_var = matches!(parts.last(), Some(Value::Var(..)));
                    if prev_is_var || matches!(t.tok, Tok::Dollar) {
                        parts.push(self.atom()?);
                    } else {
                        break;
                    }
                }
                _ => break,
            }
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap()
        } else {
            Value::Concat(parts)
        })
    }
}

/// Parses RSL text. A file that starts with a relation in parentheses (no operator) is read
/// as a conjunction.
fn parse(src: &str, fmt: Format) -> Result<Spec, FormatError> {
    let toks = tokenize(src, fmt)?;
    let mut p = Parser { toks, i: 0, fmt, depth: 0 };
    let first = p.peek().clone();
    let spec = match first.tok {
        Tok::Eof => return Err(FormatError::general(fmt, "the file is empty")),
        Tok::LParen => {
            let mut items = Vec::new();
            while matches!(p.peek().tok, Tok::LParen) {
                p.next();
                items.push(p.spec()?);
                let close = p.next();
                if close.tok != Tok::RParen {
                    return Err(p.err(&close, "expected ')'"));
                }
            }
            Spec::Bool('&', items, first.pos)
        }
        _ => p.spec()?,
    };
    let rest = p.peek().clone();
    if rest.tok != Tok::Eof {
        return Err(p.err(&rest, "unexpected text after the end of the request"));
    }
    Ok(spec)
}

/// A value after substitution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RVal {
    Str(String),
    Seq(Vec<RVal>),
}

/// A relation after substitution, with its canonical attribute name (lower case, no `_`).
#[derive(Debug, Clone)]
pub(crate) struct Rel {
    pub attr: String,
    pub canon: String,
    pub op: &'static str,
    pub values: Vec<RVal>,
    pub pos: Pos,
    /// xRSL `(|(a=x)(a=y))`: the alternatives (then `op` is "|" and `values` empty).
    pub alts: Vec<Rel>,
}

/// A request after substitution: a conjunction's relations, or sub-requests.
#[derive(Debug, Clone)]
pub(crate) enum Req {
    /// `&`: relations (nested conjunctions are flattened).
    And(Vec<Rel>, Pos),
    Multi(Vec<Req>, Pos),
    Or(Pos),
}

pub(crate) fn canonical(attr: &str) -> String {
    attr.chars().filter(|c| *c != '_').flat_map(char::to_lowercase).collect()
}

/// The value GRAM's predefined variables get: the job's own directory for HOME and
/// SCRATCH_DIRECTORY, a marker for the client's GASS server.
pub(crate) const GASS: &str = "\u{1}GASS";

fn predefined() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("HOME".to_string(), "${KOALESCE_JOB_DIR}".to_string());
    m.insert("SCRATCH_DIRECTORY".to_string(), "${KOALESCE_JOB_DIR}".to_string());
    m.insert("GLOBUSRUN_GASS_URL".to_string(), GASS.to_string());
    m
}

struct Resolver {
    fmt: Format,
}

impl Resolver {
    fn string(&self, v: &Value, env: &BTreeMap<String, String>) -> Result<String, FormatError> {
        match self.value(v, env)? {
            RVal::Str(s) => Ok(s),
            RVal::Seq(_) => Err(FormatError::general(
                self.fmt,
                "a parenthesized sequence cannot be concatenated or used as a name",
            )),
        }
    }

    fn value(&self, v: &Value, env: &BTreeMap<String, String>) -> Result<RVal, FormatError> {
        Ok(match v {
            Value::Lit(s) => RVal::Str(s.clone()),
            Value::Seq(items) => RVal::Seq(items.iter().map(|x| self.value(x, env)).collect::<Result<_, _>>()?),
            Value::Concat(parts) => {
                let mut s = String::new();
                for p in parts {
                    s.push_str(&self.string(p, env)?);
                }
                RVal::Str(s)
            }
            Value::Var(inner, pos) => {
                let name = match inner.first() {
                    Some(n) => self.string(n, env)?,
                    None => return Err(FormatError::at(self.fmt, pos.line, Some(pos.col), "empty variable reference $()")),
                };
                match (env.get(&name), inner.get(1)) {
                    (Some(v), _) => RVal::Str(v.clone()),
                    (None, Some(default)) => RVal::Str(self.string(default, env)?),
                    (None, None) => {
                        return Err(FormatError::at(
                            self.fmt,
                            pos.line,
                            Some(pos.col),
                            format!("variable $({name}) is not defined (define it with rsl_substitution; koalesce predefines HOME, SCRATCH_DIRECTORY and GLOBUSRUN_GASS_URL)"),
                        ))
                    }
                }
            }
        })
    }

    fn request(&self, spec: &Spec, env: &mut BTreeMap<String, String>) -> Result<Req, FormatError> {
        match spec {
            Spec::Rel(r) => Ok(Req::And(vec![self.relation(r, env)?], r.pos)),
            Spec::Bool('&', items, pos) => {
                let mut rels = Vec::new();
                for item in items {
                    if let (Format::Xrsl, Spec::Bool('|', alts, pos)) = (self.fmt, item) {
                        rels.push(self.alternatives(alts, *pos, env)?);
                        continue;
                    }
                    match self.request(item, env)? {
                        Req::And(rs, _) => rels.extend(rs),
                        Req::Multi(_, p) | Req::Or(p) => return Err(FormatError::at(
                            self.fmt,
                            p.line,
                            Some(p.col),
                            "a '|' disjunction or a '+' multi-request cannot be nested inside '&' (koalesce takes one description per job)",
                        )),
                    }
                }
                Ok(Req::And(rels, *pos))
            }
            Spec::Bool('+', items, pos) => {
                let mut subs = Vec::new();
                for item in items {
                    // Each clause of a multi-request has its own variable scope.
                    let mut scope = env.clone();
                    subs.push(self.request(item, &mut scope)?);
                }
                Ok(Req::Multi(subs, *pos))
            }
            Spec::Bool(_, _, pos) => Ok(Req::Or(*pos)),
        }
    }

    /// xRSL's `(|(queue=a)(queue=b))` inside a conjunction: alternatives of one attribute
    /// (the xRSL manual allows `|` for queue, runTimeEnvironment, opsys, architecture and
    /// others); a relation whose `alts` hold them. Other shapes are refused here.
    fn alternatives(&self, alts: &[Spec], pos: Pos, env: &mut BTreeMap<String, String>) -> Result<Rel, FormatError> {
        let mut out: Vec<Rel> = Vec::new();
        for a in alts {
            let r = match a {
                Spec::Rel(r) => self.relation(r, env)?,
                Spec::Bool(_, _, p) => {
                    return Err(FormatError::at(
                        self.fmt,
                        p.line,
                        Some(p.col),
                        "'|' alternatives must each be one relation, such as (queue=a)",
                    ))
                }
            };
            if let Some(first) = out.first() {
                if first.canon != r.canon {
                    return Err(FormatError::at(
                        self.fmt,
                        r.pos.line,
                        Some(r.pos.col),
                        format!(
                            "'|' alternatives must all be of one attribute ({} and {} are mixed)",
                            first.attr, r.attr
                        ),
                    ));
                }
            }
            out.push(r);
        }
        let first = out
            .first()
            .cloned()
            .ok_or_else(|| FormatError::at(self.fmt, pos.line, Some(pos.col), "'|' has no alternatives"))?;
        Ok(Rel {
            attr: first.attr,
            canon: first.canon,
            op: "|",
            values: Vec::new(),
            pos,
            alts: out,
        })
    }

    fn relation(&self, r: &Relation, env: &mut BTreeMap<String, String>) -> Result<Rel, FormatError> {
        let canon = canonical(&r.attr);
        if canon == "rslsubstitution" {
            for v in &r.values {
                let RVal::Seq(pair) = self.value(v, env)? else {
                    return Err(FormatError::at(
                        self.fmt,
                        r.pos.line,
                        Some(r.pos.col),
                        "rsl_substitution takes (NAME value) pairs",
                    ));
                };
                match pair.as_slice() {
                    [RVal::Str(name), RVal::Str(value)] => {
                        env.insert(name.clone(), value.clone());
                    }
                    _ => {
                        return Err(FormatError::at(
                            self.fmt,
                            r.pos.line,
                            Some(r.pos.col),
                            "rsl_substitution takes (NAME value) pairs",
                        ))
                    }
                }
            }
        }
        Ok(Rel {
            attr: r.attr.clone(),
            canon,
            op: r.op,
            values: r.values.iter().map(|v| self.value(v, env)).collect::<Result<_, _>>()?,
            pos: r.pos,
            alts: Vec::new(),
        })
    }
}

/// Parses and substitutes: the request tree the GT2 and xRSL mappings read.
pub(crate) fn resolve(src: &str, fmt: Format) -> Result<Req, FormatError> {
    let spec = parse(src, fmt)?;
    Resolver { fmt }.request(&spec, &mut predefined())
}

impl Rel {
    pub fn err(&self, fmt: Format, m: impl Into<String>) -> FormatError {
        FormatError::at(fmt, self.pos.line, Some(self.pos.col), format!("{}: {}", self.attr, m.into()))
    }

    /// The one string value.
    pub fn one(&self, fmt: Format) -> Result<String, FormatError> {
        match self.values.as_slice() {
            [RVal::Str(s)] => Ok(s.clone()),
            _ => Err(self.err(fmt, "expects a single value")),
        }
    }

    /// A list of plain strings.
    pub fn strings(&self, fmt: Format) -> Result<Vec<String>, FormatError> {
        self.values
            .iter()
            .map(|v| match v {
                RVal::Str(s) => Ok(s.clone()),
                RVal::Seq(_) => Err(self.err(fmt, "expects plain values, not parenthesized sequences")),
            })
            .collect()
    }

    /// A list of parenthesized sequences of strings, e.g. `(a b)(c d)`.
    pub fn tuples(&self, fmt: Format) -> Result<Vec<Vec<String>>, FormatError> {
        self.values
            .iter()
            .map(|v| match v {
                RVal::Seq(items) => items
                    .iter()
                    .map(|i| match i {
                        RVal::Str(s) => Ok(s.clone()),
                        RVal::Seq(_) => Err(self.err(fmt, "sequences nest too deep")),
                    })
                    .collect(),
                RVal::Str(s) => Err(self.err(fmt, format!("expects parenthesized sequences like (a b), found '{s}'"))),
            })
            .collect()
    }

    /// A non-negative whole number.
    pub fn number(&self, fmt: Format) -> Result<u64, FormatError> {
        let s = self.one(fmt)?;
        s.trim()
            .parse::<u64>()
            .map_err(|_| self.err(fmt, format!("'{s}' is not a whole number")))
    }

    pub fn require_eq(&self, fmt: Format) -> Result<(), FormatError> {
        if self.op != "=" {
            return Err(self.err(fmt, format!("only '=' is supported, not '{}'", self.op)));
        }
        Ok(())
    }
}

/// Skips leading blanks and `(* comments *)`.
pub(crate) fn skip_comments(mut t: &str) -> &str {
    loop {
        t = t.trim_start_matches('\u{feff}').trim_start();
        if let Some(rest) = t.strip_prefix("(*") {
            match rest.find("*)") {
                Some(end) => t = &rest[end + 2..],
                None => return "",
            }
        } else {
            return t;
        }
    }
}

/// Attributes only xRSL has and only GT2 RSL has (canonical names).
const XRSL_ONLY: [&str; 24] = [
    "inputfiles",
    "outputfiles",
    "executables",
    "jobname",
    "walltime",
    "cputime",
    "gridtime",
    "memory",
    "disk",
    "runtimeenvironment",
    "join",
    "gmlog",
    "opsys",
    "architecture",
    "rerun",
    "lifetime",
    "notify",
    "cluster",
    "middleware",
    "cache",
    "ftpthreads",
    "countpernode",
    "nodeaccess",
    "benchmarks",
];
const GT2_ONLY: [&str; 16] = [
    "directory",
    "jobtype",
    "maxwalltime",
    "maxcputime",
    "maxtime",
    "maxmemory",
    "minmemory",
    "filestagein",
    "filestageinshared",
    "filestageout",
    "filecleanup",
    "resourcemanagercontact",
    "subjobstarttype",
    "subjobcommstype",
    "hostcount",
    "grammyjob",
];

/// GT2 RSL or xRSL, from the attribute names used: xRSL when it uses more xRSL-only names, or
/// as many (e.g. only shared ones) and has `(* comments *)`; GT2 otherwise.
pub(crate) fn dialect(text: &str) -> Format {
    let Ok(toks) = tokenize(text, Format::Rsl) else {
        return Format::Rsl;
    };
    let (mut x, mut g) = (0, 0);
    for w in toks.windows(2) {
        if let (Tok::Lit(a), Tok::Rel(_)) = (&w[0].tok, &w[1].tok) {
            let c = canonical(a);
            if XRSL_ONLY.contains(&c.as_str()) {
                x += 1;
            }
            if GT2_ONLY.contains(&c.as_str()) {
                g += 1;
            }
        }
    }
    // Only shared attributes: NorduGrid files usually carry (* comments *), Globus ones not.
    if x > g || (x == g && toks.len() > 1 && text.contains("(*")) {
        Format::Xrsl
    } else {
        Format::Rsl
    }
}

#[cfg(test)]
mod tests;
