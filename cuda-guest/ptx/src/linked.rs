//! Linked images: the PTX units a program hands the driver's linker (`cuLinkAddData`,
//! `cuLinkAddFile`), joined by `cuLinkComplete` into one image that travels where a PTX
//! module does (to `cuModuleLoadData`, over the guest protocol) and is linked when it
//! is loaded: a backend that JITs PTX itself (the simulator) merges the units with
//! [`link`]; one over NVIDIA's driver hands each unit to the driver's own linker.
//!
//! The image is text: [`MAGIC`], then per unit a line `//unit LEN NAME` and the unit's
//! `LEN` bytes of PTX. Being PTX comments, its header lines keep it a valid C string
//! and harmless to anything that looks at it as PTX text.

use crate::{parse, Module, Operand, ParseError, ParseErrorKind, Space, Statement};
use std::collections::{HashMap, HashSet};

/// The functions CUDA's device runtime provides (declared `.extern` by every unit that
/// calls them, defined by none; libcudadevrt's PTX defines the `__cudaCDP2` ones over a
/// GPU driver's private system calls, so a consumer answers them itself, and that unit
/// is not linked).
pub const DEVICE_RUNTIME: &[&str] = &[
    "vprintf",
    "__assertfail",
    "malloc",
    "free",
    // Dynamic parallelism (CDP2): `<<<>>>` in a kernel, and what it may call around it.
    "__cudaCDP2GetParameterBufferV2",
    "__cudaCDP2LaunchDeviceV2",
    "__cudaCDP2LaunchDeviceV2_ptsz",
    "__cudaCDP2StreamCreateWithFlags",
    "__cudaCDP2StreamDestroy",
    "__cudaCDP2GetLastError",
    "__cudaCDP2PeekAtLastError",
    "__cudaCDP2GetErrorString",
    "__cudaCDP2GetErrorName",
    "__cudaCDP2MemcpyAsync",
    "__cudaCDP2MemcpyAsync_ptsz",
    "__cudaCDP2Malloc",
    "__cudaCDP2Free",
    // The same calls by their public names (what NVVM IR written by hand, and PTX
    // before CUDA 12, call; libcudadevrt defines them too).
    "cudaGetParameterBufferV2",
    "cudaLaunchDeviceV2",
    "cudaStreamCreateWithFlags",
    "cudaStreamDestroy",
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaGetErrorString",
    "cudaGetErrorName",
    "cudaMemcpyAsync",
    "cudaMalloc",
    "cudaFree",
    // A conditional graph node's value (`cudaGraphSetConditional`).
    "cudaGraphSetConditional",
];

/// The first line of a linked image.
pub const MAGIC: &str = "//vmgpu linked PTX 1\n";

/// One unit of a linked image: its name (for messages) and its PTX text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit<'a> {
    /// The name the program gave it (a file name, or what `cuLinkAddData` was told).
    pub name: &'a str,
    /// The PTX.
    pub text: &'a str,
}

/// Joins `units` (name, PTX) into one linked image.
pub fn encode<'a>(units: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    encode_with(units, None)
}

/// [`encode`], with the linker's register limit (`CU_JIT_MAX_REGISTERS`): a line
/// `//maxnreg N` after [`MAGIC`]; [`parse_any`] gives every kernel `.maxnreg N`.
pub fn encode_with<'a>(
    units: impl IntoIterator<Item = (&'a str, &'a str)>,
    max_registers: Option<u32>,
) -> String {
    let mut out = String::from(MAGIC);
    if let Some(n) = max_registers {
        out.push_str(&format!("{MAXNREG}{n}\n"));
    }
    for (name, text) in units {
        // A name is one line.
        let name: String = name
            .chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .collect();
        out.push_str(&format!("//unit {} {name}\n", text.len()));
        out.push_str(text);
    }
    out
}

/// The header line of the register limit.
const MAXNREG: &str = "//maxnreg ";

/// The register limit a linked image carries ([`encode_with`]).
pub fn max_registers(text: &str) -> Option<u32> {
    text.strip_prefix(MAGIC)?
        .strip_prefix(MAXNREG)?
        .split_once('\n')?
        .0
        .parse()
        .ok()
}

/// The units of a linked image; `None` when `text` is not one (plain PTX), `Err` when
/// it is one but is cut or malformed.
pub fn decode<'a>(image_name: &str, text: &'a str) -> Option<Result<Vec<Unit<'a>>, ParseError>> {
    let mut rest = text.strip_prefix(MAGIC)?;
    if let Some(after) = rest.strip_prefix(MAXNREG) {
        rest = after.split_once('\n').map_or("", |(_, r)| r);
    }
    let mut units = vec![];
    let bad = |message: String| error(image_name, 1, "linked image", message);
    while !rest.is_empty() {
        let Some((header, after)) = rest.split_once('\n') else {
            return Some(Err(bad("a unit header without its text".into())));
        };
        let Some((len, name)) = header
            .strip_prefix("//unit ")
            .and_then(|h| h.split_once(' '))
            .and_then(|(len, name)| Some((len.parse::<usize>().ok()?, name)))
        else {
            return Some(Err(bad(format!("bad unit header {header:?}"))));
        };
        if len > after.len() || !after.is_char_boundary(len) {
            return Some(Err(bad(format!(
                "unit {name} claims {len} bytes, {} are left",
                after.len()
            ))));
        }
        units.push(Unit {
            name,
            text: &after[..len],
        });
        rest = &after[len..];
    }
    Some(Ok(units))
}

/// Parses `text` as a module: plain PTX, or a linked image whose units are parsed and
/// linked into one module by [`link`].
pub fn parse_any(name: &str, text: &str) -> Result<Module, ParseError> {
    match decode(name, text) {
        None => parse(name, text),
        Some(units) => {
            let units = units?;
            let modules = units
                .iter()
                .map(|u| parse(u.name, u.text))
                .collect::<Result<Vec<_>, _>>()?;
            let mut m = link(name, modules)?;
            if let Some(n) = max_registers(text) {
                for f in m.functions.iter_mut().filter(|f| f.is_entry) {
                    f.directives.push((".maxnreg".into(), vec![n]));
                }
            }
            Ok(m)
        }
    }
}

/// Links modules into one, as the driver's linker does for PTX: a function or variable
/// declared `.extern` in one unit is the definition another unit gives; a name defined
/// twice, or a declaration no unit defines (other than the calls the device runtime
/// answers, such as `vprintf`), is an error naming it and its unit. `.extern .shared`
/// arrays (dynamic shared memory) stay as they are.
pub fn link(name: &str, mut modules: Vec<Module>) -> Result<Module, ParseError> {
    let err = |module: &str, line: u32, message: String| error(module, line, "link", message);
    // libcudadevrt's unit (it defines the device runtime's calls over a GPU driver's
    // system calls) is left out: the consumer answers those calls.
    modules.retain(|m| {
        !m.functions
            .iter()
            .any(|f| f.body.is_some() && f.name.starts_with("__cudaCDP2"))
    });
    // A unit's own symbols (neither `.visible` nor `.extern`: NVVM's `$str` format
    // strings, `static` variables and functions) are renamed where another unit defines
    // the same name, so each unit keeps its own.
    let names: Vec<HashSet<String>> = modules.iter().map(defined_names).collect();
    for (k, m) in modules.iter_mut().enumerate() {
        let renames: HashMap<String, String> = own_names(m)
            .into_iter()
            .filter(|n| {
                names
                    .iter()
                    .enumerate()
                    .any(|(j, s)| j != k && s.contains(n))
            })
            .map(|n| {
                let to = format!("{n}$unit{k}");
                (n, to)
            })
            .collect();
        if !renames.is_empty() {
            rename(m, &renames);
        }
    }
    let mut out = Module::empty(name);
    // Where each name is defined: (unit, line).
    let mut defined: HashMap<String, (String, u32)> = HashMap::new();
    // Records the definition of `name` at `unit:line`; a second one is an error.
    let mut define = |name: &str, unit: &str, line: u32| match defined.get(name) {
        Some((first, first_line)) => Err(err(
            unit,
            line,
            format!("{name} is defined twice: here and at {first}:{first_line}"),
        )),
        None => {
            defined.insert(name.to_string(), (unit.to_string(), line));
            Ok(())
        }
    };
    // Declarations to resolve: extern variables (unit, line) and function prototypes.
    let mut extern_vars: Vec<(String, String, u32)> = vec![];
    let mut prototypes: Vec<(String, crate::Function)> = vec![];
    for m in modules {
        if m.address_size != 64 {
            return Err(err(&m.name, 1, "only 64-bit units link".into()));
        }
        out.version = out.version.max(m.version);
        if out.target.is_empty() {
            out.target = m.target.clone();
        }
        for v in m.variables {
            if v.is_extern {
                if v.space != Space::Shared {
                    extern_vars.push((v.name.clone(), m.name.clone(), v.line));
                } else if !out.variables.iter().any(|o| o.name == v.name) {
                    // A dynamic shared array, declared by one unit or several.
                    out.variables.push(v);
                }
                continue;
            }
            define(&v.name, &m.name, v.line)?;
            out.variables.push(v);
        }
        for f in m.functions {
            if f.body.is_none() {
                prototypes.push((m.name.clone(), f));
                continue;
            }
            define(&f.name, &m.name, f.line)?;
            out.functions.push(f);
        }
    }
    for (v, unit, line) in extern_vars {
        if !defined.contains_key(&v) {
            return Err(err(
                &unit,
                line,
                format!("unresolved extern variable {v}: no unit defines it"),
            ));
        }
    }
    // A prototype no unit defines is an error, but for the device runtime's calls,
    // which stay declared (once) for the loader.
    for (unit, f) in prototypes {
        if defined.contains_key(&f.name) {
            continue;
        }
        if !DEVICE_RUNTIME.contains(&f.name.as_str()) {
            // Other libcudadevrt entry points (events, waits, grid-wide sync), which only
            // a GPU's device runtime provides.
            let cdp = [
                "__cudaCDP",
                "cudaLaunchDevice",
                "cudaGetParameterBuffer",
                "cnp",
            ]
            .iter()
            .any(|p| f.name.starts_with(p));
            let why = if cdp {
                " (a call of CUDA's device runtime that the simulator does not answer: \
                 it answers kernels launching kernels, streams, copies, malloc/free and \
                 errors, not events, waits or grid-wide sync)"
            } else {
                ""
            };
            return Err(err(
                &unit,
                f.line,
                format!(
                    "unresolved extern function {}: no unit defines it{why}",
                    f.name
                ),
            ));
        }
        defined.insert(f.name.clone(), (String::new(), f.line));
        out.functions.push(f);
    }
    Ok(out)
}

/// The names `m` defines at module scope.
fn defined_names(m: &Module) -> HashSet<String> {
    m.variables
        .iter()
        .filter(|v| !v.is_extern)
        .map(|v| v.name.clone())
        .chain(
            m.functions
                .iter()
                .filter(|f| f.body.is_some())
                .map(|f| f.name.clone()),
        )
        .collect()
}

/// The names `m` defines that are its own (not linked outside it).
fn own_names(m: &Module) -> Vec<String> {
    m.variables
        .iter()
        .filter(|v| !v.linked && v.space != Space::Shared)
        .map(|v| v.name.clone())
        .chain(
            m.functions
                .iter()
                .filter(|f| !f.linked && f.body.is_some())
                .map(|f| f.name.clone()),
        )
        .collect()
}

/// Renames module-scope symbols of `m`, where defined and wherever used.
fn rename(m: &mut Module, to: &HashMap<String, String>) {
    let name = |n: &mut String| {
        if let Some(t) = to.get(n.as_str()) {
            *n = t.clone();
        }
    };
    fn operand(o: &mut Operand, name: &dyn Fn(&mut String)) {
        match o {
            Operand::Name(n) | Operand::NameOffset(n, _) => name(n),
            Operand::Address { base: Some(b), .. } => name(b),
            Operand::Texture { object, coords } => {
                name(object);
                coords.iter_mut().for_each(|o| operand(o, name));
            }
            Operand::Vector(v) | Operand::List(v) => v.iter_mut().for_each(|o| operand(o, name)),
            Operand::Not(o) => operand(o, name),
            _ => {}
        }
    }
    fn statements(body: &mut [Statement], name: &dyn Fn(&mut String)) {
        for s in body {
            match s {
                Statement::Inst(i) => i.operands.iter_mut().for_each(|o| operand(o, name)),
                Statement::Block(b) => statements(b, name),
                Statement::Decl(d) => d.init.iter_mut().for_each(|o| operand(o, name)),
                Statement::Label(..) | Statement::Prototype(_) => {}
            }
        }
    }
    for v in &mut m.variables {
        name(&mut v.name);
        v.init.iter_mut().for_each(|o| operand(o, &name));
    }
    for f in &mut m.functions {
        name(&mut f.name);
        if let Some(body) = &mut f.body {
            statements(body, &name);
        }
    }
}

/// A linked image's error: in `module` (a unit, or the image) at `line`.
fn error(module: &str, line: u32, construct: &str, message: String) -> ParseError {
    ParseError {
        module: module.to_string(),
        line,
        column: 1,
        construct: construct.into(),
        message,
        kind: ParseErrorKind::Syntax,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

    fn unit(body: &str) -> String {
        format!("{HEAD}{body}")
    }

    #[test]
    fn libcudadevrts_unit_is_left_to_the_consumer() {
        // A program launching a kernel from device code, and libcudadevrt's unit, which
        // defines the launch over a GPU driver's system call no unit defines.
        let program = unit(
            ".extern .func (.param .b32 r) __cudaCDP2LaunchDeviceV2(.param .b64 a, .param .b64 b);\n\
             .visible .entry k() { ret; }",
        );
        let devrt = unit(
            ".extern .func (.param .b32 r) cnpLaunchDeviceV(.param .b64 a);\n\
             .visible .func (.param .b32 r) __cudaCDP2LaunchDeviceV2(.param .b64 a, .param .b64 b) { ret; }",
        );
        let m = link(
            "img",
            vec![
                parse("a.ptx", &program).unwrap(),
                parse("devrt.ptx", &devrt).unwrap(),
            ],
        )
        .unwrap();
        let funcs: Vec<(&str, bool)> = m
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.body.is_some()))
            .collect();
        assert_eq!(funcs, [("k", true), ("__cudaCDP2LaunchDeviceV2", false)]);
    }

    #[test]
    fn each_unit_keeps_its_own_symbols_and_visible_ones_still_clash() {
        let a = unit(
            ".global .align 1 .b8 $str[3] = {97, 0, 0};\n\
             .func (.param .b32 r) own() { st.param.b32 [r], 1; ret; }\n\
             .visible .entry ka(.param .u64 p) { .reg .b64 %rd<2>; mov.u64 %rd1, $str; ret; }",
        );
        let b = unit(
            ".global .align 1 .b8 $str[3] = {98, 0, 0};\n\
             .func (.param .b32 r) own() { st.param.b32 [r], 2; ret; }\n\
             .visible .entry kb(.param .u64 p) { .reg .b64 %rd<2>; mov.u64 %rd1, $str; ret; }",
        );
        let m = link(
            "img",
            vec![parse("a.ptx", &a).unwrap(), parse("b.ptx", &b).unwrap()],
        )
        .unwrap();
        let vars: Vec<&str> = m.variables.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(vars, ["$str$unit0", "$str$unit1"]);
        let funcs: Vec<&str> = m.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(funcs, ["own$unit0", "ka", "own$unit1", "kb"]);
        // Each kernel reads its own unit's string.
        let kb = m.functions.iter().find(|f| f.name == "kb").unwrap();
        let text = format!("{:?}", kb.body);
        assert!(
            text.contains("$str$unit1") && !text.contains("$str$unit0"),
            "{text}"
        );
        // Two visible definitions of one name are still an error.
        let c = unit(".visible .global .u32 g;");
        let e = link(
            "img",
            vec![parse("c1.ptx", &c).unwrap(), parse("c2.ptx", &c).unwrap()],
        )
        .unwrap_err();
        assert!(e.message.contains("g is defined twice"), "{e}");
    }

    #[test]
    fn an_image_round_trips_and_plain_ptx_is_not_one() {
        let (a, b) = (unit(".visible .entry k() { ret; }"), unit("// b\n"));
        let image = encode([("a.ptx", a.as_str()), ("b\nc.ptx", b.as_str())]);
        let units = decode("img", &image).unwrap().unwrap();
        assert_eq!(
            units,
            [
                Unit {
                    name: "a.ptx",
                    text: &a
                },
                Unit {
                    name: "b_c.ptx",
                    text: &b
                }
            ]
        );
        assert!(decode("img", &a).is_none());
        let cut = &image[..image.len() - 3];
        let e = decode("img", cut).unwrap().unwrap_err();
        assert!(e.message.contains("claims"), "{e}");
        let e = decode("img", &format!("{MAGIC}//unit x y\n"))
            .unwrap()
            .unwrap_err();
        assert!(e.message.contains("bad unit header"), "{e}");
    }

    #[test]
    fn the_register_limit_reaches_every_kernel() {
        let k = unit(".visible .entry k() { ret; }\n.visible .entry j() { ret; }");
        let image = encode_with([("k.ptx", k.as_str())], Some(38));
        assert_eq!(max_registers(&image), Some(38));
        let m = parse_any("img", &image).unwrap();
        for f in &m.functions {
            assert!(
                f.directives.contains(&(".maxnreg".into(), vec![38])),
                "{}",
                f.name
            );
        }
        assert_eq!(decode("img", &image).unwrap().unwrap().len(), 1);
        assert_eq!(max_registers(&encode([("k.ptx", k.as_str())])), None);
    }

    #[test]
    fn externs_resolve_across_units_and_the_rest_is_named() {
        let main = unit(
            ".extern .func (.param .b32 r) f(.param .b32 x);\n.extern .global .u32 g;\n\
             .extern .func (.param .b32 r) vprintf(.param .b64 a, .param .b64 b);\n\
             .extern .shared .align 4 .b8 dyn[];\n.visible .entry k() { ret; }",
        );
        let lib = unit(
            ".visible .global .u32 g = 3;\n.extern .shared .align 4 .b8 dyn[];\n\
             .visible .func (.param .b32 r) f(.param .b32 x) { st.param.b32 [r], 1; ret; }",
        );
        let image = encode([("main.ptx", main.as_str()), ("lib.ptx", lib.as_str())]);
        let m = parse_any("img", &image).unwrap();
        let names: Vec<(&str, bool)> = m
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.body.is_some()))
            .collect();
        assert_eq!(names, [("k", true), ("f", true), ("vprintf", false)]);
        let vars: Vec<(&str, bool)> = m
            .variables
            .iter()
            .map(|v| (v.name.as_str(), v.is_extern))
            .collect();
        assert_eq!(vars, [("dyn", true), ("g", false)]);

        let alone = encode([("main.ptx", main.as_str())]);
        let e = parse_any("img", &alone).unwrap_err();
        assert_eq!(e.module, "main.ptx");
        assert!(e.message.contains("unresolved extern"), "{e}");
        let twice = encode([("lib.ptx", lib.as_str()), ("lib2.ptx", lib.as_str())]);
        let e = parse_any("img", &twice).unwrap_err();
        assert_eq!(e.module, "lib2.ptx");
        assert!(
            e.message.contains("defined twice: here and at lib.ptx:"),
            "{e}"
        );
    }
}
