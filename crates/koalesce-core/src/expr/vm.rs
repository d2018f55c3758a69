//! The evaluator of compiled expressions: a loop over postfix instructions on a fixed stack.

use super::compile::{arith, compare, Op, Program, MAX_STACK};
use super::parser::BinOp;
use super::HostVars;

/// Runs a program; booleans come out as 0/1.
#[inline]
pub(crate) fn run<H: HostVars + ?Sized>(p: &Program, h: &H) -> i64 {
    if let Some(c) = p.constant {
        return c;
    }
    let ops = &p.ops[..];
    let mut stack = [0i64; MAX_STACK];
    let mut sp = 0usize;
    let mut pc = 0usize;
    while pc < ops.len() {
        match ops[pc] {
            Op::Const(v) => {
                stack[sp] = v;
                sp += 1;
            }
            Op::Int(v) => {
                stack[sp] = h.int(v);
                sp += 1;
            }
            Op::StrMatch { var, pat, neg } => {
                stack[sp] = (p.patterns[pat as usize].matches(h.str(var)) != neg) as i64;
                sp += 1;
            }
            Op::StrEq { a, b, neg } => {
                stack[sp] = (h.str(a).eq_ignore_ascii_case(h.str(b)) != neg) as i64;
                sp += 1;
            }
            Op::CloseData(f) => {
                stack[sp] = h.close_file(f as usize).is_some() as i64;
                sp += 1;
            }
            Op::HasCloseData(f) => {
                stack[sp] = h.close_file(f as usize).is_some() as i64;
                sp += 1;
            }
            Op::SizeCloseData(f) => {
                // Kilobytes of 1000 bytes (004 Table 3).
                stack[sp] = h.close_file(f as usize).map_or(0, |b| (b / 1000).min(i64::MAX as u64) as i64);
                sp += 1;
            }
            Op::HasSoftware(t) => {
                stack[sp] = h.has_software(t as usize) as i64;
                sp += 1;
            }
            Op::Neg => stack[sp - 1] = stack[sp - 1].saturating_neg(),
            Op::Not => stack[sp - 1] = (stack[sp - 1] == 0) as i64,
            Op::ToBool => stack[sp - 1] = (stack[sp - 1] != 0) as i64,
            Op::Add | Op::Sub | Op::Mul | Op::Div => {
                let op = match ops[pc] {
                    Op::Add => BinOp::Add,
                    Op::Sub => BinOp::Sub,
                    Op::Mul => BinOp::Mul,
                    _ => BinOp::Div,
                };
                sp -= 1;
                stack[sp - 1] = arith(op, stack[sp - 1], stack[sp]);
            }
            Op::Cmp(op) => {
                sp -= 1;
                stack[sp - 1] = compare(op, stack[sp - 1], stack[sp]) as i64;
            }
            Op::ArithK(op, k) => stack[sp - 1] = arith(op, stack[sp - 1], k),
            Op::ArithV(op, v) => stack[sp - 1] = arith(op, stack[sp - 1], h.int(v)),
            Op::CmpK(op, k) => stack[sp - 1] = compare(op, stack[sp - 1], k) as i64,
            Op::CmpV(op, v) => stack[sp - 1] = compare(op, stack[sp - 1], h.int(v)) as i64,
            Op::JumpIfZero(target) => {
                if stack[sp - 1] == 0 {
                    pc = target as usize;
                    continue;
                }
                sp -= 1;
            }
            Op::JumpIfNonZero(target) => {
                if stack[sp - 1] != 0 {
                    pc = target as usize;
                    continue;
                }
                sp -= 1;
            }
        }
        pc += 1;
    }
    stack[0]
}
