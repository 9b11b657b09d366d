//! Deep nesting up to the module quota never overflows a guest thread's stack: a few
//! input bytes choose a construct to nest (`{ }` blocks, an operand's `( )`, `{ }` or
//! `!`, initializer braces, parentheses inside blocks at the limit, `.func` call chains
//! and fan-outs),
//! how deep (from 0 to as deep as fits in 16 MiB, spread on a log scale), how the
//! nesting is laid out (one level a line or all on one line, closed or left open) and
//! text for the innermost point; the module is parsed and loaded on the simulator on a
//! thread with a 2 MiB stack, the service's guest thread default. Nesting past
//! `MAX_NESTING` must be refused by the parser with a positioned error.
#![no_main]

use cuda_guest::ptx::{self, MAX_NESTING};
use cuda_guest::sim::{SimConfig, Simulator};
use libfuzzer_sys::fuzz_target;

/// The service's default module quota.
const QUOTA: usize = 16 << 20;
const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

/// How a construct nests: text before, one level's opening and closing, text after.
/// The parser bounds each of them (call chains are bounded by the decoder).
struct Shape {
    prefix: String,
    open: String,
    close: String,
    suffix: String,
}

fn shape(kind: u8, sep: &str) -> Shape {
    let body = format!(
        "{HEADER}.visible .entry k()\n{{\n.reg .b32 %r<3>; .reg .b64 %rd<2>; .reg .pred %p<3>;\n"
    );
    let s = |prefix: String, open: &str, close: &str, suffix: &str| Shape {
        prefix,
        open: format!("{open}{sep}"),
        close: format!("{close}{sep}"),
        suffix: suffix.to_string(),
    };
    match kind % 6 {
        0 => s(body, "{", "}", "ret;\n}\n"),
        1 => s(format!("{body}mov.u32 %r1, "), "(", ")", ";\nret;\n}\n"),
        2 => s(format!("{body}mov.b64 %rd1, "), "{", "}", ";\nret;\n}\n"),
        3 => s(
            format!("{body}and.pred %p1, "),
            "!",
            "",
            ", %p2;\nret;\n}\n",
        ),
        4 => s(
            format!("{HEADER}.global .u32 a[4] = "),
            "{",
            "}",
            ";\n.visible .entry k() { ret; }\n",
        ),
        // Parentheses inside blocks nested as deep as allowed.
        _ => {
            let depth = MAX_NESTING as usize;
            s(
                format!("{body}{}mov.u32 %r1, ", format!("{{{sep}").repeat(depth)),
                "(",
                ")",
                &format!(";\n{}ret;\n}}\n", format!("}}{sep}").repeat(depth)),
            )
        }
    }
}

/// `count` functions, each calling the next `fanout` times; the kernel calls `f0`.
fn call_chain(count: usize, fanout: usize, ret: bool, inner: &str) -> String {
    let mut s = format!("{HEADER}.visible .entry k() {{ call f0; ret; }}\n");
    let mut i = 0;
    while i < count && s.len() < QUOTA {
        s.push_str(&format!(".func f{i}() {{ {inner}"));
        if i + 1 < count {
            for _ in 0..fanout {
                s.push_str(&format!("call f{}; ", i + 1));
            }
        }
        s.push_str(if ret { "ret; }\n" } else { "}\n" });
        i += 1;
    }
    s
}

/// A depth on a log scale: 2^e plus a fraction of it, e from 0 to 24.
fn depth(e: u8, m: u8) -> usize {
    let e = u32::from(e % 25);
    (1usize << e) + ((usize::from(m) << e) >> 8)
}

fn build(data: &[u8]) -> Option<(String, Option<usize>)> {
    let [kind, e, m, layout, rest @ ..] = data else {
        return None;
    };
    let inner = std::str::from_utf8(rest).ok()?;
    let n = depth(*e, *m);
    if kind % 8 >= 6 {
        // Call chains: fan-out 1 to 8, bodies empty or ending in `ret`.
        let fanout = usize::from(layout % 8) + 1;
        let count = n.min(1 << 20);
        return Some((call_chain(count, fanout, layout & 8 != 0, inner), None));
    }
    let sep = if layout & 1 != 0 { "\n" } else { "" };
    let sh = shape(*kind, sep);
    let closed = layout & 2 == 0;
    let per_level = sh.open.len() + if closed { sh.close.len() } else { 0 };
    let fixed = sh.prefix.len() + inner.len() + sh.suffix.len();
    let n = n.min(QUOTA.saturating_sub(fixed) / per_level);
    let mut s = String::with_capacity(fixed + n * per_level);
    s.push_str(&sh.prefix);
    for _ in 0..n {
        s.push_str(&sh.open);
    }
    s.push_str(inner);
    if closed {
        for _ in 0..n {
            s.push_str(&sh.close);
        }
    }
    s.push_str(&sh.suffix);
    Some((s, Some(n)))
}

fuzz_target!(|data: &[u8]| {
    let Some((text, nested)) = build(data) else {
        return;
    };
    assert!(text.len() <= QUOTA + 64);
    let done = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let parsed = ptx::parse("fuzz.ptx", &text);
            match &parsed {
                Err(e) => assert!(e.line >= 1 && e.column >= 1, "{e}"),
                Ok(_) => {
                    // Nesting past the limit never parses.
                    if let Some(n) = nested {
                        assert!(n <= MAX_NESTING as usize, "{n} levels parsed");
                    }
                }
            }
            if let Some(n) = nested {
                if n > MAX_NESTING as usize {
                    let e = parsed.as_ref().unwrap_err();
                    assert!(e.message.contains("nested deeper than"), "{e}");
                }
            }
            if parsed.is_ok() {
                let mut s = Simulator::new(SimConfig {
                    threads: 1,
                    memory_limit: 1 << 20,
                    ..SimConfig::default()
                });
                if let Err(e) = s.load_module("fuzz.ptx", &text) {
                    let _ = e.to_string();
                }
            }
        })
        .expect("a thread")
        .join();
    if let Err(p) = done {
        std::panic::resume_unwind(p);
    }
});
