//! GridWay's REQUIREMENTS and RANK expressions (GridWay 5 user guide; 004 §3.2), compiled once
//! per job and evaluated per site.
//!
//! ```
//! use koalesce_core::expr::{Expr, SiteSnapshot, IntVar, StrVar, Value};
//! let rank = Expr::compile("CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"myfile\") / 135").unwrap();
//! let mut site = SiteSnapshot::default();
//! site.set_int(IntVar::CpuMhz, 1001);
//! site.set_int(IntVar::QueueFreeNodeCount, 0);
//! site.close_files = vec![Some(405_000_000)]; // compiled.files()[0] = "myfile" is held here
//! assert_eq!(rank.eval(&site), Value::Int(1001 + 405_000 / 135));
//! let req = Expr::compile("ARCH = \"x86*\" & CPU_MHZ > 1000").unwrap();
//! site.set_str(StrVar::Arch, "x86_64");
//! assert!(req.eval(&site).truthy());
//! ```
//!
//! The language: integers, strings in double quotes (compared with shell wildcards, ignoring
//! ASCII case), the host variables of [`IntVar`] and [`StrVar`], the functions of
//! [`Function`], `+ - * /` (integer arithmetic, division by zero is 0), comparisons
//! `= != < > <= >=`, and `& | !` — which, as in GridWay, share one precedence level and
//! associate left to right. An empty expression is true as requirements and 0 as rank. A
//! trailing `;` is allowed. Errors carry the 1-based column.
//!
//! Compilation resolves every name to an enum and every file or software name to an index
//! into [`Compiled::files`] / [`Compiled::software`], folds constants and emits a short
//! postfix program; evaluation runs it over a fixed stack with no allocation and no string
//! lookup (string comparisons match the site's value against a prepared pattern).

mod compile;
mod glob;
mod job;
mod parser;
mod site;
mod vars;
mod vm;

pub use glob::glob_match;
pub use job::JobExpr;
pub use site::gridway_data_environment;
pub use vars::{Function, IntVar, StrVar, Var, FEATURE_TAG_PREFIX};

use compile::Program;

/// A compile error: what is wrong and where (1-based character column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ExprError {
    pub column: usize,
    pub message: String,
}

impl ExprError {
    pub(crate) fn new(column: usize, message: impl Into<String>) -> Self {
        ExprError {
            column,
            message: message.into(),
        }
    }

    /// The expression with a caret under the column, then the message.
    pub fn render(&self, source: &str) -> String {
        let pad: String = source
            .chars()
            .take(self.column.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        format!("{source}\n{pad}^ {}", self.message)
    }
}

/// The natural type of an expression's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Int,
    Bool,
    /// The empty expression: true as requirements, 0 as rank.
    Empty,
}

/// The result of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Bool(bool),
}

impl Value {
    /// As requirements: a boolean, or a number that is not 0.
    pub fn truthy(self) -> bool {
        match self {
            Value::Bool(b) => b,
            Value::Int(v) => v != 0,
        }
    }

    /// As rank: a number, or 1/0 for a boolean.
    pub fn as_int(self) -> i64 {
        match self {
            Value::Bool(b) => b as i64,
            Value::Int(v) => v,
        }
    }
}

/// What an expression can ask about one site. Implementations answer from data prepared
/// before the scan (no string lookups here): files and software are the indices of
/// [`Compiled::files`] and [`Compiled::software`] of the expression being evaluated.
pub trait HostVars {
    fn int(&self, var: IntVar) -> i64;
    fn str(&self, var: StrVar) -> &str;
    /// The size in bytes of file `compiled.files()[file]` when a storage element close to the
    /// site (koalesce: the site's own storage) holds a replica, else None.
    fn close_file(&self, file: usize) -> Option<u64>;
    /// Whether the site publishes software tag `compiled.software()[tag]`.
    fn has_software(&self, tag: usize) -> bool;
}

/// A site's variables in arrays indexed by the variable enums: the simplest [`HostVars`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteSnapshot {
    pub ints: [i64; IntVar::COUNT],
    pub strs: [String; StrVar::COUNT],
    /// Per file index of the expression: the replica's size at this site, if any.
    pub close_files: Vec<Option<u64>>,
    /// Per software index of the expression: whether the site has it.
    pub software: Vec<bool>,
}

impl SiteSnapshot {
    pub fn set_int(&mut self, var: IntVar, v: i64) {
        self.ints[var as usize] = v;
    }

    pub fn set_str(&mut self, var: StrVar, v: impl Into<String>) {
        self.strs[var as usize] = v.into();
    }
}

impl HostVars for SiteSnapshot {
    #[inline]
    fn int(&self, var: IntVar) -> i64 {
        self.ints[var as usize]
    }
    #[inline]
    fn str(&self, var: StrVar) -> &str {
        &self.strs[var as usize]
    }
    #[inline]
    fn close_file(&self, file: usize) -> Option<u64> {
        self.close_files.get(file).copied().flatten()
    }
    #[inline]
    fn has_software(&self, tag: usize) -> bool {
        self.software.get(tag).copied().unwrap_or(false)
    }
}

/// Entry point: `Expr::compile(text)`.
pub struct Expr;

impl Expr {
    /// Parses, type-checks and compiles an expression.
    pub fn compile(source: &str) -> Result<Compiled, ExprError> {
        let node = parser::parse(source)?;
        let program = compile::compile(node.as_ref())?;
        Ok(Compiled {
            source: source.to_string(),
            program,
        })
    }
}

/// A compiled expression, ready to be evaluated against any number of sites.
#[derive(Clone)]
pub struct Compiled {
    source: String,
    program: Program,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("source", &self.source)
            .field("ops", &self.program.ops.len())
            .finish()
    }
}

impl Compiled {
    /// The text it was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn result_type(&self) -> ValueType {
        self.program.result
    }

    /// Whether this is the empty expression.
    pub fn is_empty(&self) -> bool {
        self.program.result == ValueType::Empty
    }

    /// Logical file names the data functions ask about, indexed as in
    /// [`HostVars::close_file`]. For a rank these are the job's requested files (004 §3.2:
    /// the ones not at the chosen site go into `GW_REMOTE_FILES_i`).
    pub fn files(&self) -> &[String] {
        &self.program.files
    }

    /// The files asked about by HAS_CLOSE_DATA or SIZE_CLOSE_DATA (004 §3.2: the job's
    /// requested files; CLOSE_DATA's are at the chosen site by definition).
    pub fn requested_files(&self) -> impl Iterator<Item = &str> {
        self.program
            .files
            .iter()
            .zip(&self.program.requested)
            .filter(|(_, r)| **r)
            .map(|(f, _)| f.as_str())
    }

    /// Software tags asked about by `HAS_SOFTWARE`, indexed as in [`HostVars::has_software`].
    pub fn software(&self) -> &[String] {
        &self.program.software
    }

    /// The host variables the expression reads.
    pub fn variables(&self) -> &[Var] {
        &self.program.vars
    }

    /// Whether the value can change while processors are taken or freed during a scan
    /// (otherwise it may be computed once per site and cached).
    pub fn depends_on_load(&self) -> bool {
        self.program.vars.iter().any(|v| v.is_load_dependent())
    }

    /// The value when it does not depend on the site at all.
    pub fn constant(&self) -> Option<Value> {
        self.program.constant.map(|v| self.typed(v))
    }

    fn typed(&self, v: i64) -> Value {
        match self.program.result {
            ValueType::Int => Value::Int(v),
            ValueType::Bool => Value::Bool(v != 0),
            ValueType::Empty => Value::Int(0),
        }
    }

    /// Evaluates the expression for one site.
    #[inline]
    pub fn eval<H: HostVars + ?Sized>(&self, host: &H) -> Value {
        self.typed(vm::run(&self.program, host))
    }

    /// As requirements: true when the site qualifies (the empty expression is true).
    #[inline]
    pub fn matches<H: HostVars + ?Sized>(&self, host: &H) -> bool {
        self.is_empty() || vm::run(&self.program, host) != 0
    }

    /// As rank: the site's rank (the empty expression ranks every site 0).
    #[inline]
    pub fn rank<H: HostVars + ?Sized>(&self, host: &H) -> i64 {
        vm::run(&self.program, host)
    }
}

#[cfg(test)]
mod tests;
