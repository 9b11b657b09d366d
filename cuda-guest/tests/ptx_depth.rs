//! Deeply nested PTX (issue 12): `{ }` blocks, operands in `( )`/`{ }`/`!`, initializer
//! braces and `.func` call chains, from the attacker's sizes up to the module quota
//! (16 MiB), give a positioned `CUDA_ERROR_INVALID_PTX` instead of overflowing the
//! stack of the thread that loads them. Every parse and load runs on a thread with a
//! 2 MiB stack, the default of the service's guest threads: before the nesting limit
//! these tests aborted the whole test binary (`has overflowed its stack`).
//! Nesting at the limit still parses, loads and runs. Also bounded here: what long
//! names and inlined calls (chains, fan-outs, callees of many labels or blocks) cost
//! the parser and the simulator's decoder in time and memory.

#[cfg(feature = "service")]
mod service_support;

use cuda_guest::driver::{Backend, Device, DriverError, SimBackend};
use cuda_guest::ptx::{self, MAX_NESTING};
use cuda_guest::sim::{KernelArg, LaunchConfig, SimConfig, Simulator};

/// The default module quota of the service (`Limits::max_module`).
const QUOTA: usize = 16 << 20;
/// The stack of a service guest thread (Rust's default for spawned threads).
const STACK: usize = 2 << 20;
const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";
const NAME: &str = "guest.ptx";

/// Runs `f` on a thread with a 2 MiB stack.
fn on_guest_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .name("ptx-depth".into())
        .stack_size(STACK)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

/// `prefix`, `open` n times, `middle`, `close` n times, `suffix`, with n as large as
/// fits in `size` bytes, padded with spaces to exactly `size`.
fn fill(prefix: &str, open: &str, middle: &str, close: &str, suffix: &str, size: usize) -> String {
    let fixed = prefix.len() + middle.len() + suffix.len();
    let n = (size - fixed) / (open.len() + close.len());
    nest(prefix, open, middle, close, suffix, n, size)
}

/// `prefix`, `open` n times, `middle`, `close` n times, `suffix`, padded with spaces to
/// `size` bytes (or not at all when `size` is 0).
fn nest(
    prefix: &str,
    open: &str,
    middle: &str,
    close: &str,
    suffix: &str,
    n: usize,
    size: usize,
) -> String {
    let mut s = String::with_capacity(size.max(prefix.len() + n * (open.len() + close.len())));
    s.push_str(prefix);
    for _ in 0..n {
        s.push_str(open);
    }
    s.push_str(middle);
    for _ in 0..n {
        s.push_str(close);
    }
    s.push_str(suffix);
    while s.len() < size {
        s.push(' ');
    }
    s
}

/// A kernel whose body's `{` opens line 5, holding `n` nested blocks (0: as many as
/// fill `size`), each brace followed by `sep`: `""` puts the i-th nested `{` on line 5
/// at column 1 + i (the attacker's form), `"\n"` on line 5 + i.
fn blocks(n: usize, sep: &str, size: usize) -> String {
    let prefix = format!("{HEADER}.visible .entry k()\n{{{sep}");
    let (open, close) = (format!("{{{sep}"), format!("}}{sep}"));
    if n == 0 {
        fill(&prefix, &open, "ret;\n", &close, "}\n", size)
    } else {
        nest(&prefix, &open, "ret;\n", &close, "}\n", n, 0)
    }
}

/// Where [`blocks`] with `sep` opens its first block one level too deep.
fn too_deep_block(sep: &str) -> (u32, u32) {
    if sep.is_empty() {
        (5, 2 + MAX_NESTING)
    } else {
        (6 + MAX_NESTING, 1)
    }
}

/// A kernel whose line 7 is `OP` followed by `n` nested `open`s around `inner`.
fn operand(op: &str, regs: &str, open: &str, inner: &str, close: &str, n: usize) -> String {
    let prefix = format!("{HEADER}.visible .entry k()\n{{\n{regs}\n{op}");
    let suffix = ";\nret;\n}\n";
    if n == 0 {
        fill(&prefix, open, inner, close, suffix, QUOTA)
    } else {
        nest(&prefix, open, inner, close, suffix, n, 0)
    }
}

const PAREN_OP: &str = "    mov.u32 %r1, ";
const VEC_OP: &str = "    mov.b64 %rd1, ";
const NOT_OP: &str = "    and.pred %p1, ";
const REGS: &str = ".reg .b32 %r<3>; .reg .b64 %rd<2>; .reg .pred %p<3>;";

/// `n` nested parentheses (0: as many as fill the quota); the first `(` is at column 18.
fn parens(n: usize) -> String {
    operand(PAREN_OP, REGS, "(", "%r2", ")", n)
}

/// `n` nested vector braces (0: as many as fill the quota); the first at column 19.
fn vectors(n: usize) -> String {
    operand(VEC_OP, REGS, "{", "%r2", "}", n)
}

/// `n` negations of a predicate (0: as many as fill the quota); the first at column 19.
fn negations(n: usize) -> String {
    operand(NOT_OP, REGS, "!", "%p2", "", n)
}

/// A module-scope array whose initializer is nested `n` braces deep on line 4 (0: as
/// many as fill the quota); the first `{` at column 21.
fn initializer(n: usize) -> String {
    let prefix = format!("{HEADER}.global .u32 a[2] = ");
    let suffix = ";\n.visible .entry k()\n{\nret;\n}\n";
    if n == 0 {
        fill(&prefix, "{", "1, 2", "}", suffix, QUOTA)
    } else {
        nest(&prefix, "{", "1, 2", "}", suffix, n, 0)
    }
}

/// The positioned parse error of `text`, parsed on a 2 MiB stack.
fn parse_error(text: String) -> ptx::ParseError {
    on_guest_stack(move || ptx::parse(NAME, &text).map(|_| ())).unwrap_err()
}

/// The error of loading `text` on the simulator backend (through the `Backend` trait,
/// as the service does), on a 2 MiB stack.
fn sim_load_error(text: String) -> DriverError {
    on_guest_stack(move || {
        let sim = SimBackend::new(SimConfig::default()).unwrap();
        let backend: &dyn Backend = &sim;
        let ctx = backend.primary_context_retain(Device::new(0)).unwrap();
        backend.context_set_current(&ctx).unwrap();
        backend.module_load_ptx_named(NAME, &text).map(|_| ())
    })
    .unwrap_err()
}

/// `text` is refused by the parser with `message` at `line:col`, and by the simulator
/// backend with `CUDA_ERROR_INVALID_PTX` and the same error as its JIT log.
fn assert_refused(text: String, line: u32, col: u32, construct: &str, message: &str) {
    let want = format!("{NAME}:{line}:{col}: error in {construct}: {message}");
    let e = parse_error(text.clone());
    assert_eq!((e.line, e.column), (line, col), "{e}");
    assert_eq!(e.to_string(), want);
    let e = sim_load_error(text);
    assert_eq!(e.code(), Some(218), "{e}");
    assert_eq!(e.cuda_name(), Some("CUDA_ERROR_INVALID_PTX"));
    let log = e
        .as_cuda()
        .and_then(|c| c.jit_log.clone())
        .unwrap_or_default();
    assert!(log.contains(&want), "{log}");
}

fn blocks_message() -> String {
    format!("blocks nested deeper than {MAX_NESTING}")
}

fn operand_message() -> String {
    format!("operand nested deeper than {MAX_NESTING} (`(`, `{{` or `!`)")
}

fn init_message() -> String {
    format!("initializer braces nested deeper than {MAX_NESTING}")
}

#[test]
fn the_attackers_2500_nested_blocks_are_refused_at_the_column() {
    let text = blocks(2_500, "", 0);
    assert!(text.len() < 5_100, "{}", text.len());
    let (line, col) = too_deep_block("");
    assert_refused(text, line, col, "body of k", &blocks_message());
    // One brace a line.
    let (line, col) = too_deep_block("\n");
    let text = blocks(2_500, "\n", 0);
    assert_refused(text, line, col, "body of k", &blocks_message());
}

#[test]
fn nested_blocks_filling_the_module_quota_are_refused() {
    for sep in ["", "\n"] {
        let text = blocks(0, sep, QUOTA);
        assert_eq!(text.len(), QUOTA);
        let (line, col) = too_deep_block(sep);
        assert_refused(text, line, col, "body of k", &blocks_message());
    }
}

#[test]
fn the_attackers_10000_nested_parentheses_are_refused_at_the_column() {
    let text = parens(10_000);
    assert!(text.len() > 20_000);
    let col = 18 + MAX_NESTING;
    assert_refused(text, 7, col, "instruction `mov.u32`", &operand_message());
}

#[test]
fn nested_parentheses_filling_the_module_quota_are_refused() {
    let text = parens(0);
    assert_eq!(text.len(), QUOTA);
    let col = 18 + MAX_NESTING;
    assert_refused(text, 7, col, "instruction `mov.u32`", &operand_message());
}

#[test]
fn nested_vector_braces_filling_the_module_quota_are_refused() {
    assert_refused(
        vectors(10_000),
        7,
        19 + MAX_NESTING,
        "instruction `mov.b64`",
        &operand_message(),
    );
    let text = vectors(0);
    assert_eq!(text.len(), QUOTA);
    assert_refused(
        text,
        7,
        19 + MAX_NESTING,
        "instruction `mov.b64`",
        &operand_message(),
    );
}

#[test]
fn negations_filling_the_module_quota_are_refused() {
    let text = negations(0);
    assert_eq!(text.len(), QUOTA);
    assert_refused(
        text,
        7,
        19 + MAX_NESTING,
        "instruction `and.pred`",
        &operand_message(),
    );
}

#[test]
fn deep_initializers_are_refused_up_to_the_module_quota() {
    let construct = ".global declaration";
    let col = 21 + MAX_NESTING;
    assert_refused(initializer(2_500), 4, col, construct, &init_message());
    let text = initializer(0);
    assert_eq!(text.len(), QUOTA);
    assert_refused(text, 4, col, construct, &init_message());
}

#[test]
fn one_level_past_the_limit_is_refused() {
    let n = MAX_NESTING as usize + 1;
    let (line, col) = too_deep_block("\n");
    assert_refused(
        blocks(n, "\n", 0),
        line,
        col,
        "body of k",
        &blocks_message(),
    );
    let col = 18 + MAX_NESTING;
    assert_refused(
        parens(n),
        7,
        col,
        "instruction `mov.u32`",
        &operand_message(),
    );
    let e = parse_error(initializer(n));
    assert_eq!((e.line, e.column), (4, 21 + MAX_NESTING), "{e}");
}

#[test]
fn initializers_are_flattened_in_order_as_before() {
    use ptx::Operand::Int;
    let values = |init: &str| {
        let text = format!("{HEADER}.global .u32 a[8] = {init};\n");
        ptx::parse(NAME, &text).map(|m| m.variables[0].init.clone())
    };
    assert_eq!(values("{}").unwrap(), []);
    assert_eq!(values("{1}").unwrap(), [Int(1)]);
    assert_eq!(
        values("{{1, 2}, {3, 4}}").unwrap(),
        [Int(1), Int(2), Int(3), Int(4)]
    );
    assert_eq!(
        values("{1, {}, {{2}}, -3}").unwrap(),
        [Int(1), Int(2), Int(-3)]
    );
    assert_eq!(values("5").unwrap(), [Int(5)]);
    for bad in ["{1,}", "{1 2}", "{,}", "{{1}", "{1}}", "{1, {2,}}"] {
        let e = values(bad).unwrap_err();
        assert_eq!(e.line, 4, "{bad}: {e}");
    }
}

/// `count` functions `f0..`, each calling the next `fanout` times (the last calls
/// nothing), f_i on line 5 + i; the kernel calls `f0` on line 4. With `ret`, each
/// function ends in `ret;` (an instruction each time it is inlined), else it is empty.
fn call_chain(count: usize, fanout: usize, ret: bool) -> String {
    let mut s = format!("{HEADER}.visible .entry k() {{ call f0; ret; }}\n");
    for i in 0..count {
        s.push_str(&format!(".func f{i}() {{ "));
        if i + 1 < count {
            for _ in 0..fanout {
                s.push_str(&format!("call f{}; ", i + 1));
            }
        }
        s.push_str(if ret { "ret; }\n" } else { "}\n" });
    }
    s
}

#[test]
fn a_chain_of_5000_calls_is_refused_at_the_17th() {
    let text = call_chain(5_000, 1, true);
    // Syntactically fine: the simulator refuses it when it inlines the calls.
    let t = text.clone();
    on_guest_stack(move || ptx::parse(NAME, &t).map(|m| m.functions.len())).unwrap();
    let e = sim_load_error(text);
    assert_eq!(e.code(), Some(218), "{e}");
    let log = e
        .as_cuda()
        .and_then(|c| c.jit_log.clone())
        .unwrap_or_default();
    // The kernel's call is depth 0; f15 (line 20) makes the 17th call.
    assert!(
        log.contains(&format!("{NAME}:20: error: call depth over 16")),
        "{log}"
    );
}

#[test]
fn calls_fanning_out_exponentially_are_refused_quickly() {
    // Without a bound on the calls inlined, 4^15 calls of empty functions: they add
    // no instruction, so no instruction limit is reached, but the decoding never ends
    // (and its labels fill memory).
    let t = std::time::Instant::now();
    let e = sim_load_error(call_chain(16, 4, false));
    assert_eq!(e.code(), Some(218), "{e}");
    let log = e
        .as_cuda()
        .and_then(|c| c.jit_log.clone())
        .unwrap_or_default();
    assert!(
        log.contains("error: kernel too large after inlining calls (over 65536 calls)"),
        "{log}"
    );
    assert!(t.elapsed().as_secs() < 60, "{:?}", t.elapsed());
}

#[test]
fn calls_find_their_callee_without_scanning_the_module() {
    // 100,000 functions before the fan-out's: 65,536 calls each scanning them took a
    // minute in a debug build (and 16 MiB of functions could take far longer); a
    // lookup by name takes no time.
    let mut text = String::from(HEADER);
    for i in 0..100_000 {
        text.push_str(&format!(".func g{i}() {{ }}\n"));
    }
    let lines = 100_000;
    text.push_str(&call_chain(16, 4, false)[HEADER.len()..]);
    let t = std::time::Instant::now();
    let e = sim_load_error(text);
    let log = e
        .as_cuda()
        .and_then(|c| c.jit_log.clone())
        .unwrap_or_default();
    assert!(log.contains("(over 65536 calls)"), "{log}");
    // The refused call is in one of f0..f14, after the 100,000 lines of g*.
    let line: u32 = log
        .split(':')
        .nth(2)
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    assert!((lines + 4..lines + 20).contains(&line), "{log}");
    // Under a second in a debug build; scanning took about a minute.
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

/// A fan-out of 16 functions (4 calls each) whose leaf holds `leaf`.
fn fan_out_to(leaf: &str) -> String {
    let mut s = format!("{HEADER}.visible .entry k() {{ call f0; ret; }}\n");
    for i in 0..15 {
        s.push_str(&format!(".func f{i}() {{ "));
        for _ in 0..4 {
            s.push_str(&format!("call f{}; ", i + 1));
        }
        s.push_str("}\n");
    }
    s.push_str(&format!(".func f15() {{ {leaf} }}\n"));
    s
}

#[test]
fn inlining_callees_of_many_labels_or_blocks_is_bounded_in_time_and_memory() {
    // Labels and blocks are no instructions: 1,000 labels inlined 49,152 times took
    // 100 s and 5 GB (a 7 KB module, debug build); 20,000 would have needed 100 GB.
    let labels: String = (0..20_000).map(|j| format!("L{j}: ")).collect();
    let blocks = "{}".repeat(20_000);
    // The label past the bound is in f15 (line 20); the call past the weight's bound
    // is in f14 (line 19).
    for (leaf, line, bound) in [
        (labels, 20, "(over 1048576 labels)"),
        (blocks, 19, "(decoding it would cost over 67108864 units"),
    ] {
        let t = std::time::Instant::now();
        let e = sim_load_error(fan_out_to(&leaf));
        assert_eq!(e.code(), Some(218), "{e}");
        let log = e
            .as_cuda()
            .and_then(|c| c.jit_log.clone())
            .unwrap_or_default();
        assert!(
            log.contains(&format!(
                "{NAME}:{line}: error: kernel too large after inlining calls {bound}"
            )),
            "{log}"
        );
        assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    }
}

#[test]
fn a_register_range_with_a_long_name_is_refused_before_its_names_are_made() {
    // 60,000 registers named by a 1 MiB prefix: 60 GB of names.
    let name = format!("%{}", "r".repeat(1 << 20));
    let text = format!("{HEADER}.visible .entry k()\n{{\n.reg .b32 {name}<60000>;\nret;\n}}\n");
    let e = sim_load_error(text);
    assert_eq!(e.code(), Some(218), "{e}");
    let log = e
        .as_cuda()
        .and_then(|c| c.jit_log.clone())
        .unwrap_or_default();
    assert!(
        log.contains(&format!("{NAME}:4: error: kernel too large")),
        "{log}"
    );
    // A register range as compilers write it is fine.
    let ok = format!(
        "{HEADER}.visible .entry k()\n{{\n.reg .b32 %r<60000>;\nmov.u32 %r59999, 1;\nret;\n}}\n"
    );
    on_guest_stack(move || {
        let sim = SimBackend::new(SimConfig::default()).unwrap();
        let backend: &dyn Backend = &sim;
        let ctx = backend.primary_context_retain(Device::new(0)).unwrap();
        backend.context_set_current(&ctx).unwrap();
        backend.module_load_ptx_named(NAME, &ok).map(|_| ())
    })
    .unwrap();
}

#[test]
fn a_long_function_name_is_not_copied_for_every_statement() {
    // The parser named the construct `body of NAME` anew for each statement: a 12 MiB
    // name and 200,000 statements were 2.4 TB of copying. Now it parses in a moment.
    let statements = "ret; ; { .reg .b32 %r; }\n".repeat(200_000);
    let prefix = format!("{HEADER}.visible .entry ");
    let suffix = format!("()\n{{\n{statements}}}\n");
    let name = "k".repeat(QUOTA - prefix.len() - suffix.len());
    let text = format!("{prefix}{name}{suffix}");
    assert_eq!(text.len(), QUOTA);
    let t = std::time::Instant::now();
    let n = on_guest_stack(move || ptx::parse(NAME, &text).map(|m| m.functions.len()));
    assert_eq!(n, Ok(1));
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

/// A kernel using nesting at every limit at once: the kernel and 15 functions each put
/// their work in 64 nested blocks and call the next from the innermost one (16 calls
/// deep, the most inlined), a predicate under 64 `!`, an initializer 64 braces deep.
fn at_the_limit() -> String {
    let depth = MAX_NESTING as usize;
    let open = "{\n".repeat(depth);
    let close = "}\n".repeat(depth);
    let init = format!("{}5, 6{}", "{".repeat(depth), "}".repeat(depth));
    let nots = "!".repeat(depth);
    let odd_nots = "!".repeat(depth - 1);
    let mut s = format!(
        "{HEADER}.global .u32 counter;\n.global .u32 arr[2] = {init};\n\
         .visible .entry k(.param .u64 out)\n{{\n{open}\
         .reg .b32 %r<4>; .reg .b64 %rd<3>; .reg .pred %p<4>;\n\
         call f0;\n\
         ld.param.u64 %rd1, [out];\n\
         ld.global.u32 %r1, [counter];\n\
         st.global.u32 [%rd1], %r1;\n\
         setp.eq.u32 %p1, %r1, 16;\n\
         and.pred %p2, {nots}%p1, %p1;\n\
         and.pred %p3, {odd_nots}%p1, %p1;\n\
         selp.u32 %r2, 1, 0, %p2;\n\
         st.global.u32 [%rd1+4], %r2;\n\
         selp.u32 %r2, 1, 0, %p3;\n\
         st.global.u32 [%rd1+8], %r2;\n\
         ld.global.u32 %r3, [arr+4];\n\
         st.global.u32 [%rd1+12], %r3;\n\
         {close}ret;\n}}\n"
    );
    for i in 0..16 {
        s.push_str(&format!(
            ".func f{i}()\n{{\n{open}.reg .b32 %r<2>;\n\
             ld.global.u32 %r1, [counter];\n\
             add.u32 %r1, %r1, 1;\n\
             st.global.u32 [counter], %r1;\n"
        ));
        if i < 15 {
            s.push_str(&format!("call f{};\n", i + 1));
        }
        s.push_str(&format!("{close}ret;\n}}\n"));
    }
    s
}

#[test]
fn nesting_at_every_limit_parses_loads_and_runs() {
    let text = at_the_limit();
    let out = on_guest_stack(move || {
        let m = ptx::parse(NAME, &text).unwrap();
        // Parentheses and vector braces at the limit parse too.
        let depth = MAX_NESTING as usize;
        ptx::parse(NAME, &parens(depth)).unwrap();
        ptx::parse(NAME, &vectors(depth)).unwrap();
        assert_eq!(m.variables[1].init.len(), 2);
        let mut s = Simulator::new(SimConfig {
            threads: 1,
            ..SimConfig::default()
        });
        let module = s.load_module(NAME, &text).unwrap();
        let buf = s.malloc(16).unwrap();
        let cfg = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_bytes: 0,
        };
        s.launch(&module, "k", cfg, &[KernelArg::Ptr(buf)]).unwrap();
        let mut out = [0u8; 16];
        s.memcpy_dtoh(&mut out, buf).unwrap();
        out
    });
    let words: Vec<u32> = out
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // 16 inlined functions ran once each, an even number of `!` is no negation and an
    // odd one is, the innermost initializer values landed in order.
    assert_eq!(words, [16, 1, 0, 6]);
}

/// The attack end to end: a guest of the service sends the attacker's modules and a
/// quota-sized one; its guest thread (2 MiB stack) answers `CUDA_ERROR_INVALID_PTX`
/// with the line and column in the reply's detail (the simulator's JIT log, which names
/// the module `moduleN.ptx`), and that session and another go on working.
#[cfg(feature = "service")]
#[test]
fn the_service_answers_invalid_ptx_and_keeps_every_session() {
    use cuda_guest::proto::{Request, Status};
    use cuda_guest::service::ServiceConfig;
    use service_support::{Server, EMPTY_KERNEL};

    let server = Server::start(ServiceConfig::default());
    let mut other = server.client();
    other.context();
    let mut c = server.client();
    c.context();
    // The session's quota: the server's 16 MiB, shrunk to fit the client's frames.
    let quota = c.hello.limits.max_module as usize;
    assert!(quota > QUOTA - 4096, "{quota}");
    let (line, col) = too_deep_block("");
    let in_body = format!("error in body of k: {}", blocks_message());
    let in_operand = format!("error in instruction `mov.u32`: {}", operand_message());
    let cases = [
        (
            blocks(2_500, "", 0),
            format!(".ptx:{line}:{col}: {in_body}"),
        ),
        (
            blocks(0, "", quota),
            format!(".ptx:{line}:{col}: {in_body}"),
        ),
        (
            parens(10_000),
            format!(".ptx:7:{}: {in_operand}", 18 + MAX_NESTING),
        ),
    ];
    for (text, want) in cases {
        let r = c.call(Request::ModuleLoadData {
            image: text.into_bytes(),
        });
        assert_eq!(r.status, Status::ERROR_INVALID_PTX, "{:?}", r.detail());
        let detail = r.detail().unwrap_or_default();
        assert!(detail.contains(&want), "{detail}");
    }
    c.load(EMPTY_KERNEL);
    other.load(EMPTY_KERNEL);
    drop((c, other));
    server.wait_idle();
    server.stop();
}
