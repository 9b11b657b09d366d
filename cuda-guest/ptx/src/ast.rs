//! The syntax tree of a PTX module.

/// A parsed PTX module.
#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    /// The name given to the module (a file name, for error messages).
    pub name: String,
    /// `.version` as (major, minor).
    pub version: (u32, u32),
    /// `.target` names (e.g. `sm_80`).
    pub target: Vec<String>,
    /// `.address_size` (64 unless stated).
    pub address_size: u32,
    /// Module-scope variables (`.global`, `.const`, `.shared`).
    pub variables: Vec<VarDecl>,
    /// `.entry` and `.func` definitions and declarations, in source order.
    pub functions: Vec<Function>,
}

impl Module {
    /// A module called `name` with nothing in it yet (64-bit, no `.version` or
    /// `.target`).
    pub fn empty(name: &str) -> Module {
        Module {
            name: name.to_string(),
            version: (0, 0),
            target: vec![],
            address_size: 64,
            variables: vec![],
            functions: vec![],
        }
    }

    /// The kernel (`.entry`) called `name`.
    pub fn entry(&self, name: &str) -> Option<&Function> {
        self.functions
            .iter()
            .find(|f| f.is_entry && f.name == name && f.body.is_some())
    }

    /// All kernels (`.entry` definitions) of the module.
    pub fn entries(&self) -> impl Iterator<Item = &Function> {
        self.functions
            .iter()
            .filter(|f| f.is_entry && f.body.is_some())
    }
}

/// A state space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// `.reg`
    Reg,
    /// `.global`
    Global,
    /// `.const`
    Const,
    /// `.shared`
    Shared,
    /// `.local`
    Local,
    /// `.param`
    Param,
}

/// A scalar type name as written (`u32`, `f32`, `b8`, `pred`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `.pred`
    Pred,
    /// `.b8` / `.u8` / `.s8`
    B8,
    /// `.u8`
    U8,
    /// `.s8`
    S8,
    /// `.b16`
    B16,
    /// `.u16`
    U16,
    /// `.s16`
    S16,
    /// `.f16`
    F16,
    /// `.bf16`
    Bf16,
    /// `.b32`
    B32,
    /// `.u32`
    U32,
    /// `.s32`
    S32,
    /// `.f32`
    F32,
    /// `.f16x2` / `.bf16x2`
    F16x2,
    /// `.b64`
    B64,
    /// `.u64`
    U64,
    /// `.s64`
    S64,
    /// `.f64`
    F64,
    /// `.b128`
    B128,
}

impl ScalarType {
    /// Parses a type name without its dot.
    pub fn from_name(s: &str) -> Option<ScalarType> {
        use ScalarType::*;
        Some(match s {
            "pred" => Pred,
            "b8" => B8,
            "u8" => U8,
            "s8" => S8,
            "b16" => B16,
            "u16" => U16,
            "s16" => S16,
            "f16" => F16,
            "bf16" => Bf16,
            "b32" => B32,
            "u32" => U32,
            "s32" => S32,
            "f32" => F32,
            "f16x2" | "bf16x2" => F16x2,
            "b64" => B64,
            "u64" => U64,
            "s64" => S64,
            "f64" => F64,
            "b128" => B128,
            _ => return None,
        })
    }

    /// Size in bytes (`.pred` counts as 1).
    pub fn size(self) -> u32 {
        use ScalarType::*;
        match self {
            Pred | B8 | U8 | S8 => 1,
            B16 | U16 | S16 | F16 | Bf16 => 2,
            B32 | U32 | S32 | F32 | F16x2 => 4,
            B64 | U64 | S64 | F64 => 8,
            B128 => 16,
        }
    }

    /// The name as written in PTX, without the dot.
    pub fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            Pred => "pred",
            B8 => "b8",
            U8 => "u8",
            S8 => "s8",
            B16 => "b16",
            U16 => "u16",
            S16 => "s16",
            F16 => "f16",
            Bf16 => "bf16",
            B32 => "b32",
            U32 => "u32",
            S32 => "s32",
            F32 => "f32",
            F16x2 => "f16x2",
            B64 => "b64",
            U64 => "u64",
            S64 => "s64",
            F64 => "f64",
            B128 => "b128",
        }
    }
}

/// A variable declaration (`.reg`, `.shared`, `.local`, `.global`, `.const`, `.param`).
#[derive(Debug, Clone, PartialEq)]
pub struct VarDecl {
    /// State space.
    pub space: Space,
    /// Element type.
    pub ty: ScalarType,
    /// Vector width (`.v2`/`.v4`), 1 for scalars.
    pub vector: u32,
    /// Name (for `%r<10>`: the prefix `%r`).
    pub name: String,
    /// `%r<N>`: N registers `%r0..%r{N-1}`.
    pub range: Option<u32>,
    /// Array dimensions; `Some(0)` for an unsized `[]` (e.g. `extern .shared`).
    pub array: Vec<u32>,
    /// Explicit `.align`.
    pub align: Option<u32>,
    /// `.extern` linkage.
    pub is_extern: bool,
    /// Linked outside its unit (`.visible`, `.weak`, `.common` or `.extern`); a
    /// module-scope variable without it is the unit's own.
    pub linked: bool,
    /// Initializer values (integers or float bits as written), if any.
    pub init: Vec<Operand>,
    /// `.attribute(.managed)`: a `.global` in managed memory (nvcc's `__managed__`),
    /// which the host reaches at the address `cuModuleGetGlobal` gives.
    pub managed: bool,
    /// Source line.
    pub line: u32,
}

impl VarDecl {
    /// Size in bytes (0 for unsized arrays).
    pub fn size(&self) -> u64 {
        let n: u64 = self
            .array
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d as u64));
        n.saturating_mul(self.ty.size() as u64 * self.vector as u64)
    }

    /// Alignment in bytes (explicit or natural).
    pub fn alignment(&self) -> u32 {
        self.align.unwrap_or(self.ty.size() * self.vector)
    }
}

/// A parameter of an `.entry` or `.func`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Name.
    pub name: String,
    /// Element type.
    pub ty: ScalarType,
    /// Total size in bytes (element size times array length).
    pub size: u32,
    /// Alignment in bytes.
    pub align: u32,
    /// Array length, if the parameter is an array (a by-value struct is `.b8 name[N]`).
    pub array: Option<u32>,
    /// `.ptr` annotation: the pointer's state space, if given.
    pub ptr_space: Option<Space>,
    /// Byte offset of the parameter in the kernel parameter buffer.
    pub offset: u32,
}

/// A function: an `.entry` (kernel) or a `.func`.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// Name.
    pub name: String,
    /// `.entry` (true) or `.func` (false).
    pub is_entry: bool,
    /// Return parameters of a `.func`.
    pub returns: Vec<Param>,
    /// Parameters.
    pub params: Vec<Param>,
    /// Body, or `None` for a declaration (prototype).
    pub body: Option<Vec<Statement>>,
    /// Performance directives (`.maxntid`, `.reqntid`...) as (name, values).
    pub directives: Vec<(String, Vec<u32>)>,
    /// Linked outside its unit (`.visible`, `.weak`, `.common` or `.extern`); without it
    /// the function is the unit's own.
    pub linked: bool,
    /// Source line of the directive.
    pub line: u32,
}

/// A statement of a function body.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// A variable or register declaration.
    Decl(VarDecl),
    /// A label.
    Label(String, u32),
    /// An instruction.
    Inst(Instruction),
    /// A nested `{ }` scope.
    Block(Vec<Statement>),
    /// `name: .callprototype (returns) _ (params);`: the signature an indirect call
    /// (`call fptr, (args), name;`) names.
    Prototype(CallPrototype),
}

/// A `.callprototype` of a function body: a label naming a signature for indirect calls.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPrototype {
    /// The label.
    pub name: String,
    /// Return parameters (names are `_`).
    pub returns: Vec<Param>,
    /// Parameters (names are `_`).
    pub params: Vec<Param>,
    /// Source line.
    pub line: u32,
}

/// A guard predicate `@%p` / `@!%p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// Negated (`@!%p`).
    pub negated: bool,
    /// Predicate register.
    pub reg: String,
}

/// An instruction.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    /// Guard predicate.
    pub guard: Option<Guard>,
    /// The opcode (`ld` of `ld.global.f32`).
    pub opcode: String,
    /// The modifiers after the opcode, without dots (`["global", "f32"]`).
    pub modifiers: Vec<String>,
    /// Operands.
    pub operands: Vec<Operand>,
    /// Source line (1-based).
    pub line: u32,
    /// Source column (1-based).
    pub col: u32,
}

impl Instruction {
    /// Whether the modifier `m` is present.
    pub fn has(&self, m: &str) -> bool {
        self.modifiers.iter().any(|x| x == m)
    }

    /// The full opcode with modifiers as written (`ld.global.f32`).
    pub fn full_name(&self) -> String {
        let mut s = self.opcode.clone();
        for m in &self.modifiers {
            s.push('.');
            s.push_str(m);
        }
        s
    }
}

/// An operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A register, special register, variable or label name.
    Name(String),
    /// An integer literal.
    Int(i64),
    /// A float literal: `0fXXXXXXXX` (f32 bits) or a decimal literal.
    F32(u32),
    /// `0dXXXXXXXXXXXXXXXX` (f64 bits).
    F64(u64),
    /// A memory address `[base+offset]`.
    Address {
        /// Register, variable name or `None` for an absolute address.
        base: Option<String>,
        /// Byte offset.
        offset: i64,
    },
    /// `name+offset` outside brackets.
    NameOffset(String, i64),
    /// `[object, coordinates]` of `tex`, `suld` and `sust`: the texture or surface
    /// (a register holding an object, or a `.texref`/`.surfref` name) and the coordinate
    /// vector (or the one coordinate).
    Texture {
        /// Register or name of the texture or surface.
        object: String,
        /// Coordinates, in the instruction's order.
        coords: Vec<Operand>,
    },
    /// A vector `{a, b, c, d}`.
    Vector(Vec<Operand>),
    /// A parenthesised list (call arguments and returns).
    List(Vec<Operand>),
    /// A negated predicate `!%p`.
    Not(Box<Operand>),
    /// `%p|%q` (setp with two destinations).
    Pair(String, String),
    /// `_` (a sink operand).
    Sink,
}
