//! Which relocatable PTX units a `-rdc=true` program needs: the units that define its
//! registered kernels and variables, and, transitively, the units that define what those
//! declare `.extern`. A unit that declares what no unit defines (libcudadevrt's, whose
//! externs only the device runtime of a GPU provides) cannot be linked and is left out,
//! with what needs it; its kernels then fail to launch, named.

use std::collections::BTreeSet;

/// The identifier that starts `s` (after spaces).
fn ident(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The function or kernel name a `.func`/`.entry` line declares (after an optional
/// return parameter list).
fn callee(line: &str) -> Option<&str> {
    let at = line
        .find(".entry")
        .map(|i| i + 6)
        .or_else(|| line.find(".func").map(|i| i + 5))?;
    let mut rest = line[at..].trim_start();
    if rest.starts_with('(') {
        rest = &rest[rest.find(')')? + 1..];
    }
    ident(rest)
}

/// The variable name a `.global`/`.const` declaration line names: the last identifier
/// before `[`, `=` or `;`.
fn variable(line: &str) -> Option<&str> {
    let end = line.find(['[', '=', ';'])?;
    line[..end].split_whitespace().last()
}

/// What one unit defines and what it declares `.extern`.
#[derive(Debug, Default)]
struct Unit {
    defines: BTreeSet<String>,
    externs: BTreeSet<String>,
}

fn scan(ptx: &str) -> Unit {
    let mut u = Unit::default();
    for line in ptx.lines() {
        let line = line.trim();
        let is_fn = line.contains(".entry") || line.contains(".func");
        let is_var = !is_fn
            && (line.starts_with(".visible")
                || line.starts_with(".global")
                || line.starts_with(".const")
                || line.starts_with(".extern"))
            && (line.contains(".global") || line.contains(".const"));
        let name = if is_fn {
            callee(line)
        } else if is_var {
            variable(line)
        } else {
            None
        };
        let Some(name) = name else { continue };
        if line.starts_with(".extern") {
            u.externs.insert(name.to_string());
        } else if line.starts_with(".visible")
            || line.starts_with(".entry")
            || line.starts_with(".func")
            || line.starts_with(".weak")
            || is_var
        {
            u.defines.insert(name.to_string());
        }
    }
    // What the unit defines itself, and the calls the device runtime answers, need no
    // other unit.
    u.externs.retain(|e| {
        !u.defines.contains(e) && !vmgpu_ptx::linked::DEVICE_RUNTIME.contains(&e.as_str())
    });
    u
}

/// The indices of `units` to link for `roots` (registered kernel and variable names):
/// those defining a root, and those defining what the chosen ones declare `.extern`. All
/// of them when no unit defines a root (nothing to choose by).
pub fn needed(units: &[&str], roots: &[&str]) -> Vec<usize> {
    let scanned: Vec<Unit> = units.iter().map(|p| scan(p)).collect();
    // Units that can be linked: every extern of theirs is defined by a unit that can.
    let mut linkable: BTreeSet<usize> = (0..units.len()).collect();
    loop {
        let defined: BTreeSet<&String> =
            linkable.iter().flat_map(|&i| &scanned[i].defines).collect();
        let before = linkable.len();
        linkable.retain(|&i| scanned[i].externs.iter().all(|e| defined.contains(e)));
        if linkable.len() == before {
            break;
        }
    }
    let mut chosen: BTreeSet<usize> = linkable
        .iter()
        .copied()
        .filter(|&i| roots.iter().any(|r| scanned[i].defines.contains(*r)))
        .collect();
    if chosen.is_empty() {
        return (0..units.len()).collect();
    }
    loop {
        let wanted: BTreeSet<&String> = chosen.iter().flat_map(|&i| &scanned[i].externs).collect();
        let more: Vec<usize> = linkable
            .iter()
            .copied()
            .filter(|i| {
                !chosen.contains(i) && wanted.iter().any(|w| scanned[*i].defines.contains(*w))
            })
            .collect();
        if more.is_empty() {
            return chosen.into_iter().collect();
        }
        chosen.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\
        .extern .func (.param .b32 func_retval0) helper\n(\n.param .b32 x\n);\n\
        .visible .global .align 4 .u32 counter;\n\
        .visible .entry kern(\n.param .u64 p\n)\n{\nret;\n}\n";
    const HELPER: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\
        .visible .func (.param .b32 func_retval0) helper(\n.param .b32 x\n)\n{\nret;\n}\n";
    const DEVRT: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\
        .extern .func (.param .b32 func_retval0) cnpSetLastError\n(\n.param .b32 e\n);\n\
        .visible .entry __devrt_internal(\n)\n{\nret;\n}\n";

    #[test]
    fn the_kernels_unit_and_what_it_needs_but_not_the_device_runtime() {
        assert_eq!(needed(&[MAIN, DEVRT, HELPER], &["kern"]), vec![0, 2]);
        // The device runtime's kernels are registered too; its unit cannot link.
        assert_eq!(
            needed(&[MAIN, DEVRT, HELPER], &["kern", "__devrt_internal"]),
            vec![0, 2]
        );
        assert_eq!(needed(&[DEVRT, MAIN, HELPER], &["counter"]), vec![1, 2]);
        // Nothing to choose by: everything.
        assert_eq!(needed(&[MAIN, DEVRT], &["other"]), vec![0, 1]);
    }

    #[test]
    fn names_are_read_from_declarations() {
        let u = scan(MAIN);
        assert!(
            u.defines.contains("kern") && u.defines.contains("counter"),
            "{u:?}"
        );
        assert_eq!(u.externs.iter().collect::<Vec<_>>(), ["helper"]);
    }
}
