//! A fast lexer and a recursive-descent parser for the PTX that clang and NVRTC emit.
//!
//! The parser recurses only into nested constructs (`{ }` blocks of a body, operands in
//! `( )`, `{ }` or after `!`), each bounded by [`MAX_NESTING`](super::MAX_NESTING) so
//! that no input can exhaust the stack of the thread parsing it; initializers are read
//! without recursion but with the same bound.

use super::ast::*;
use super::{ParseError, ParseErrorKind, MAX_NESTING};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok<'a> {
    /// Identifier, directive (`.reg`), opcode (`ld.global.f32`) or register (`%tid.x`).
    Word(&'a str),
    Int(i64),
    F32(u32),
    F64(u64),
    Str(&'a str),
    Punct(u8),
    Eof,
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    tok: Tok<'a>,
    line: u32,
    col: u32,
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    line: u32,
    line_start: usize,
}

impl<'a> Lexer<'a> {
    fn err(&self, module: &str, msg: String) -> ParseError {
        ParseError {
            module: module.to_string(),
            line: self.line,
            column: (self.pos - self.line_start) as u32 + 1,
            construct: "token".into(),
            message: msg,
            kind: ParseErrorKind::Syntax,
        }
    }

    fn tokens(mut self, module: &str) -> Result<Vec<Token<'a>>, ParseError> {
        let b = self.src.as_bytes();
        let mut out = Vec::with_capacity(b.len() / 4);
        loop {
            // Skip whitespace and comments.
            while self.pos < b.len() {
                let c = b[self.pos];
                if c == b'\n' {
                    self.pos += 1;
                    self.line += 1;
                    self.line_start = self.pos;
                } else if c.is_ascii_whitespace() {
                    self.pos += 1;
                } else if c == b'/' && b.get(self.pos + 1) == Some(&b'/') {
                    while self.pos < b.len() && b[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                } else if c == b'/' && b.get(self.pos + 1) == Some(&b'*') {
                    self.pos += 2;
                    loop {
                        if self.pos + 1 >= b.len() {
                            return Err(self.err(module, "unterminated comment".into()));
                        }
                        if b[self.pos] == b'*' && b[self.pos + 1] == b'/' {
                            self.pos += 2;
                            break;
                        }
                        if b[self.pos] == b'\n' {
                            self.line += 1;
                            self.line_start = self.pos + 1;
                        }
                        self.pos += 1;
                    }
                } else {
                    break;
                }
            }
            let line = self.line;
            let col = (self.pos - self.line_start) as u32 + 1;
            if self.pos >= b.len() {
                out.push(Token {
                    tok: Tok::Eof,
                    line,
                    col,
                });
                return Ok(out);
            }
            let c = b[self.pos];
            let start = self.pos;
            let tok = if c.is_ascii_digit() {
                self.number(module)?
            } else if is_word_start(c) {
                while self.pos < b.len() && is_word_char(b[self.pos]) {
                    self.pos += 1;
                }
                Tok::Word(&self.src[start..self.pos])
            } else if c == b'"' {
                self.pos += 1;
                while self.pos < b.len() && b[self.pos] != b'"' && b[self.pos] != b'\n' {
                    self.pos += 1;
                }
                if self.pos >= b.len() || b[self.pos] != b'"' {
                    return Err(self.err(module, "unterminated string".into()));
                }
                self.pos += 1;
                Tok::Str(&self.src[start + 1..self.pos - 1])
            } else if b",;:[]{}()<>+-@!|=".contains(&c) {
                self.pos += 1;
                Tok::Punct(c)
            } else {
                let ch = self.src[self.pos..].chars().next().unwrap_or('?');
                return Err(self.err(module, format!("unexpected character {ch:?}")));
            };
            out.push(Token { tok, line, col });
        }
    }

    fn number(&mut self, module: &str) -> Result<Tok<'a>, ParseError> {
        let b = self.src.as_bytes();
        let start = self.pos;
        let hex = |s: &str| -> Option<u64> { u64::from_str_radix(s, 16).ok() };
        if b[start] == b'0'
            && start + 1 < b.len()
            && matches!(b[start + 1], b'f' | b'F' | b'd' | b'D' | b'x' | b'X')
        {
            let kind = b[start + 1].to_ascii_lowercase();
            self.pos += 2;
            let ds = self.pos;
            while self.pos < b.len() && b[self.pos].is_ascii_hexdigit() {
                self.pos += 1;
            }
            let digits = &self.src[ds..self.pos];
            let v =
                hex(digits).ok_or_else(|| self.err(module, "bad hexadecimal literal".into()))?;
            let tok = match kind {
                b'f' if digits.len() == 8 => Tok::F32(v as u32),
                b'd' if digits.len() == 16 => Tok::F64(v),
                b'x' => {
                    if self.pos < b.len() && b[self.pos] == b'U' {
                        self.pos += 1;
                    }
                    Tok::Int(v as i64)
                }
                _ => {
                    return Err(self.err(
                        module,
                        "bad float literal (need 0f + 8 or 0d + 16 hex digits)".into(),
                    ))
                }
            };
            return Ok(tok);
        }
        while self.pos < b.len() && b[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let mut is_float = false;
        if self.pos < b.len()
            && b[self.pos] == b'.'
            && b.get(self.pos + 1).is_some_and(|c| c.is_ascii_digit())
        {
            is_float = true;
            self.pos += 1;
            while self.pos < b.len() && b[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
        }
        if self.pos < b.len() && matches!(b[self.pos], b'e' | b'E') {
            let save = self.pos;
            self.pos += 1;
            if self.pos < b.len() && matches!(b[self.pos], b'+' | b'-') {
                self.pos += 1;
            }
            if self.pos < b.len() && b[self.pos].is_ascii_digit() {
                is_float = true;
                while self.pos < b.len() && b[self.pos].is_ascii_digit() {
                    self.pos += 1;
                }
            } else {
                self.pos = save;
            }
        }
        let text = &self.src[start..self.pos];
        if is_float {
            let v: f64 = text
                .parse()
                .map_err(|_| self.err(module, "bad float literal".into()))?;
            return Ok(Tok::F64(v.to_bits()));
        }
        // Octal literals (leading 0) are legal PTX.
        let v = if text.len() > 1 && text.starts_with('0') {
            u64::from_str_radix(&text[1..], 8).ok()
        } else {
            text.parse::<u64>().ok()
        };
        let v = v.ok_or_else(|| self.err(module, "integer literal out of range".into()))?;
        if self.pos < b.len() && b[self.pos] == b'U' {
            self.pos += 1;
        }
        Ok(Tok::Int(v as i64))
    }
}

struct Parser<'a> {
    module: &'a str,
    toks: Vec<Token<'a>>,
    pos: usize,
    /// What is being parsed, for error messages.
    construct: String,
    /// Further registers of a `.reg .b32 a, b;` list.
    pending_decls: Vec<VarDecl>,
    /// `{ }` blocks open inside the current function body (its own braces not counted).
    block_depth: u32,
    /// Operands open around the one being read (`(`, `{`, `!`).
    operand_depth: u32,
}

type PResult<T> = Result<T, ParseError>;

fn describe(t: &Tok) -> String {
    match t {
        Tok::Word(w) => format!("`{w}`"),
        Tok::Int(i) => format!("integer {i}"),
        Tok::F32(_) | Tok::F64(_) => "float literal".into(),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Punct(c) => format!("`{}`", *c as char),
        Tok::Eof => "end of file".into(),
    }
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Tok<'a> {
        self.toks[self.pos].tok
    }
    fn peek_at(&self, n: usize) -> Tok<'a> {
        self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }
    fn here(&self) -> (u32, u32) {
        let t = &self.toks[self.pos];
        (t.line, t.col)
    }
    fn bump(&mut self) -> Tok<'a> {
        let t = self.toks[self.pos].tok;
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }
    fn err(&self, msg: impl Into<String>) -> ParseError {
        let (line, column) = self.here();
        ParseError {
            module: self.module.to_string(),
            line,
            column,
            construct: self.construct.clone(),
            message: msg.into(),
            kind: ParseErrorKind::Syntax,
        }
    }
    fn unexpected(&self, wanted: &str) -> ParseError {
        self.err(format!(
            "expected {wanted}, found {}",
            describe(&self.peek())
        ))
    }
    fn is_punct(&self, c: u8) -> bool {
        self.peek() == Tok::Punct(c)
    }
    fn eat_punct(&mut self, c: u8) -> bool {
        if self.is_punct(c) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect_punct(&mut self, c: u8) -> PResult<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{}`", c as char)))
        }
    }
    fn expect_word(&mut self, what: &str) -> PResult<&'a str> {
        match self.peek() {
            Tok::Word(w) => {
                self.bump();
                Ok(w)
            }
            _ => Err(self.unexpected(what)),
        }
    }
    fn expect_int(&mut self, what: &str) -> PResult<i64> {
        let neg = self.eat_punct(b'-');
        match self.peek() {
            Tok::Int(i) => {
                self.bump();
                Ok(if neg { i.wrapping_neg() } else { i })
            }
            _ => Err(self.unexpected(what)),
        }
    }
    fn expect_u32(&mut self, what: &str) -> PResult<u32> {
        let v = self.expect_int(what)?;
        u32::try_from(v).map_err(|_| self.err(format!("{what} out of range: {v}")))
    }
    /// Skips to just after the next `;` (for directives that carry nothing we use).
    fn skip_statement(&mut self) {
        while !matches!(self.peek(), Tok::Punct(b';') | Tok::Eof) {
            self.bump();
        }
        self.bump();
    }

    fn module(&mut self, name: &str) -> PResult<Module> {
        let mut m = Module::empty(name);
        loop {
            self.construct = "module directive".into();
            let (line, _) = self.here();
            let w = match self.peek() {
                Tok::Eof => break,
                Tok::Word(w) => w,
                _ => return Err(self.unexpected("a directive")),
            };
            match w {
                ".version" => {
                    self.construct = ".version".into();
                    self.bump();
                    match self.bump() {
                        Tok::F64(bits) => {
                            let s = format!("{}", f64::from_bits(bits));
                            let mut it = s.split('.');
                            let maj = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                            let min = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                            m.version = (maj, min);
                        }
                        Tok::Int(i) => m.version = (i as u32, 0),
                        _ => return Err(self.err("expected a version number")),
                    }
                    if m.version.0 > 9 {
                        let mut e = self.err(format!(
                            "unsupported PTX version {}.{}",
                            m.version.0, m.version.1
                        ));
                        e.kind = ParseErrorKind::UnsupportedVersion;
                        return Err(e);
                    }
                }
                ".target" => {
                    self.construct = ".target".into();
                    self.bump();
                    loop {
                        m.target
                            .push(self.expect_word("a target name")?.to_string());
                        if !self.eat_punct(b',') {
                            break;
                        }
                    }
                }
                ".address_size" => {
                    self.construct = ".address_size".into();
                    self.bump();
                    m.address_size = self.expect_u32("an address size")?;
                    if m.address_size != 64 && m.address_size != 32 {
                        return Err(self.err("address size must be 32 or 64"));
                    }
                }
                ".file" | ".section" => {
                    self.construct = w.to_string();
                    self.bump();
                    if w == ".section" {
                        // DWARF sections: skip the braced body.
                        while !matches!(self.peek(), Tok::Punct(b'{') | Tok::Eof) {
                            self.bump();
                        }
                        self.skip_braces()?;
                    } else {
                        while !matches!(self.peek(), Tok::Eof) && self.here().0 == line {
                            self.bump();
                        }
                    }
                }
                _ => {
                    // Linkage attributes, then .entry/.func or a variable.
                    let (mut is_extern, mut linked) = (false, false);
                    while let Tok::Word(a @ (".visible" | ".extern" | ".weak" | ".common")) =
                        self.peek()
                    {
                        is_extern |= a == ".extern";
                        linked = true;
                        self.bump();
                    }
                    match self.peek() {
                        Tok::Word(".entry" | ".func") => {
                            let is_entry = matches!(self.peek(), Tok::Word(".entry"));
                            let mut f = self.function(is_entry)?;
                            f.linked = linked;
                            m.functions.push(f);
                        }
                        Tok::Word(".global" | ".const" | ".shared" | ".local") => {
                            let mut v = self.var_decl()?;
                            v.is_extern = is_extern;
                            v.linked = linked;
                            m.variables.push(v);
                            m.variables.append(&mut self.pending_decls);
                        }
                        _ => {
                            return Err(
                                self.unexpected("`.entry`, `.func` or a variable declaration")
                            )
                        }
                    }
                }
            }
            // Optional trailing semicolons.
            while self.eat_punct(b';') {}
        }
        Ok(m)
    }

    fn skip_braces(&mut self) -> PResult<()> {
        self.expect_punct(b'{')?;
        let mut depth = 1;
        while depth > 0 {
            match self.bump() {
                Tok::Punct(b'{') => depth += 1,
                Tok::Punct(b'}') => depth -= 1,
                Tok::Eof => return Err(self.err("unclosed `{`")),
                _ => {}
            }
        }
        Ok(())
    }

    fn function(&mut self, is_entry: bool) -> PResult<Function> {
        let (line, _) = self.here();
        self.bump();
        self.construct = if is_entry {
            ".entry".into()
        } else {
            ".func".into()
        };
        let mut returns = vec![];
        if !is_entry && self.is_punct(b'(') {
            returns = self.param_list("return parameter list")?;
        }
        let name = self.expect_word("a function name")?.to_string();
        self.construct = format!("{} {name}", if is_entry { ".entry" } else { ".func" });
        let mut params = vec![];
        if self.is_punct(b'(') {
            params = self.param_list("parameter list")?;
        }
        if is_entry {
            let mut off = 0u64;
            for p in &mut params {
                let al = p.align.max(1) as u64;
                off = off.div_ceil(al) * al;
                if off > 1 << 24 {
                    return Err(self.err("parameter list too large"));
                }
                p.offset = off as u32;
                off += p.size as u64;
            }
        }
        let mut directives = vec![];
        while let Tok::Word(d) = self.peek() {
            if d == ".noreturn" {
                self.bump();
                continue;
            }
            if !d.starts_with('.') {
                break;
            }
            self.bump();
            let mut vals = vec![];
            while let Tok::Int(_) = self.peek() {
                vals.push(self.expect_u32("a value")?);
                if !self.eat_punct(b',') {
                    break;
                }
            }
            directives.push((d.to_string(), vals));
        }
        let body = if self.eat_punct(b';') {
            None
        } else if self.is_punct(b'{') {
            self.bump();
            self.block_depth = 0;
            self.construct = format!("body of {name}");
            Some(self.block_body(&name)?)
        } else {
            return Err(self.unexpected("`{` or `;`"));
        };
        Ok(Function {
            name,
            is_entry,
            returns,
            params,
            body,
            directives,
            line,
            linked: false,
        })
    }

    fn param_list(&mut self, what: &str) -> PResult<Vec<Param>> {
        let saved = self.construct.clone();
        self.construct = format!("{what} of {saved}");
        self.expect_punct(b'(')?;
        let mut out = vec![];
        if self.eat_punct(b')') {
            self.construct = saved;
            return Ok(out);
        }
        loop {
            match self.peek() {
                Tok::Word(".param" | ".reg") => {
                    self.bump();
                }
                _ => return Err(self.unexpected("`.param`")),
            }
            let mut ty = None;
            let mut align = None;
            let mut ptr_space = None;
            let mut ptr = false;
            let mut vector = 1;
            loop {
                match self.peek() {
                    Tok::Word(".align") => {
                        self.bump();
                        align = Some(self.expect_u32("an alignment")?);
                    }
                    Tok::Word(".ptr") => {
                        self.bump();
                        ptr = true;
                    }
                    Tok::Word(".v2") => {
                        self.bump();
                        vector = 2;
                    }
                    Tok::Word(".v4") => {
                        self.bump();
                        vector = 4;
                    }
                    Tok::Word(w) if w.starts_with('.') => {
                        self.bump();
                        let n = &w[1..];
                        if let Some(t) = ScalarType::from_name(n) {
                            ty = Some(t);
                        } else if ptr {
                            ptr_space = space_from_name(n);
                        } else {
                            return Err(self.err(format!("unknown parameter attribute `{w}`")));
                        }
                    }
                    _ => break,
                }
            }
            let ty = ty.ok_or_else(|| self.err("parameter has no type"))?;
            let name = self.expect_word("a parameter name")?.to_string();
            let mut array = None;
            if self.eat_punct(b'[') {
                array = Some(self.expect_u32("an array length")?);
                self.expect_punct(b']')?;
            }
            let size = (ty.size() * vector)
                .checked_mul(array.unwrap_or(1))
                .filter(|&s| s <= 1 << 20)
                .ok_or_else(|| self.err("parameter larger than 1 MiB"))?;
            let align = align.unwrap_or(ty.size() * vector);
            if !align.is_power_of_two() {
                return Err(self.err(format!("alignment {align} is not a power of two")));
            }
            out.push(Param {
                name,
                ty,
                size,
                align,
                array,
                ptr_space,
                offset: 0,
            });
            if self.eat_punct(b')') {
                break;
            }
            self.expect_punct(b',')?;
        }
        self.construct = saved;
        Ok(out)
    }

    fn var_decl(&mut self) -> PResult<VarDecl> {
        let (line, _) = self.here();
        let space = match self.bump() {
            Tok::Word(w) => {
                space_from_name(&w[1..]).ok_or_else(|| self.err("unknown state space"))?
            }
            _ => return Err(self.err("expected a state space")),
        };
        let saved = std::mem::replace(
            &mut self.construct,
            format!(".{} declaration", space_name(space)),
        );
        let mut ty = None;
        let mut align = None;
        let mut vector = 1;
        let mut managed = false;
        loop {
            match self.peek() {
                Tok::Word(".attribute") => {
                    // `.attribute(.managed)` (the only variable attribute nvcc emits).
                    self.bump();
                    self.expect_punct(b'(')?;
                    match self.bump() {
                        Tok::Word(".managed") => managed = true,
                        Tok::Word(w) => {
                            return Err(self.err(format!("unknown variable attribute `{w}`")))
                        }
                        _ => return Err(self.err("expected a variable attribute")),
                    }
                    self.expect_punct(b')')?;
                }
                Tok::Word(".align") => {
                    self.bump();
                    align = Some(self.expect_u32("an alignment")?);
                }
                Tok::Word(".v2") => {
                    self.bump();
                    vector = 2;
                }
                Tok::Word(".v4") => {
                    self.bump();
                    vector = 4;
                }
                Tok::Word(".ptr") => {
                    self.bump();
                }
                Tok::Word(w) if w.starts_with('.') => {
                    self.bump();
                    if let Some(t) = ScalarType::from_name(&w[1..]) {
                        ty = Some(t);
                    } else if space_from_name(&w[1..]).is_none() {
                        return Err(self.err(format!("unknown attribute `{w}`")));
                    }
                }
                _ => break,
            }
        }
        let ty = ty.ok_or_else(|| self.err("declaration has no type"))?;
        if let Some(a) = align {
            if !a.is_power_of_two() {
                return Err(self.err(format!("alignment {a} is not a power of two")));
            }
        }
        let mut names = vec![];
        loop {
            let name = self.expect_word("a name")?.to_string();
            let mut range = None;
            let mut array = vec![];
            if self.eat_punct(b'<') {
                range = Some(self.expect_u32("a register count")?);
                self.expect_punct(b'>')?;
            }
            while self.eat_punct(b'[') {
                if self.eat_punct(b']') {
                    array.push(0);
                } else {
                    array.push(self.expect_u32("an array length")?);
                    self.expect_punct(b']')?;
                }
            }
            let mut init = vec![];
            if self.eat_punct(b'=') {
                if self.eat_punct(b'{') {
                    self.init_list(&mut init)?;
                } else {
                    init.push(self.init_value()?);
                }
            }
            names.push(VarDecl {
                space,
                ty,
                vector,
                name,
                range,
                array,
                align,
                is_extern: false,
                linked: false,
                init,
                managed,
                line,
            });
            if !self.eat_punct(b',') {
                break;
            }
            if space != Space::Reg {
                return Err(self.err("only registers may be declared in a list"));
            }
        }
        self.expect_punct(b';')?;
        self.construct = saved;
        // Register lists `.reg .b32 a, b;` are returned one by one through `extra`.
        let first = names.remove(0);
        self.pending_decls.extend(names);
        Ok(first)
    }

    /// The values of a braced initializer (its `{` already read), flattened in order.
    /// Nested braces (arrays of arrays) are counted, not recursed into.
    fn init_list(&mut self, out: &mut Vec<Operand>) -> PResult<()> {
        if self.eat_punct(b'}') {
            return Ok(());
        }
        let mut depth = 1u32;
        loop {
            // An element: a value or a nested list (possibly empty).
            if self.is_punct(b'{') {
                if depth >= MAX_NESTING {
                    return Err(self.err(format!(
                        "initializer braces nested deeper than {MAX_NESTING}"
                    )));
                }
                self.bump();
                depth += 1;
                if !self.eat_punct(b'}') {
                    continue;
                }
                depth -= 1;
            } else {
                out.push(self.init_value()?);
            }
            // After an element: `,` or the end of one or more lists.
            loop {
                if self.eat_punct(b'}') {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                } else {
                    self.expect_punct(b',')?;
                    break;
                }
            }
        }
    }

    fn init_value(&mut self) -> PResult<Operand> {
        let neg = self.eat_punct(b'-');
        let v = match self.bump() {
            Tok::Int(i) => Operand::Int(if neg { i.wrapping_neg() } else { i }),
            Tok::F32(b) => Operand::F32(if neg { b ^ 0x8000_0000 } else { b }),
            Tok::F64(b) => Operand::F64(if neg { b ^ (1 << 63) } else { b }),
            Tok::Word(w) if !neg => {
                // `generic(sym)` or `sym` or `sym+off`
                if (w == "generic") && self.eat_punct(b'(') {
                    let s = self.expect_word("a symbol")?.to_string();
                    self.expect_punct(b')')?;
                    Operand::Name(s)
                } else if self.eat_punct(b'+') {
                    let o = self.expect_int("an offset")?;
                    Operand::NameOffset(w.to_string(), o)
                } else {
                    Operand::Name(w.to_string())
                }
            }
            _ => return Err(self.err("expected an initializer value")),
        };
        Ok(v)
    }

    /// The statements of a body or block (its `{` read). The construct is the body's
    /// (`body of NAME`) on entry and on return: what changes it while parsing a
    /// statement puts it back, so that it is not made again for every statement (a
    /// long name times many statements would take quadratic time).
    fn block_body(&mut self, fname: &str) -> PResult<Vec<Statement>> {
        let mut out = vec![];
        loop {
            for d in self.pending_decls.drain(..) {
                out.push(Statement::Decl(d));
            }
            match self.peek() {
                Tok::Punct(b'}') => {
                    self.bump();
                    return Ok(out);
                }
                Tok::Punct(b'{') => {
                    if self.block_depth >= MAX_NESTING {
                        return Err(self.err(format!("blocks nested deeper than {MAX_NESTING}")));
                    }
                    self.bump();
                    self.block_depth += 1;
                    let inner = self.block_body(fname)?;
                    self.block_depth -= 1;
                    out.push(Statement::Block(inner));
                }
                Tok::Punct(b';') => {
                    self.bump();
                }
                Tok::Eof => return Err(self.err(format!("unclosed body of {fname}"))),
                Tok::Word(w) if w.starts_with('.') => match w {
                    ".reg" | ".local" | ".shared" | ".param" | ".global" | ".const" => {
                        out.push(Statement::Decl(self.var_decl()?));
                    }
                    ".pragma" | ".loc" | ".file" | ".maxnreg" | ".maxntid" | ".reqntid"
                    | ".minnctapersm" => {
                        let (line, _) = self.here();
                        self.bump();
                        // .loc has no semicolon: skip to the end of its line.
                        if w == ".loc" {
                            while !matches!(self.peek(), Tok::Eof) && self.here().0 == line {
                                self.bump();
                            }
                        } else {
                            self.skip_statement();
                        }
                    }
                    _ => {
                        return Err(self.err(format!("unknown directive `{w}` in a function body")))
                    }
                },
                Tok::Word(w) if self.peek_at(1) == Tok::Punct(b':') => {
                    let (line, _) = self.here();
                    self.bump();
                    self.bump();
                    // `proto: .callprototype ...;`
                    if let Tok::Word(".callprototype") = self.peek() {
                        out.push(Statement::Prototype(self.call_prototype(w, line)?));
                        continue;
                    }
                    out.push(Statement::Label(w.to_string(), line));
                }
                Tok::Word(_) | Tok::Punct(b'@') => out.push(Statement::Inst(self.instruction()?)),
                _ => return Err(self.unexpected("an instruction, label or declaration")),
            }
        }
    }

    /// `.callprototype [(returns)] _ [(params)] [.noreturn];` (the label read).
    fn call_prototype(&mut self, name: &str, line: u32) -> PResult<CallPrototype> {
        self.bump();
        let saved = std::mem::replace(&mut self.construct, format!("prototype {name}"));
        let mut returns = vec![];
        if self.is_punct(b'(') {
            returns = self.param_list("return parameter list")?;
        }
        match self.bump() {
            Tok::Word("_") => {}
            _ => return Err(self.err("expected `_` in a .callprototype")),
        }
        let mut params = vec![];
        if self.is_punct(b'(') {
            params = self.param_list("parameter list")?;
        }
        while let Tok::Word(".noreturn" | ".abi_preserve" | ".abi_preserve_control") = self.peek() {
            self.bump();
            while let Tok::Int(_) = self.peek() {
                self.bump();
            }
        }
        if !self.eat_punct(b';') {
            return Err(self.unexpected("`;` after a .callprototype"));
        }
        self.construct = saved;
        Ok(CallPrototype {
            name: name.to_string(),
            returns,
            params,
            line,
        })
    }

    fn instruction(&mut self) -> PResult<Instruction> {
        let (line, col) = self.here();
        let mut guard = None;
        if self.eat_punct(b'@') {
            let negated = self.eat_punct(b'!');
            let reg = self.expect_word("a predicate register")?.to_string();
            guard = Some(Guard { negated, reg });
        }
        let op = self.expect_word("an opcode")?;
        let body = std::mem::replace(&mut self.construct, format!("instruction `{op}`"));
        let mut parts = op.split('.');
        let opcode = parts.next().unwrap_or("").to_string();
        if opcode.is_empty() || !opcode.as_bytes()[0].is_ascii_alphabetic() {
            return Err(self.err(format!("`{op}` is not an opcode")));
        }
        let modifiers: Vec<String> = parts.map(str::to_string).collect();
        if modifiers.iter().any(|m| m.is_empty()) {
            return Err(self.err(format!("empty modifier in `{op}`")));
        }
        let mut operands = vec![];
        if !self.is_punct(b';') {
            loop {
                operands.push(self.operand()?);
                if !self.eat_punct(b',') {
                    break;
                }
            }
        }
        if !self.eat_punct(b';') {
            return Err(self.unexpected("`,` or `;`"));
        }
        self.construct = body;
        Ok(Instruction {
            guard,
            opcode,
            modifiers,
            operands,
            line,
            col,
        })
    }

    fn operand(&mut self) -> PResult<Operand> {
        if matches!(self.peek(), Tok::Punct(b'(' | b'{' | b'!')) {
            if self.operand_depth >= MAX_NESTING {
                return Err(self.err(format!(
                    "operand nested deeper than {MAX_NESTING} (`(`, `{{` or `!`)"
                )));
            }
            self.operand_depth += 1;
            let r = self.operand_inner();
            self.operand_depth -= 1;
            return r;
        }
        self.operand_inner()
    }

    /// One operand; nested ones are read through [`Parser::operand`], which bounds them.
    fn operand_inner(&mut self) -> PResult<Operand> {
        match self.peek() {
            Tok::Punct(b'[') => {
                self.bump();
                let mut base = None;
                let mut offset = 0i64;
                match self.peek() {
                    Tok::Word(w) => {
                        self.bump();
                        base = Some(w.to_string());
                        // `[tex, {x, y}]`: a texture or surface and its coordinates.
                        if self.eat_punct(b',') {
                            let coords = match self.operand()? {
                                Operand::Vector(v) => v,
                                one => vec![one],
                            };
                            self.expect_punct(b']')?;
                            return Ok(Operand::Texture {
                                object: w.to_string(),
                                coords,
                            });
                        }
                        if self.eat_punct(b'+') || self.is_punct(b'-') {
                            offset = self.expect_int("an offset")?;
                        }
                    }
                    Tok::Int(_) | Tok::Punct(b'-') => offset = self.expect_int("an address")?,
                    _ => return Err(self.unexpected("an address")),
                }
                self.expect_punct(b']')?;
                Ok(Operand::Address { base, offset })
            }
            Tok::Punct(b'{') => {
                self.bump();
                let mut v = vec![];
                loop {
                    v.push(self.operand()?);
                    if self.eat_punct(b'}') {
                        break;
                    }
                    self.expect_punct(b',')?;
                }
                Ok(Operand::Vector(v))
            }
            Tok::Punct(b'(') => {
                self.bump();
                let mut v = vec![];
                if self.eat_punct(b')') {
                    return Ok(Operand::List(v));
                }
                loop {
                    v.push(self.operand()?);
                    if self.eat_punct(b')') {
                        break;
                    }
                    self.expect_punct(b',')?;
                }
                Ok(Operand::List(v))
            }
            Tok::Punct(b'!') => {
                self.bump();
                Ok(Operand::Not(Box::new(self.operand()?)))
            }
            Tok::Punct(b'-') => {
                self.bump();
                match self.bump() {
                    Tok::Int(i) => Ok(Operand::Int(i.wrapping_neg())),
                    Tok::F32(b) => Ok(Operand::F32(b ^ 0x8000_0000)),
                    Tok::F64(b) => Ok(Operand::F64(b ^ (1 << 63))),
                    _ => Err(self.err("expected a number after `-`")),
                }
            }
            Tok::Int(i) => {
                self.bump();
                Ok(Operand::Int(i))
            }
            Tok::F32(b) => {
                self.bump();
                Ok(Operand::F32(b))
            }
            Tok::F64(b) => {
                self.bump();
                Ok(Operand::F64(b))
            }
            Tok::Word(w) => {
                self.bump();
                if w == "_" {
                    return Ok(Operand::Sink);
                }
                if self.eat_punct(b'|') {
                    let q = self.expect_word("a predicate register")?;
                    return Ok(Operand::Pair(w.to_string(), q.to_string()));
                }
                if self.eat_punct(b'+') {
                    let o = self.expect_int("an offset")?;
                    return Ok(Operand::NameOffset(w.to_string(), o));
                }
                Ok(Operand::Name(w.to_string()))
            }
            _ => Err(self.unexpected("an operand")),
        }
    }
}

fn space_from_name(n: &str) -> Option<Space> {
    Some(match n {
        "reg" => Space::Reg,
        "global" => Space::Global,
        "const" => Space::Const,
        "shared" => Space::Shared,
        "local" => Space::Local,
        "param" => Space::Param,
        _ => return None,
    })
}

/// The name of a state space without its dot.
pub fn space_name(s: Space) -> &'static str {
    match s {
        Space::Reg => "reg",
        Space::Global => "global",
        Space::Const => "const",
        Space::Shared => "shared",
        Space::Local => "local",
        Space::Param => "param",
    }
}

/// Parses a module.
pub fn parse(module_name: &str, text: &str) -> Result<Module, ParseError> {
    let toks = Lexer {
        src: text,
        pos: 0,
        line: 1,
        line_start: 0,
    }
    .tokens(module_name)?;
    let mut p = Parser {
        module: module_name,
        toks,
        pos: 0,
        construct: String::new(),
        pending_decls: vec![],
        block_depth: 0,
        operand_depth: 0,
    };
    p.module(module_name)
}
