//! PTX front end: a hand-written lexer and recursive-descent parser for the PTX ISA
//! 6.0–8.8 subset that clang and NVRTC emit, producing a syntax tree ([`Module`]) with
//! every kernel's parameter list (name, type, size, alignment, offset).
//!
//! It knows nothing about execution; the simulator (`vmgpu-cuda-sim`) decodes its output.
//!
//! # Limits
//!
//! PTX reaches this parser from guests, so no input may exhaust the stack of the thread
//! that parses it (2 MiB for a guest's thread of the service, the main thread of
//! `vmgpu cuda run`): nesting is bounded by [`MAX_NESTING`] (64) levels, counted
//! separately for
//!
//! - `{ }` blocks inside a function body (the body's own braces not counted),
//! - an operand's `( )`, `{ }` and `!` (call argument lists, vectors, negations),
//! - the braces of a variable's initializer (`{{1, 2}, {3, 4}}` is 2 levels).
//!
//! Deeper nesting is a [`ParseError`] at the brace, parenthesis or `!` that goes one
//! level too deep (e.g. `guest.ptx:70:1: error in body of k: blocks nested deeper than
//! 64`), which the simulator backend reports as `CUDA_ERROR_INVALID_PTX` with the
//! error as its JIT log (the native driver's JIT judges a module itself; the parameter
//! layouts read here are then missing, as for any module this parser refuses). clang
//! and NVRTC nest a few levels at most, so real modules are not refused. The syntax
//! tree is never deeper than the limit either, so cloning, comparing and dropping it
//! (all recursive) stay shallow too.
//!
//! ```
//! let ptx = r#"
//! .version 7.0
//! .target sm_80
//! .address_size 64
//! .visible .entry k(.param .u64 out, .param .u32 n) { ret; }
//! "#;
//! let m = vmgpu_ptx::parse("k.ptx", ptx).unwrap();
//! let k = m.entry("k").unwrap();
//! assert_eq!(k.params[1].name, "n");
//! assert_eq!((k.params[1].size, k.params[1].align, k.params[1].offset), (4, 4, 8));
//! ```

mod ast;
pub mod fatbin;
pub mod linked;
mod parser;

/// Most levels of nesting the parser accepts, counted separately for `{ }` blocks in
/// a function body, for an operand's `( )`/`{ }`/`!`, and for initializer braces (see
/// [Limits](self#limits)). With every construct at this depth, and `.func` calls
/// inlined 16 deep, a debug build parses, decodes and runs a module in under 0.75 MiB
/// of stack, well inside a 2 MiB thread stack.
pub const MAX_NESTING: u32 = 64;

pub use ast::*;
pub use parser::{parse, space_name};

/// A syntax error, positioned like a JIT log: module, line, column and construct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{module}:{line}:{column}: error in {construct}: {message}")]
pub struct ParseError {
    /// Module name given to [`parse`].
    pub module: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The construct being parsed (e.g. ``instruction `ld` ``, `parameter list of .entry k`).
    pub construct: String,
    /// What went wrong.
    pub message: String,
    /// Its kind.
    pub kind: ParseErrorKind,
}

/// What kind of error a [`ParseError`] is (a JIT reports them differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// The text is not PTX as this front end reads it.
    #[default]
    Syntax,
    /// The `.version` is newer than the ISA this front end knows
    /// (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION` from a driver's JIT).
    UnsupportedVersion,
}
