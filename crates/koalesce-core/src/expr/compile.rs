//! Type checking, constant folding and code generation: a parsed expression becomes a short
//! postfix program over integer registers (booleans are 0/1), with every variable resolved to
//! an enum, every file and software name to an index, and every string pattern prepared.

use super::glob::{glob_match, has_wildcards};
use super::parser::{BinOp, CmpOp, Kind, Node, UnOp};
use super::vars::{Function, IntVar, StrVar, Var};
use super::{ExprError, ValueType};

/// Deepest evaluation stack a compiled program may need.
pub(crate) const MAX_STACK: usize = 16;

/// One instruction of a compiled expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Const(i64),
    Int(IntVar),
    /// Pushes whether the variable matches pattern `pat` (negated for `!=`).
    StrMatch {
        var: StrVar,
        pat: u16,
        neg: bool,
    },
    /// Pushes whether two string variables are equal (ignoring ASCII case).
    StrEq {
        a: StrVar,
        b: StrVar,
        neg: bool,
    },
    CloseData(u16),
    HasCloseData(u16),
    SizeCloseData(u16),
    HasSoftware(u16),
    Neg,
    Not,
    ToBool,
    Add,
    Sub,
    Mul,
    Div,
    Cmp(CmpOp),
    /// Superinstructions: the right operand is a constant or a variable.
    ArithK(BinOp, i64),
    ArithV(BinOp, IntVar),
    CmpK(CmpOp, i64),
    CmpV(CmpOp, IntVar),
    /// If the top is 0 jump to the target (keeping it), else pop and go on (`&`).
    JumpIfZero(u16),
    /// If the top is not 0 jump to the target (keeping it), else pop and go on (`|`).
    JumpIfNonZero(u16),
}

/// A string pattern of a comparison, specialised for the common shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    Exact(Box<[u8]>),
    /// `abc*`
    Prefix(Box<[u8]>),
    /// `*abc`
    Suffix(Box<[u8]>),
    /// `*abc*`
    Contains(Box<[u8]>),
    Glob(Box<[u8]>),
}

impl Pattern {
    pub fn new(p: &[u8]) -> Pattern {
        let plain = |s: &[u8]| !has_wildcards(s);
        let n = p.len();
        if plain(p) {
            Pattern::Exact(p.into())
        } else if n >= 2 && p[0] == b'*' && p[n - 1] == b'*' && plain(&p[1..n - 1]) {
            Pattern::Contains(p[1..n - 1].to_ascii_lowercase().into())
        } else if n >= 1 && p[n - 1] == b'*' && plain(&p[..n - 1]) {
            Pattern::Prefix(p[..n - 1].into())
        } else if n >= 1 && p[0] == b'*' && plain(&p[1..]) {
            Pattern::Suffix(p[1..].into())
        } else {
            Pattern::Glob(p.into())
        }
    }

    #[inline]
    pub fn matches(&self, s: &str) -> bool {
        let t = s.as_bytes();
        match self {
            Pattern::Exact(p) => t.eq_ignore_ascii_case(p),
            Pattern::Prefix(p) => t.len() >= p.len() && t[..p.len()].eq_ignore_ascii_case(p),
            Pattern::Suffix(p) => t.len() >= p.len() && t[t.len() - p.len()..].eq_ignore_ascii_case(p),
            Pattern::Contains(p) => p.is_empty() || t.windows(p.len()).any(|w| w.eq_ignore_ascii_case(p)),
            Pattern::Glob(p) => glob_match(p, t),
        }
    }
}

/// Typed, folded intermediate form.
#[derive(Debug, Clone)]
enum Ir {
    Const(i64),
    Int(IntVar),
    StrMatch(StrVar, u16, bool),
    StrEq(StrVar, StrVar, bool),
    Call(Function, u16),
    Neg(Box<Ir>),
    Not(Box<Ir>),
    ToBool(Box<Ir>),
    Arith(BinOp, Box<Ir>, Box<Ir>),
    Cmp(CmpOp, Box<Ir>, Box<Ir>),
    And(Box<Ir>, Box<Ir>),
    Or(Box<Ir>, Box<Ir>),
}

enum Lowered {
    Num(Ir, ValueType),
    StrLit(String, usize),
    StrVar(StrVar, usize),
}

/// What code generation produces.
#[derive(Clone)]
pub(crate) struct Program {
    pub ops: Vec<Op>,
    pub patterns: Vec<Pattern>,
    pub files: Vec<String>,
    /// Per file: asked about by HAS_CLOSE_DATA / SIZE_CLOSE_DATA (004's requested files).
    pub requested: Vec<bool>,
    pub software: Vec<String>,
    pub vars: Vec<Var>,
    pub result: ValueType,
    /// Set when the whole expression folded to a constant.
    pub constant: Option<i64>,
}

#[derive(Default)]
struct Ctx {
    patterns: Vec<Pattern>,
    files: Vec<String>,
    requested: Vec<bool>,
    software: Vec<String>,
    vars: Vec<Var>,
}

fn intern(list: &mut Vec<String>, s: &str) -> u16 {
    match list.iter().position(|x| x == s) {
        Some(i) => i as u16,
        None => {
            list.push(s.to_string());
            (list.len() - 1) as u16
        }
    }
}

pub(crate) fn arith(op: BinOp, a: i64, b: i64) -> i64 {
    match op {
        BinOp::Add => a.saturating_add(b),
        BinOp::Sub => a.saturating_sub(b),
        BinOp::Mul => a.saturating_mul(b),
        // Division by zero yields 0 (GridWay would crash); i64::MIN / -1 saturates.
        BinOp::Div => {
            if b == 0 {
                0
            } else {
                a.checked_div(b).unwrap_or(i64::MAX)
            }
        }
        _ => unreachable!("not an arithmetic operator"),
    }
}

pub(crate) fn compare(op: CmpOp, a: i64, b: i64) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Gt => a > b,
        CmpOp::Le => a <= b,
        CmpOp::Ge => a >= b,
    }
}

fn as_bool(ir: Ir, ty: ValueType) -> Ir {
    match (ir, ty) {
        (ir, ValueType::Bool) => ir,
        (Ir::Const(v), _) => Ir::Const((v != 0) as i64),
        (ir, _) => Ir::ToBool(Box::new(ir)),
    }
}

impl Ctx {
    fn lower(&mut self, node: &Node) -> Result<Lowered, ExprError> {
        let col = node.col;
        Ok(match &node.kind {
            Kind::Int(v) => Lowered::Num(Ir::Const(*v), ValueType::Int),
            Kind::Str(s) => Lowered::StrLit(s.clone(), col),
            Kind::Var(v) => {
                if !self.vars.contains(v) {
                    self.vars.push(*v);
                }
                match v {
                    Var::Int(i) => Lowered::Num(Ir::Int(*i), ValueType::Int),
                    Var::Str(s) => Lowered::StrVar(*s, col),
                }
            }
            Kind::Call(f, arg) => {
                if arg.is_empty() {
                    return Err(ExprError::new(col, format!("{}() needs a non-empty name", f.name())));
                }
                let (idx, ty) = match f {
                    Function::HasSoftware => (intern(&mut self.software, arg), ValueType::Bool),
                    Function::HasFeature => (
                        intern(&mut self.software, &format!("{}{arg}", super::vars::FEATURE_TAG_PREFIX)),
                        ValueType::Bool,
                    ),
                    Function::CloseData => (intern(&mut self.files, arg), ValueType::Bool),
                    Function::HasCloseData | Function::SizeCloseData => (intern(&mut self.files, arg), ValueType::Int),
                };
                if !matches!(f, Function::HasSoftware | Function::HasFeature) {
                    self.requested.resize(self.files.len(), false);
                    if *f != Function::CloseData {
                        self.requested[idx as usize] = true;
                    }
                }
                Lowered::Num(Ir::Call(*f, idx), ty)
            }
            Kind::Unary(op, inner) => {
                let (ir, ty) = self.num(inner)?;
                match op {
                    UnOp::Neg => match ir {
                        Ir::Const(v) => Lowered::Num(Ir::Const(v.saturating_neg()), ValueType::Int),
                        ir => Lowered::Num(Ir::Neg(Box::new(ir)), ValueType::Int),
                    },
                    UnOp::Not => match as_bool(ir, ty) {
                        Ir::Const(v) => Lowered::Num(Ir::Const((v == 0) as i64), ValueType::Bool),
                        ir => Lowered::Num(Ir::Not(Box::new(ir)), ValueType::Bool),
                    },
                }
            }
            Kind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div), a, b) => {
                let (a, _) = self.num(a)?;
                let (b, _) = self.num(b)?;
                match (a, b) {
                    (Ir::Const(x), Ir::Const(y)) => Lowered::Num(Ir::Const(arith(*op, x, y)), ValueType::Int),
                    (a, b) => Lowered::Num(Ir::Arith(*op, Box::new(a), Box::new(b)), ValueType::Int),
                }
            }
            Kind::Binary(op @ (BinOp::And | BinOp::Or), a, b) => {
                let (a, ta) = self.num(a)?;
                let (b, tb) = self.num(b)?;
                let (a, b) = (as_bool(a, ta), as_bool(b, tb));
                let and = *op == BinOp::And;
                let ir = match (a, b) {
                    (Ir::Const(x), b) => {
                        if (x != 0) == and {
                            b
                        } else {
                            Ir::Const(x)
                        }
                    }
                    (a, Ir::Const(y)) if (y != 0) == and => a,
                    (a, b) if and => Ir::And(Box::new(a), Box::new(b)),
                    (a, b) => Ir::Or(Box::new(a), Box::new(b)),
                };
                Lowered::Num(ir, ValueType::Bool)
            }
            Kind::Binary(BinOp::Cmp(op), a, b) => {
                let a = self.lower(a)?;
                let b = self.lower(b)?;
                Lowered::Num(self.comparison(*op, a, b, col)?, ValueType::Bool)
            }
        })
    }

    fn num(&mut self, node: &Node) -> Result<(Ir, ValueType), ExprError> {
        match self.lower(node)? {
            Lowered::Num(ir, ty) => Ok((ir, ty)),
            Lowered::StrLit(s, col) => Err(ExprError::new(
                col,
                format!("string \"{s}\" used as a value (strings can only be compared with a string variable)"),
            )),
            Lowered::StrVar(v, col) => Err(ExprError::new(
                col,
                format!("{v} is a string variable: compare it with = or != and a \"pattern\""),
            )),
        }
    }

    fn pattern(&mut self, s: &str) -> u16 {
        let p = Pattern::new(s.as_bytes());
        match self.patterns.iter().position(|x| *x == p) {
            Some(i) => i as u16,
            None => {
                self.patterns.push(p);
                (self.patterns.len() - 1) as u16
            }
        }
    }

    fn comparison(&mut self, op: CmpOp, a: Lowered, b: Lowered, col: usize) -> Result<Ir, ExprError> {
        let neg = match op {
            CmpOp::Eq => false,
            CmpOp::Ne => true,
            _ => {
                if matches!(a, Lowered::StrLit(..) | Lowered::StrVar(..)) || matches!(b, Lowered::StrLit(..) | Lowered::StrVar(..)) {
                    return Err(ExprError::new(col, "strings can only be compared with = and !="));
                }
                true
            }
        };
        Ok(match (a, b) {
            (Lowered::Num(x, _), Lowered::Num(y, _)) => match (x, y) {
                (Ir::Const(x), Ir::Const(y)) => Ir::Const(compare(op, x, y) as i64),
                (x, y) => Ir::Cmp(op, Box::new(x), Box::new(y)),
            },
            (Lowered::StrVar(v, _), Lowered::StrLit(p, _)) | (Lowered::StrLit(p, _), Lowered::StrVar(v, _)) => {
                let pat = self.pattern(&p);
                Ir::StrMatch(v, pat, neg)
            }
            (Lowered::StrVar(a, _), Lowered::StrVar(b, _)) => Ir::StrEq(a, b, neg),
            (Lowered::StrLit(s, _), Lowered::StrLit(p, _)) => {
                let m = Pattern::new(p.as_bytes()).matches(&s);
                Ir::Const((m != neg) as i64)
            }
            (Lowered::Num(..), Lowered::StrLit(s, c)) | (Lowered::StrLit(s, c), Lowered::Num(..)) => {
                return Err(ExprError::new(c, format!("cannot compare the string \"{s}\" with a number")))
            }
            (Lowered::Num(..), Lowered::StrVar(v, c)) | (Lowered::StrVar(v, c), Lowered::Num(..)) => {
                return Err(ExprError::new(c, format!("cannot compare the string variable {v} with a number")))
            }
        })
    }
}

struct Gen {
    ops: Vec<Op>,
    depth: usize,
    max: usize,
}

impl Gen {
    fn push(&mut self, op: Op, delta: isize) {
        self.ops.push(op);
        self.depth = (self.depth as isize + delta) as usize;
        self.max = self.max.max(self.depth);
    }

    fn emit(&mut self, ir: &Ir) {
        match ir {
            Ir::Const(v) => self.push(Op::Const(*v), 1),
            Ir::Int(v) => self.push(Op::Int(*v), 1),
            Ir::StrMatch(var, pat, neg) => self.push(
                Op::StrMatch {
                    var: *var,
                    pat: *pat,
                    neg: *neg,
                },
                1,
            ),
            Ir::StrEq(a, b, neg) => self.push(Op::StrEq { a: *a, b: *b, neg: *neg }, 1),
            Ir::Call(f, i) => {
                let op = match f {
                    Function::CloseData => Op::CloseData(*i),
                    Function::HasCloseData => Op::HasCloseData(*i),
                    Function::SizeCloseData => Op::SizeCloseData(*i),
                    Function::HasSoftware | Function::HasFeature => Op::HasSoftware(*i),
                };
                self.push(op, 1)
            }
            Ir::Neg(x) => {
                self.emit(x);
                self.push(Op::Neg, 0)
            }
            Ir::Not(x) => {
                self.emit(x);
                self.push(Op::Not, 0)
            }
            Ir::ToBool(x) => {
                self.emit(x);
                self.push(Op::ToBool, 0)
            }
            Ir::Arith(op, a, b) => {
                self.emit(a);
                match b.as_ref() {
                    Ir::Const(k) => self.push(Op::ArithK(*op, *k), 0),
                    Ir::Int(v) => self.push(Op::ArithV(*op, *v), 0),
                    b => {
                        self.emit(b);
                        let op = match op {
                            BinOp::Add => Op::Add,
                            BinOp::Sub => Op::Sub,
                            BinOp::Mul => Op::Mul,
                            _ => Op::Div,
                        };
                        self.push(op, -1)
                    }
                }
            }
            Ir::Cmp(op, a, b) => {
                self.emit(a);
                match b.as_ref() {
                    Ir::Const(k) => self.push(Op::CmpK(*op, *k), 0),
                    Ir::Int(v) => self.push(Op::CmpV(*op, *v), 0),
                    b => {
                        self.emit(b);
                        self.push(Op::Cmp(*op), -1)
                    }
                }
            }
            Ir::And(a, b) | Ir::Or(a, b) => {
                self.emit(a);
                let at = self.ops.len();
                let jump = if matches!(ir, Ir::And(..)) {
                    Op::JumpIfZero(0)
                } else {
                    Op::JumpIfNonZero(0)
                };
                // Falling through pops the left value; the right one replaces it.
                self.push(jump, -1);
                self.emit(b);
                let target = self.ops.len() as u16;
                self.ops[at] = match jump {
                    Op::JumpIfZero(_) => Op::JumpIfZero(target),
                    _ => Op::JumpIfNonZero(target),
                };
            }
        }
    }
}

/// Compiles a parsed expression (None: the empty expression).
pub(crate) fn compile(node: Option<&Node>) -> Result<Program, ExprError> {
    let mut ctx = Ctx::default();
    let (ir, result) = match node {
        None => (Ir::Const(0), ValueType::Empty),
        Some(n) => ctx.num(n)?,
    };
    let constant = match ir {
        Ir::Const(v) => Some(v),
        _ => None,
    };
    let mut g = Gen {
        ops: Vec::new(),
        depth: 0,
        max: 0,
    };
    g.emit(&ir);
    if g.max > MAX_STACK {
        return Err(ExprError::new(
            node.map_or(1, |n| n.col),
            format!("expression needs more than {MAX_STACK} intermediate values; simplify it"),
        ));
    }
    if [g.ops.len(), ctx.patterns.len(), ctx.files.len(), ctx.software.len()]
        .iter()
        .any(|&n| n > u16::MAX as usize)
    {
        return Err(ExprError::new(1, "expression is too long"));
    }
    Ok(Program {
        ops: g.ops,
        patterns: ctx.patterns,
        requested: {
            let mut r = ctx.requested;
            r.resize(ctx.files.len(), false);
            r
        },
        files: ctx.files,
        software: ctx.software,
        vars: ctx.vars,
        result,
        constant,
    })
}
