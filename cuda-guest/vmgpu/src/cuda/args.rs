//! Kernel arguments of `vmgpu cuda run`, as written on the command line:
//!
//! ```text
//! TYPE:VALUE                          a scalar: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64
//! buf:TYPE:LEN[=INIT][,out=PATH][,show]
//! buf:TYPE=file:PATH[,out=PATH][,show]   (length from the file's size)
//! INIT: zeros (default) | iota | fill:VALUE | random:SEED | file:PATH
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

/// An element or scalar type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
}

impl Elem {
    fn from_name(s: &str) -> Option<Elem> {
        Some(match s {
            "u8" => Elem::U8,
            "i8" | "s8" => Elem::I8,
            "u16" => Elem::U16,
            "i16" | "s16" => Elem::I16,
            "u32" => Elem::U32,
            "i32" | "s32" => Elem::I32,
            "u64" => Elem::U64,
            "i64" | "s64" => Elem::I64,
            "f32" => Elem::F32,
            "f64" => Elem::F64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Elem::U8 => "u8",
            Elem::I8 => "i8",
            Elem::U16 => "u16",
            Elem::I16 => "i16",
            Elem::U32 => "u32",
            Elem::I32 => "i32",
            Elem::U64 => "u64",
            Elem::I64 => "i64",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Elem::U8 | Elem::I8 => 1,
            Elem::U16 | Elem::I16 => 2,
            Elem::U32 | Elem::I32 | Elem::F32 => 4,
            Elem::U64 | Elem::I64 | Elem::F64 => 8,
        }
    }

    /// Parses one value of this type into its little-endian bytes.
    pub fn parse_value(self, s: &str) -> Result<Vec<u8>, String> {
        let bad = |e: &dyn fmt::Display| format!("`{s}` is not a {} value: {e}", self.name());
        let s = s.trim();
        Ok(match self {
            Elem::F32 => s
                .parse::<f32>()
                .map_err(|e| bad(&e))?
                .to_le_bytes()
                .to_vec(),
            Elem::F64 => s
                .parse::<f64>()
                .map_err(|e| bad(&e))?
                .to_le_bytes()
                .to_vec(),
            _ => {
                let v = parse_int(s).map_err(|e| bad(&e))?;
                let (lo, hi): (i128, i128) = match self {
                    Elem::U8 => (0, u8::MAX.into()),
                    Elem::I8 => (i8::MIN.into(), i8::MAX.into()),
                    Elem::U16 => (0, u16::MAX.into()),
                    Elem::I16 => (i16::MIN.into(), i16::MAX.into()),
                    Elem::U32 => (0, u32::MAX.into()),
                    Elem::I32 => (i32::MIN.into(), i32::MAX.into()),
                    Elem::U64 => (0, u64::MAX.into()),
                    _ => (i64::MIN.into(), i64::MAX.into()),
                };
                if v < lo || v > hi {
                    return Err(bad(&format_args!("out of range {lo}..={hi}")));
                }
                v.to_le_bytes()[..self.size()].to_vec()
            }
        })
    }

    /// Formats one element of `bytes` (exactly `size()` long).
    pub fn format(self, b: &[u8]) -> String {
        let mut w = [0u8; 8];
        w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
        let u = u64::from_le_bytes(w);
        match self {
            Elem::U8 => (u as u8).to_string(),
            Elem::I8 => (u as u8 as i8).to_string(),
            Elem::U16 => (u as u16).to_string(),
            Elem::I16 => (u as u16 as i16).to_string(),
            Elem::U32 => (u as u32).to_string(),
            Elem::I32 => (u as u32 as i32).to_string(),
            Elem::U64 => u.to_string(),
            Elem::I64 => (u as i64).to_string(),
            Elem::F32 => format!("{:?}", f32::from_bits(u as u32)),
            Elem::F64 => format!("{:?}", f64::from_bits(u)),
        }
    }

    /// Element `i` of `iota`: the index as this type (wrapping for narrow integers).
    fn iota(self, i: u64) -> [u8; 8] {
        match self {
            Elem::F32 => pad(&(i as f32).to_le_bytes()),
            Elem::F64 => (i as f64).to_le_bytes(),
            _ => i.to_le_bytes(),
        }
    }

    /// A pseudo-random element from 64 random bits: floats uniform in [0, 1), integers
    /// uniform over the type.
    fn random(self, bits: u64) -> [u8; 8] {
        match self {
            Elem::F32 => pad(&((bits >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes()),
            Elem::F64 => ((bits >> 11) as f64 / (1u64 << 53) as f64).to_le_bytes(),
            _ => bits.to_le_bytes(),
        }
    }
}

fn pad(b: &[u8]) -> [u8; 8] {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    w
}

/// Decimal or `0x` hexadecimal, with an optional sign and `_` separators.
fn parse_int(s: &str) -> Result<i128, String> {
    let t = s.replace('_', "");
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(&t)),
    };
    let v = match body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        Some(hex) => i128::from_str_radix(hex, 16),
        None => body.parse::<i128>(),
    }
    .map_err(|e| e.to_string())?;
    // A leading sign inside the body ("--5", "-+5") is not a number.
    if body.starts_with(['-', '+']) {
        return Err("invalid digit found in string".into());
    }
    Ok(if neg { -v } else { v })
}

/// How a buffer starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    Zeros,
    Iota,
    /// One value's bytes, repeated.
    Fill(Vec<u8>),
    Random(u64),
    File(PathBuf),
}

/// A device buffer argument.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferSpec {
    pub elem: Elem,
    /// Elements; `None` with `file:` takes the file's length.
    pub len: Option<usize>,
    pub init: Init,
    /// Where to write the buffer after the launch.
    pub out: Option<PathBuf>,
    /// Print its first elements after the launch.
    pub show: bool,
}

/// One kernel argument.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgSpec {
    /// A scalar: its type and little-endian bytes.
    Scalar(Elem, Vec<u8>),
    /// Raw bytes for a by-value parameter (a struct, `.b8 name[N]`): only the size is
    /// checked.
    Bytes(Vec<u8>),
    Buffer(BufferSpec),
}

/// An argument with the text it was written as.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub text: String,
    pub spec: ArgSpec,
}

const SYNTAX: &str = "expected TYPE:VALUE (TYPE: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64), \
                      bytes:HEX or buf:TYPE:LEN[=zeros|iota|fill:VALUE|random:SEED|file:PATH][,out=PATH][,show]";

/// Parses one argument (clap's value parser: an error is a usage error).
pub fn parse_arg(s: &str) -> Result<Arg, String> {
    let spec = if let Some(rest) = s.strip_prefix("buf:") {
        ArgSpec::Buffer(parse_buffer(rest)?)
    } else if let Some(hex) = s.strip_prefix("bytes:") {
        ArgSpec::Bytes(parse_hex(hex).map_err(|e| format!("`{s}`: {e}"))?)
    } else {
        let (ty, value) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}`: {SYNTAX}"))?;
        let elem =
            Elem::from_name(ty).ok_or_else(|| format!("`{s}`: unknown type `{ty}`; {SYNTAX}"))?;
        ArgSpec::Scalar(elem, elem.parse_value(value)?)
    };
    Ok(Arg {
        text: s.to_string(),
        spec,
    })
}

/// Hexadecimal bytes in memory order, e.g. `0100000002000000`; `_` separators allowed.
fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let t: Vec<u8> = s.bytes().filter(|&b| b != b'_').collect();
    if t.is_empty() || !t.len().is_multiple_of(2) {
        return Err("expected an even, non-zero number of hex digits".into());
    }
    t.chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("`{}` is not a hex byte", String::from_utf8_lossy(p)))
        })
        .collect()
}

fn parse_buffer(s: &str) -> Result<BufferSpec, String> {
    // Options after the first `,out=` or `,show` piece; a comma not starting an option
    // belongs to the text before it (a path may hold commas).
    let mut pieces: Vec<String> = Vec::new();
    for p in s.split(',') {
        let option = p.starts_with("out=") || p == "show";
        match pieces.last_mut() {
            Some(last) if !option => {
                last.push(',');
                last.push_str(p);
            }
            _ => pieces.push(p.to_string()),
        }
    }
    let main = pieces.first().cloned().unwrap_or_default();
    let mut out = None;
    let mut show = false;
    for p in &pieces[1..] {
        if let Some(path) = p.strip_prefix("out=") {
            if path.is_empty() {
                return Err(format!("`buf:{s}`: out= needs a path"));
            }
            if out.replace(PathBuf::from(path)).is_some() {
                return Err(format!("`buf:{s}`: out= given twice"));
            }
        } else {
            show = true;
        }
    }
    let (head, init_text) = match main.split_once('=') {
        Some((h, i)) => (h, Some(i)),
        None => (main.as_str(), None),
    };
    let (ty, len_text) = match head.split_once(':') {
        Some((t, l)) => (t, Some(l)),
        None => (head, None),
    };
    let elem = Elem::from_name(ty)
        .ok_or_else(|| format!("`buf:{s}`: unknown element type `{ty}`; {SYNTAX}"))?;
    let len = match len_text {
        Some(l) => {
            let n = parse_int(l)
                .ok()
                .filter(|&n| n >= 0 && n <= usize::MAX as i128)
                .ok_or_else(|| format!("`buf:{s}`: `{l}` is not a length"))?;
            Some(n as usize)
        }
        None => None,
    };
    let init = match init_text {
        None | Some("zeros") | Some("zero") => Init::Zeros,
        Some("iota") => Init::Iota,
        Some(i) => {
            if let Some(v) = i.strip_prefix("fill:") {
                Init::Fill(elem.parse_value(v).map_err(|e| format!("`buf:{s}`: {e}"))?)
            } else if let Some(seed) = i.strip_prefix("random:") {
                let v = parse_int(seed)
                    .ok()
                    .filter(|&n| n >= 0 && n <= u64::MAX as i128)
                    .ok_or_else(|| format!("`buf:{s}`: `{seed}` is not a seed (0..2^64)"))?;
                Init::Random(v as u64)
            } else if let Some(path) = i.strip_prefix("file:") {
                if path.is_empty() {
                    return Err(format!("`buf:{s}`: file: needs a path"));
                }
                Init::File(PathBuf::from(path))
            } else {
                return Err(format!(
                    "`buf:{s}`: unknown initialiser `{i}` (zeros, iota, fill:VALUE, random:SEED or file:PATH)"
                ));
            }
        }
    };
    if len.is_none() && !matches!(init, Init::File(_)) {
        return Err(format!(
            "`buf:{s}`: a length is needed (buf:{}:LEN...), except with =file:PATH",
            elem.name()
        ));
    }
    Ok(BufferSpec {
        elem,
        len,
        init,
        out,
        show,
    })
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl BufferSpec {
    /// Its length in elements, reading a `file:`'s size when no length was given.
    pub fn resolved_len(&self) -> Result<usize, String> {
        if let Some(n) = self.len {
            return Ok(n);
        }
        let Init::File(path) = &self.init else {
            return Ok(0);
        };
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .len();
        let es = self.elem.size() as u64;
        if !size.is_multiple_of(es) {
            return Err(format!(
                "{} holds {size} bytes, not a whole number of {} ({es} bytes)",
                path.display(),
                self.elem.name()
            ));
        }
        usize::try_from(size / es).map_err(|_| format!("{} is too large", path.display()))
    }

    /// The buffer's initial bytes (`bytes` long); a host allocation failure is an error,
    /// not an abort.
    pub fn host_bytes(&self, len: usize) -> Result<Vec<u8>, String> {
        let es = self.elem.size();
        let bytes = len
            .checked_mul(es)
            .ok_or_else(|| format!("{len} x {} overflows", self.elem.name()))?;
        if let Init::File(path) = &self.init {
            return read_exact_file(path, bytes);
        }
        let mut v: Vec<u8> = Vec::new();
        v.try_reserve_exact(bytes)
            .map_err(|e| format!("cannot allocate {bytes} bytes of host memory: {e}"))?;
        match &self.init {
            Init::Zeros | Init::File(_) => v.resize(bytes, 0),
            Init::Iota => {
                for i in 0..len as u64 {
                    v.extend_from_slice(&self.elem.iota(i)[..es]);
                }
            }
            Init::Fill(value) => {
                for _ in 0..len {
                    v.extend_from_slice(value);
                }
            }
            Init::Random(seed) => {
                let mut r = Rng(*seed);
                for _ in 0..len {
                    v.extend_from_slice(&self.elem.random(r.next())[..es]);
                }
            }
        }
        Ok(v)
    }
}

fn read_exact_file(path: &Path, bytes: usize) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let size = f
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    if size != bytes as u64 {
        return Err(format!(
            "{} holds {size} bytes, the buffer {bytes}",
            path.display()
        ));
    }
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(bytes)
        .map_err(|e| format!("cannot allocate {bytes} bytes of host memory: {e}"))?;
    f.take(bytes as u64)
        .read_to_end(&mut v)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if v.len() != bytes {
        return Err(format!("{} changed while being read", path.display()));
    }
    Ok(v)
}

/// `X[,Y[,Z]]` (or `XxYxZ`), each at least 1.
pub fn parse_dim3(s: &str) -> Result<[u32; 3], String> {
    let parts: Vec<&str> = s.split([',', 'x']).collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("`{s}`: expected X[,Y[,Z]]"));
    }
    let mut d = [1u32; 3];
    for (slot, p) in d.iter_mut().zip(&parts) {
        let v = parse_int(p)
            .ok()
            .filter(|&v| v >= 1 && v <= u32::MAX as i128)
            .ok_or_else(|| format!("`{s}`: `{p}` is not a positive 32-bit number"))?;
        *slot = v as u32;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_parse_to_their_bytes_and_refuse_out_of_range() {
        assert_eq!(
            parse_arg("u32:5").unwrap().spec,
            ArgSpec::Scalar(Elem::U32, vec![5, 0, 0, 0])
        );
        assert_eq!(
            parse_arg("i32:-1").unwrap().spec,
            ArgSpec::Scalar(Elem::I32, vec![255; 4])
        );
        assert_eq!(
            parse_arg("u64:0x10").unwrap().spec,
            ArgSpec::Scalar(Elem::U64, 16u64.to_le_bytes().to_vec())
        );
        assert_eq!(
            parse_arg("f32:2.5").unwrap().spec,
            ArgSpec::Scalar(Elem::F32, 2.5f32.to_le_bytes().to_vec())
        );
        assert!(parse_arg("u8:256").unwrap_err().contains("out of range"));
        assert!(parse_arg("u32:-1").is_err());
        assert!(parse_arg("i32:--1").is_err());
        assert!(parse_arg("q32:1").unwrap_err().contains("unknown type"));
        assert!(parse_arg("5").is_err());
        assert_eq!(
            parse_arg("bytes:0102_ff00").unwrap().spec,
            ArgSpec::Bytes(vec![1, 2, 255, 0])
        );
        assert!(parse_arg("bytes:123").is_err());
        assert!(parse_arg("bytes:zz").is_err());
        assert!(parse_arg("bytes:é1").is_err());
    }

    #[test]
    fn buffers_parse_with_options_and_paths_holding_commas() {
        let Arg { spec, .. } = parse_arg("buf:f32:1024=iota,out=a,b.bin,show").unwrap();
        assert_eq!(
            spec,
            ArgSpec::Buffer(BufferSpec {
                elem: Elem::F32,
                len: Some(1024),
                init: Init::Iota,
                out: Some("a,b.bin".into()),
                show: true,
            })
        );
        let ArgSpec::Buffer(b) = parse_arg("buf:u32:3=fill:7").unwrap().spec else {
            panic!()
        };
        assert_eq!(
            b.host_bytes(3).unwrap(),
            [7, 0, 0, 0, 7, 0, 0, 0, 7, 0, 0, 0]
        );
        let ArgSpec::Buffer(b) = parse_arg("buf:f32:3=iota").unwrap().spec else {
            panic!()
        };
        let want: Vec<u8> = [0f32, 1.0, 2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(b.host_bytes(3).unwrap(), want);
        let ArgSpec::Buffer(b) = parse_arg("buf:f32:4=random:9").unwrap().spec else {
            panic!()
        };
        let r = b.host_bytes(4).unwrap();
        assert_eq!(r, b.host_bytes(4).unwrap(), "seeded: the same every time");
        assert!(r
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .all(|x| (0.0..1.0).contains(&x)));
        assert!(parse_arg("buf:f32=iota").unwrap_err().contains("length"));
        assert!(parse_arg("buf:f32:1=bogus").is_err());
        assert!(parse_arg("buf:f32:x").is_err());
        assert!(parse_arg("buf:f32:1,out=").is_err());
    }

    #[test]
    fn dims() {
        assert_eq!(parse_dim3("8").unwrap(), [8, 1, 1]);
        assert_eq!(parse_dim3("2,3,4").unwrap(), [2, 3, 4]);
        assert_eq!(parse_dim3("16x16").unwrap(), [16, 16, 1]);
        assert!(parse_dim3("0").is_err());
        assert!(parse_dim3("1,2,3,4").is_err());
        assert!(parse_dim3("").is_err());
    }
}
