//! Device `printf` (`vprintf(format, args)` in PTX): the format string and the argument
//! buffer a kernel hands over, formatted as C's `printf` does. The buffer holds each
//! argument at its natural alignment (`int`/`unsigned` and smaller promoted to 4 bytes,
//! `long`, `long long`, pointers, strings and `double` 8), as CUDA's compilers lay it out.
//!
//! Written here rather than taken from a crate: the crate that formats C specifiers
//! (`sprintf`) ignores length modifiers (they decide the buffer's layout here) and
//! overflows on `i64::MIN`, so the scan would be written anyway.

/// Reads device memory for the formatter: `Err` for an address the kernel may not read.
pub(crate) trait Reader {
    /// `len` bytes (at most 8) at `addr`, little-endian.
    fn read(&mut self, addr: u64, len: u8) -> Result<u64, ()>;

    /// A NUL-terminated string at `addr`, at most `max` bytes (`Err` past a bad address).
    fn string(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, ()> {
        let mut s = Vec::new();
        for i in 0..max as u64 {
            match self.read(addr.wrapping_add(i), 1)? as u8 {
                0 => break,
                b => s.push(b),
            }
        }
        Ok(s)
    }
}

/// The longest string a `%s` or the format itself may be (the GPU's FIFO is 1 MiB).
pub(crate) const MAX_STRING: usize = 64 << 10;

/// One conversion: flags, width, precision, length and the conversion character.
#[derive(Debug, Default, Clone, Copy)]
struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    precision: Option<usize>,
    /// Bytes the argument takes in the buffer (4 or 8).
    size: u8,
    conv: u8,
}

/// Formats `format` with the arguments read from `args` (a device address): the text
/// and the number of arguments it used (what device `printf` returns). A conversion
/// the device does not support, or an address it may not read, is an `Err` naming it.
pub(crate) fn format(
    format: &[u8],
    args: u64,
    mem: &mut dyn Reader,
) -> Result<(Vec<u8>, u32), String> {
    let mut used = 0u32;
    let mut out = Vec::with_capacity(format.len() + 16);
    let mut at = args;
    let mut i = 0;
    while i < format.len() {
        let c = format[i];
        i += 1;
        if c != b'%' {
            out.push(c);
            continue;
        }
        if format.get(i) == Some(&b'%') {
            out.push(b'%');
            i += 1;
            continue;
        }
        let start = i - 1;
        let mut s = Spec {
            size: 4,
            ..Spec::default()
        };
        while let Some(&f) = format.get(i) {
            match f {
                b'-' => s.left = true,
                b'+' => s.plus = true,
                b' ' => s.space = true,
                b'#' => s.alt = true,
                b'0' => s.zero = true,
                _ => break,
            }
            i += 1;
        }
        s.width = digits(format, &mut i);
        if format.get(i) == Some(&b'.') {
            i += 1;
            s.precision = Some(digits(format, &mut i));
        }
        // Length: h and hh read the promoted int; l, ll, z, j, t read 8 bytes.
        while let Some(&l) = format.get(i) {
            match l {
                b'h' => {}
                b'l' | b'z' | b'j' | b't' | b'L' => s.size = 8,
                _ => break,
            }
            i += 1;
        }
        let Some(&conv) = format.get(i) else {
            out.extend_from_slice(&format[start..]);
            return Err("the format ends inside a conversion".into());
        };
        i += 1;
        s.conv = conv;
        let size = match conv {
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' | b's' | b'p' => 8,
            b'd' | b'i' | b'u' | b'x' | b'X' | b'o' | b'c' => s.size,
            _ => {
                out.extend_from_slice(&format[start..i]);
                return Err(format!("unknown conversion %{}", conv as char));
            }
        };
        at = at.next_multiple_of(size as u64);
        let raw = mem
            .read(at, size)
            .map_err(|()| format!("argument at {at:#x} is not readable"))?;
        at += size as u64;
        used += 1;
        let text = match conv {
            b'd' | b'i' => {
                let v = if size == 8 {
                    raw as i64
                } else {
                    raw as u32 as i32 as i64
                };
                integer(&s, v < 0, v.unsigned_abs(), 10, false)
            }
            // `+` and ` ` are for signed conversions only.
            b'u' => integer(&unsigned(s), false, raw, 10, false),
            b'x' => integer(&unsigned(s), false, raw, 16, false),
            b'X' => integer(&unsigned(s), false, raw, 16, true),
            b'o' => integer(&unsigned(s), false, raw, 8, false),
            b'p' => {
                let s = Spec { alt: true, ..s };
                integer(&s, false, raw, 16, false)
            }
            b'c' => pad(&s, vec![raw as u8], false),
            b's' => {
                let mut text = if raw == 0 {
                    b"(null)".to_vec()
                } else {
                    mem.string(raw, MAX_STRING)
                        .map_err(|()| format!("string at {raw:#x} is not readable"))?
                };
                if let Some(p) = s.precision {
                    text.truncate(p);
                }
                pad(&s, text, false)
            }
            _ => float(&s, f64::from_bits(raw)),
        };
        out.extend_from_slice(&text);
    }
    Ok((out, used))
}

fn digits(f: &[u8], i: &mut usize) -> usize {
    let mut n = 0usize;
    while let Some(d) = f.get(*i).filter(|d| d.is_ascii_digit()) {
        n = n
            .saturating_mul(10)
            .saturating_add((d - b'0') as usize)
            .min(1 << 16);
        *i += 1;
    }
    n
}

/// Pads `body` to the width: left-justified, with zeros after the sign and prefix
/// (`numeric`, `zero` and no precision given for integers), else with spaces.
fn pad(s: &Spec, body: Vec<u8>, numeric: bool) -> Vec<u8> {
    if body.len() >= s.width {
        return body;
    }
    let fill = s.width - body.len();
    if s.left {
        let mut b = body;
        b.resize(s.width, b' ');
        b
    } else if numeric && s.zero {
        // After a sign or a 0x prefix.
        let lead = match body.first() {
            Some(b'-' | b'+' | b' ') => 1,
            _ => 0,
        };
        let lead = if body[lead..].starts_with(b"0x") || body[lead..].starts_with(b"0X") {
            lead + 2
        } else {
            lead
        };
        let mut b = body[..lead].to_vec();
        b.resize(lead + fill, b'0');
        b.extend_from_slice(&body[lead..]);
        b
    } else {
        let mut b = vec![b' '; fill];
        b.extend_from_slice(&body);
        b
    }
}

fn sign(s: &Spec, negative: bool) -> &'static [u8] {
    if negative {
        b"-"
    } else if s.plus {
        b"+"
    } else if s.space {
        b" "
    } else {
        b""
    }
}

/// `s` without the sign flags (an unsigned conversion ignores them).
fn unsigned(s: Spec) -> Spec {
    Spec {
        plus: false,
        space: false,
        ..s
    }
}

fn integer(s: &Spec, negative: bool, v: u64, base: u64, upper: bool) -> Vec<u8> {
    let alphabet: &[u8] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut rev = Vec::new();
    let mut n = v;
    while n > 0 {
        rev.push(alphabet[(n % base) as usize]);
        n /= base;
    }
    // Precision: the least number of digits ("%.0d" of 0 prints nothing).
    let min = s.precision.unwrap_or(1);
    while rev.len() < min {
        rev.push(b'0');
    }
    let mut body = sign(s, negative).to_vec();
    // `#`: `0x` before a nonzero hexadecimal value; a leading 0 on octal digits, even
    // on none at all (`%#.0o` of 0 is `0`).
    if s.alt {
        match base {
            16 if v != 0 => body.extend_from_slice(if upper { b"0X" } else { b"0x" }),
            8 if rev.last() != Some(&b'0') => body.push(b'0'),
            _ => {}
        }
    }
    body.extend(rev.iter().rev());
    pad(s, body, s.precision.is_none())
}

fn float(s: &Spec, v: f64) -> Vec<u8> {
    let upper = s.conv.is_ascii_uppercase();
    let negative = v.is_sign_negative();
    let a = v.abs();
    let digits = if a.is_nan() {
        b"nan".to_vec()
    } else if a.is_infinite() {
        b"inf".to_vec()
    } else {
        let p = s.precision.unwrap_or(6);
        match s.conv.to_ascii_lowercase() {
            b'f' => fixed(a, p, s.alt),
            b'e' => exponent(a, p, s.alt),
            b'a' => hex_float(a, s.precision),
            _ => general(a, p, s.alt),
        }
    };
    let digits = if upper {
        digits.to_ascii_uppercase()
    } else {
        digits
    };
    let mut body = sign(s, negative).to_vec();
    body.extend_from_slice(&digits);
    pad(s, body, a.is_finite())
}

fn fixed(a: f64, p: usize, alt: bool) -> Vec<u8> {
    let mut t = format!("{a:.p$}").into_bytes();
    if alt && p == 0 {
        t.push(b'.');
    }
    t
}

fn exponent(a: f64, p: usize, alt: bool) -> Vec<u8> {
    // Rust writes `1.5e2`; C writes `1.500000e+02`.
    let t = format!("{a:.p$e}");
    let (mantissa, exp) = t.split_once('e').unwrap_or((&t, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut m = mantissa.to_string();
    if alt && p == 0 {
        m.push('.');
    }
    format!(
        "{m}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    )
    .into_bytes()
}

fn general(a: f64, p: usize, alt: bool) -> Vec<u8> {
    let p = p.max(1);
    // The exponent the %e form would have, after rounding to p digits.
    let x = if a == 0.0 {
        0
    } else {
        let t = format!("{a:.prec$e}", prec = p - 1);
        t.split_once('e')
            .and_then(|(_, e)| e.parse::<i32>().ok())
            .unwrap_or(0)
    };
    let mut t = if (x as i64) < p as i64 && x >= -4 {
        fixed(a, (p as i64 - 1 - x as i64) as usize, alt)
    } else {
        exponent(a, p - 1, alt)
    };
    if !alt {
        // Trailing zeros of the fraction go, and a bare point.
        let (mant_end, tail) = match t.iter().position(|&c| c == b'e') {
            Some(e) => (e, t[e..].to_vec()),
            None => (t.len(), vec![]),
        };
        if t[..mant_end].contains(&b'.') {
            let mut end = mant_end;
            while t[end - 1] == b'0' {
                end -= 1;
            }
            if t[end - 1] == b'.' {
                end -= 1;
            }
            t.truncate(end);
            t.extend_from_slice(&tail);
        }
    }
    t
}

fn hex_float(a: f64, precision: Option<usize>) -> Vec<u8> {
    if a == 0.0 {
        return b"0x0p+0".to_vec();
    }
    let bits = a.to_bits();
    let (lead, exp, mant) = if (bits >> 52) & 0x7ff == 0 {
        (0, -1022i64, bits & ((1 << 52) - 1))
    } else {
        (
            1,
            ((bits >> 52) & 0x7ff) as i64 - 1023,
            bits & ((1 << 52) - 1),
        )
    };
    let mut frac = format!("{mant:013x}");
    match precision {
        Some(p) => frac.truncate(p),
        None => {
            while frac.ends_with('0') {
                frac.pop();
            }
        }
    }
    let point = if frac.is_empty() { "" } else { "." };
    format!(
        "0x{lead}{point}{frac}p{}{}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer of arguments at address 0x1000 and strings at 0x2000...
    struct Mem(Vec<(u64, Vec<u8>)>);

    impl Reader for Mem {
        fn read(&mut self, addr: u64, len: u8) -> Result<u64, ()> {
            for (base, bytes) in &self.0 {
                if addr >= *base && addr + len as u64 <= base + bytes.len() as u64 {
                    let o = (addr - base) as usize;
                    let mut v = [0u8; 8];
                    v[..len as usize].copy_from_slice(&bytes[o..o + len as usize]);
                    return Ok(u64::from_le_bytes(v));
                }
            }
            Err(())
        }
    }

    fn run(fmt: &str, args: &[u8]) -> String {
        let mut m = Mem(vec![(0x1000, args.to_vec()), (0x2000, b"hello\0".to_vec())]);
        String::from_utf8(format(fmt.as_bytes(), 0x1000, &mut m).unwrap().0).unwrap()
    }

    fn le(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn integers_as_c_prints_them() {
        let b = le(&[
            &(-42i32).to_le_bytes(),
            &7u32.to_le_bytes(),
            &i64::MIN.to_le_bytes(),
        ]);
        assert_eq!(
            run("[%d] [%5u] [%ld]", &b),
            format!("[-42] [    7] [{}]", i64::MIN)
        );
        let b = le(&[
            &255u32.to_le_bytes(),
            &255u32.to_le_bytes(),
            &8u32.to_le_bytes(),
        ]);
        assert_eq!(run("%#x %08X %#o", &b), "0xff 000000FF 010");
        let b = le(&[
            &5i32.to_le_bytes(),
            &(-5i32).to_le_bytes(),
            &0i32.to_le_bytes(),
        ]);
        assert_eq!(run("%+d|%-4d|%.0d|", &b), "+5|-5  ||");
        let b = le(&[&65u32.to_le_bytes(), &[0; 4], &0x2000u64.to_le_bytes()]);
        assert_eq!(
            run("%c %s %.3s", &le(&[&b, &0x2000u64.to_le_bytes()])),
            "A hello hel"
        );
        assert_eq!(run("100%%", &[]), "100%");
    }

    #[test]
    fn doubles_as_c_prints_them() {
        let d = |v: f64| v.to_le_bytes();
        let b = le(&[&d(1.5), &d(-0.000123456), &d(1e20), &d(100.0)]);
        assert_eq!(run("%f %e %g %g", &b), "1.500000 -1.234560e-04 1e+20 100");
        let b = le(&[
            &d(0.0001),
            &d(123456789.0),
            &d(f64::NAN),
            &d(f64::NEG_INFINITY),
        ]);
        assert_eq!(run("%g %G %f %F", &b), "0.0001 1.23457E+08 nan -INF");
        let b = le(&[&d(3.25159), &d(2.0), &d(1.0)]);
        assert_eq!(run("%8.2f|%-8.1e|%a", &b), "    3.25|2.0e+00 |0x1p+0");
        let b = le(&[&d(0.5), &d(-0.0)]);
        assert_eq!(run("%010.3f %g", &b), "000000.500 -0");
    }

    #[test]
    fn int_then_double_is_aligned_to_8() {
        let b = le(&[&3i32.to_le_bytes(), &[0; 4], &2.5f64.to_le_bytes()]);
        assert_eq!(run("%d %f", &b), "3 2.500000");
        let mut m = Mem(vec![(0x1000, b)]);
        assert_eq!(format(b"%d%%%f", 0x1000, &mut m).unwrap().1, 2);
    }

    /// The host C library's `snprintf` of one conversion with one argument.
    fn c_printf_i64(fmt: &str, v: i64) -> String {
        let f = std::ffi::CString::new(fmt).unwrap();
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for its length; `f` is NUL-terminated and takes
        // one `long long` (the cases below use only %lld-style conversions).
        let n = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), f.as_ptr(), v) };
        String::from_utf8_lossy(&buf[..n as usize]).into_owned()
    }

    fn c_printf_f64(fmt: &str, v: f64) -> String {
        let f = std::ffi::CString::new(fmt).unwrap();
        let mut buf = [0u8; 256];
        // SAFETY: as above, with one `double`.
        let n = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), f.as_ptr(), v) };
        String::from_utf8_lossy(&buf[..n as usize]).into_owned()
    }

    /// Every flag, width and precision combination of the integer and floating
    /// conversions formats as the host's C library does.
    #[test]
    fn the_c_library_agrees() {
        let flags = ["", "-", "+", " ", "#", "0", "-+", "+0", "#0", " 0"];
        let widths = ["", "1", "7", "12"];
        let precisions = ["", ".0", ".1", ".3", ".8"];
        let ints = [0i64, 1, -1, 42, -42, 255, 1 << 40, i64::MIN, i64::MAX];
        let floats = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            123.456,
            1e-5,
            1e-4,
            99999.5,
            1e15,
            1e16,
            6.02e23,
            -2.5e-300,
            0.5,
            9.9999,
            f64::INFINITY,
            f64::NAN,
        ];
        let mut checked = 0;
        for f in flags {
            for w in widths {
                for p in precisions {
                    for conv in ["lld", "llu", "llx", "llX", "llo"] {
                        let fmt = format!("%{f}{w}{p}{conv}");
                        for v in ints {
                            let got = run(&fmt, &v.to_le_bytes());
                            assert_eq!(got, c_printf_i64(&fmt, v), "{fmt} of {v}");
                            checked += 1;
                        }
                    }
                    for conv in ["f", "e", "E", "g", "G"] {
                        let fmt = format!("%{f}{w}{p}{conv}");
                        for v in floats {
                            let got = run(&fmt, &v.to_le_bytes());
                            assert_eq!(got, c_printf_f64(&fmt, v), "{fmt} of {v}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 10 * 4 * 5 * (5 * 9 + 5 * 17));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut m = Mem(vec![(0x1000, vec![1, 0, 0, 0])]);
        assert!(format(b"%d %d", 0x1000, &mut m).is_err());
        assert!(format(b"%q", 0x1000, &mut m).is_err());
        assert!(format(b"%", 0x1000, &mut m).is_err());
        assert!(format(b"%s", 0x1000, &mut m).is_err());
        assert!(format(b"%99999999999999999999d", 0x1000, &mut m).is_ok());
    }
}
