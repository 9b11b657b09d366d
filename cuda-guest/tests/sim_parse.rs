//! Front-end tests: every PTX file of the corpus and of `tests/ptx` parses, entry
//! parameter lists are right, and syntax errors are positioned.

use cuda_guest::ptx::{self, Operand, ScalarType, Statement};
use std::path::PathBuf;

fn ptx_files() -> Vec<PathBuf> {
    let mut out = vec![];
    let dirs = [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ptx"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ptx"),
    ];
    for d in dirs {
        let rd = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "ptx") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_ptx_file_parses() {
    let files = ptx_files();
    assert!(files.len() >= 50, "only {} PTX files found", files.len());
    let mut failures = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        match ptx::parse(&name, &text) {
            Ok(m) => assert!(m.entries().count() > 0, "{name}: no entries"),
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn entry_params_of_basic_module() {
    for f in ["basic.clang.ptx", "basic.nvrtc.ptx"] {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/ptx")
            .join(f);
        let m = ptx::parse(f, &std::fs::read_to_string(p).unwrap()).unwrap();
        let names: Vec<_> = m.entries().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "vector_add",
                "saxpy",
                "reduce_sum",
                "matmul",
                "transpose_shared",
                "histogram_atomic"
            ]
        );
        let s = m.entry("saxpy").unwrap();
        let got: Vec<_> = s
            .params
            .iter()
            .map(|p| (p.ty, p.size, p.align, p.offset))
            .collect();
        assert_eq!(
            got,
            [
                (ScalarType::U32, 4, 4, 0),
                (ScalarType::F32, 4, 4, 4),
                (ScalarType::U64, 8, 8, 8),
                (ScalarType::U64, 8, 8, 16)
            ]
        );
        assert_eq!(s.params[0].name, "saxpy_param_0");
        let r = m.entry("reduce_sum").unwrap();
        let body = r.body.as_ref().unwrap();
        let shared = body.iter().find_map(|s| match s {
            Statement::Decl(d) if d.space == ptx::Space::Shared => Some(d),
            _ => None,
        });
        let shared = shared.unwrap();
        assert_eq!((shared.size(), shared.alignment()), (1024, 4));
    }
}

#[test]
fn param_arrays_alignment_and_offsets() {
    let src = ".version 8.0\n.target sm_80\n.address_size 64\n\
        .visible .entry k(.param .u8 a, .param .align 16 .b8 s[24], .param .f64 d, .param .u64 .ptr .global .align 4 p)\n{\n ret;\n}\n";
    let m = ptx::parse("t", src).unwrap();
    let k = m.entry("k").unwrap();
    let got: Vec<_> = k
        .params
        .iter()
        .map(|p| (p.size, p.align, p.offset, p.array))
        .collect();
    assert_eq!(
        got,
        [
            (1, 1, 0, None),
            (24, 16, 16, Some(24)),
            (8, 8, 40, None),
            (8, 4, 48, None)
        ]
    );
    assert_eq!(k.params[3].ptr_space, Some(ptx::Space::Global));
}

#[test]
fn operands_and_modifiers() {
    let src = ".version 7.0\n.target sm_80\n.address_size 64\n.entry k()\n{\n\
        .reg .f32 %f<5>;\n.reg .b64 %rd<3>;\n.reg .pred %p<2>;\n\
        @!%p1 ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1+-64];\n\
        mov.f32 %f1, 0f3F800000;\n mov.b64 %rd2, -5;\n ret;\n}\n";
    let m = ptx::parse("t", src).unwrap();
    let body = m.entry("k").unwrap().body.clone().unwrap();
    let insts: Vec<_> = body
        .iter()
        .filter_map(|s| match s {
            Statement::Inst(i) => Some(i),
            _ => None,
        })
        .collect();
    assert_eq!(insts[0].opcode, "ld");
    assert_eq!(insts[0].modifiers, ["global", "v4", "f32"]);
    assert!(insts[0].guard.as_ref().unwrap().negated);
    assert_eq!(insts[0].line, 9);
    assert_eq!(
        insts[0].operands[1],
        Operand::Address {
            base: Some("%rd1".into()),
            offset: -64
        }
    );
    assert_eq!(insts[1].operands[1], Operand::F32(0x3F80_0000));
    assert_eq!(insts[2].operands[1], Operand::Int(-5));
}

#[test]
fn errors_name_module_line_column_and_construct() {
    let src = ".version 7.0\n.target sm_80\n.address_size 64\n.entry k(.param .u32 n)\n{\n\
        .reg .b32 %r<3>;\n  add.s32 %r1, %r2 %r2;\n ret;\n}\n";
    let e = ptx::parse("m.ptx", src).unwrap_err();
    assert_eq!((e.module.as_str(), e.line, e.column), ("m.ptx", 7, 20));
    assert_eq!(e.construct, "instruction `add.s32`");
    assert_eq!(
        e.to_string(),
        "m.ptx:7:20: error in instruction `add.s32`: expected `,` or `;`, found `%r2`"
    );

    let e = ptx::parse(
        "m.ptx",
        ".version 7.0\n.entry k(.param .u32 n,\n .param x)\n{ ret; }",
    )
    .unwrap_err();
    assert_eq!((e.line, e.column), (3, 9));
    assert_eq!(e.construct, "parameter list of .entry k");

    let e = ptx::parse(
        "m.ptx",
        ".version 7.0\n.entry k()\n{\n  mov.u32 %r1, 0f3F80;\n}",
    )
    .unwrap_err();
    assert_eq!(e.line, 4);
    let e = ptx::parse("m.ptx", ".version 7.0\n.entry k()\n{\n  ret;\n").unwrap_err();
    assert!(e.message.contains("unclosed"), "{e}");
}

#[test]
fn garbage_never_panics() {
    let samples = [
        "",
        "{",
        "}",
        ".entry",
        ".entry (",
        ".entry k(",
        ".entry k( .param",
        "@",
        "[[[[",
        ".version 99.0",
        ".entry k() { @ }",
        ".entry k() { add.; }",
        "0f",
        "0d12",
        "0x",
        "\"",
        "/*",
        ".reg .b32 %r<>;",
        ".entry k() { ld [%r+]; }",
        "\u{1F600}",
        "-",
        ".global .u32 x = {1,{2,",
    ];
    for s in samples {
        let _ = ptx::parse("g", s);
    }
}
