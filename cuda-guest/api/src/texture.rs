//! Texture and surface objects as the simulator reads them: a descriptor that
//! `libcuda.so.1` writes into device memory (`cuTexObjectCreate`, `cuSurfObjectCreate`),
//! whose device address is the object handle a kernel receives. A kernel's `tex`,
//! `suld` and `sust` read the descriptor at that address (a checked global access, so a
//! stale or forged handle faults as any bad pointer does) and then the texels it names.
//! The layout is written here once, for both sides.
//!
//! A simulator backend answers [`CAPABILITY_ATTRIBUTE`] with 1; a backend that runs
//! kernels on a GPU does not know it, and texture objects are then refused rather than
//! handed to a GPU that would read them as its own.

/// A `CU_DEVICE_ATTRIBUTE_*` number past cuda.h's: 1 when the device reads texture and
/// surface objects as descriptors in its memory (the simulator).
pub const CAPABILITY_ATTRIBUTE: i32 = 0x766d_0001;

/// The descriptor's first word.
pub const MAGIC: u32 = 0x3178_7476; // "vtx1"

/// Bytes of a descriptor in device memory.
pub const SIZE: usize = 72;

/// `CUDA_ARRAY3D_DESCRIPTOR` (cuda.h): an array's extent, format and flags.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Array3DDescriptor {
    /// Texels a row.
    pub width: usize,
    /// Rows (0 for 1-D).
    pub height: usize,
    /// Slices or layers (0 for 1-D and 2-D).
    pub depth: usize,
    /// `CUarray_format`.
    pub format: u32,
    /// Channels a texel.
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub flags: u32,
}

/// `CUDA_RESOURCE_DESC` (cuda.h): the resource type, its union as words (read per
/// type), and flags.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceDesc {
    /// `CUresourcetype`.
    pub res_type: u32,
    /// The union: array handle; or device pointer, format and channels (low and high
    /// half of the second word), then size (linear) or width, height, pitch (pitch 2-D).
    pub res: [u64; 16],
    /// Must be 0.
    pub flags: u32,
}

/// `CUDA_TEXTURE_DESC` (cuda.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TextureDesc {
    /// `CUaddress_mode` of each dimension.
    pub address: [u32; 3],
    /// `CUfilter_mode`.
    pub filter: u32,
    /// `CU_TRSF_*`.
    pub flags: u32,
    /// Ignored here.
    pub max_anisotropy: u32,
    /// Ignored here (no mipmaps).
    pub mipmap_filter: u32,
    /// Ignored here.
    pub mipmap_bias: f32,
    /// Ignored here.
    pub min_mipmap_clamp: f32,
    /// Ignored here.
    pub max_mipmap_clamp: f32,
    /// The border color.
    pub border: [f32; 4],
    /// Reserved.
    pub reserved: [i32; 12],
}

/// A texel's channel type (`CUarray_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `CU_AD_FORMAT_UNSIGNED_INT8`.
    U8,
    /// `CU_AD_FORMAT_UNSIGNED_INT16`.
    U16,
    /// `CU_AD_FORMAT_UNSIGNED_INT32`.
    U32,
    /// `CU_AD_FORMAT_SIGNED_INT8`.
    S8,
    /// `CU_AD_FORMAT_SIGNED_INT16`.
    S16,
    /// `CU_AD_FORMAT_SIGNED_INT32`.
    S32,
    /// `CU_AD_FORMAT_HALF`.
    F16,
    /// `CU_AD_FORMAT_FLOAT`.
    F32,
}

impl Format {
    /// The format of `CUarray_format` `code` (the plain channel formats).
    pub const fn from_code(code: u32) -> Option<Format> {
        Some(match code {
            0x01 => Format::U8,
            0x02 => Format::U16,
            0x03 => Format::U32,
            0x08 => Format::S8,
            0x09 => Format::S16,
            0x0a => Format::S32,
            0x10 => Format::F16,
            0x20 => Format::F32,
            _ => return None,
        })
    }

    /// Its `CUarray_format` number.
    pub const fn code(self) -> u32 {
        match self {
            Format::U8 => 0x01,
            Format::U16 => 0x02,
            Format::U32 => 0x03,
            Format::S8 => 0x08,
            Format::S16 => 0x09,
            Format::S32 => 0x0a,
            Format::F16 => 0x10,
            Format::F32 => 0x20,
        }
    }

    /// Bytes of one channel.
    pub const fn bytes(self) -> u64 {
        match self {
            Format::U8 | Format::S8 => 1,
            Format::U16 | Format::S16 | Format::F16 => 2,
            Format::U32 | Format::S32 | Format::F32 => 4,
        }
    }

    /// Whether a texture of it may return normalized floats (8- and 16-bit integers).
    pub const fn normalizable(self) -> bool {
        matches!(self, Format::U8 | Format::U16 | Format::S8 | Format::S16)
    }
}

/// How coordinates outside the texture are brought in (`CUaddress_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressMode {
    /// `CU_TR_ADDRESS_MODE_WRAP` (normalized coordinates only; else clamp).
    Wrap,
    /// `CU_TR_ADDRESS_MODE_CLAMP`.
    Clamp,
    /// `CU_TR_ADDRESS_MODE_MIRROR` (normalized coordinates only; else clamp).
    Mirror,
    /// `CU_TR_ADDRESS_MODE_BORDER`: the border color outside.
    Border,
}

impl AddressMode {
    /// The mode of `CUaddress_mode` `code`.
    pub const fn from_code(code: u32) -> Option<AddressMode> {
        Some(match code {
            0 => AddressMode::Wrap,
            1 => AddressMode::Clamp,
            2 => AddressMode::Mirror,
            3 => AddressMode::Border,
            _ => return None,
        })
    }

    const fn code(self) -> u8 {
        match self {
            AddressMode::Wrap => 0,
            AddressMode::Clamp => 1,
            AddressMode::Mirror => 2,
            AddressMode::Border => 3,
        }
    }
}

/// What a texture or surface object reads: memory laid out row by row (a linear
/// buffer, pitched 2-D memory, or a CUDA array, which the simulator keeps as pitched
/// memory), and how a texture samples it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Descriptor {
    /// Device address of texel (0, 0, 0).
    pub base: u64,
    /// Texels a row.
    pub width: u64,
    /// Rows (1 for 1-D).
    pub height: u64,
    /// Slices or layers (1 for 1-D and 2-D).
    pub depth: u64,
    /// Bytes from one row to the next.
    pub pitch: u64,
    /// Channel type.
    pub format: Format,
    /// Channels a texel: 1, 2 or 4.
    pub channels: u8,
    /// Dimensions: 1, 2 or 3 (a layered array counts its layers apart: see `layered`).
    pub dims: u8,
    /// A layered array: `depth` layers of `dims`-dimensional textures.
    pub layered: bool,
    /// Linear (1-D buffer) memory, fetched by integer index only (`tex1Dfetch`).
    pub linear: bool,
    /// Coordinates in [0, 1) rather than texels.
    pub normalized_coords: bool,
    /// Integer formats of 8 and 16 bits read as floats in [0, 1] or [-1, 1].
    pub normalized_float: bool,
    /// Bilinear (trilinear) filtering rather than the nearest texel.
    pub linear_filter: bool,
    /// A surface object (`suld`/`sust`, byte coordinates in x) rather than a texture.
    pub surface: bool,
    /// A cubemap: six faces as layers (+x, -x, +y, -y, +z, -z), sampled by direction
    /// (`layered` too; a layered cubemap has 6 layers a cube).
    pub cubemap: bool,
    /// Per dimension.
    pub address: [AddressMode; 3],
    /// Returned outside a texture with border addressing.
    pub border: [f32; 4],
}

impl Descriptor {
    /// Bytes of one texel.
    pub fn texel_bytes(&self) -> u64 {
        self.format.bytes() * u64::from(self.channels)
    }

    /// The descriptor's bytes in device memory.
    pub fn encode(&self) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.format.code() as u8;
        b[5] = self.channels;
        b[6] = self.dims;
        b[7] = u8::from(self.layered)
            | u8::from(self.linear) << 1
            | u8::from(self.normalized_coords) << 2
            | u8::from(self.normalized_float) << 3
            | u8::from(self.linear_filter) << 4
            | u8::from(self.surface) << 5
            | u8::from(self.cubemap) << 6;
        for (i, a) in self.address.iter().enumerate() {
            b[8 + i] = a.code();
        }
        for (i, v) in [self.base, self.width, self.height, self.depth, self.pitch]
            .iter()
            .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        for (i, c) in self.border.iter().enumerate() {
            b[56 + 4 * i..60 + 4 * i].copy_from_slice(&c.to_bits().to_le_bytes());
        }
        b
    }

    /// The descriptor of `b` (its bytes in device memory), if they are one.
    pub fn decode(b: &[u8]) -> Option<Descriptor> {
        let b = b.get(..SIZE)?;
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")) != MAGIC {
            return None;
        }
        let channels = b[5];
        let dims = b[6];
        if !matches!(channels, 1 | 2 | 4) || !(1..=3).contains(&dims) {
            return None;
        }
        let flag = |bit: u8| b[7] & (1 << bit) != 0;
        let mode = |i: usize| AddressMode::from_code(u32::from(b[8 + i]));
        let border = |i: usize| {
            f32::from_bits(u32::from_le_bytes(
                b[56 + 4 * i..60 + 4 * i].try_into().expect("4 bytes"),
            ))
        };
        Some(Descriptor {
            base: u64_at(16),
            width: u64_at(24),
            height: u64_at(32),
            depth: u64_at(40),
            pitch: u64_at(48),
            format: Format::from_code(u32::from(b[4]))?,
            channels,
            dims,
            layered: flag(0),
            linear: flag(1),
            normalized_coords: flag(2),
            normalized_float: flag(3),
            linear_filter: flag(4),
            surface: flag(5),
            cubemap: flag(6),
            address: [mode(0)?, mode(1)?, mode(2)?],
            border: [border(0), border(1), border(2), border(3)],
        })
    }

    /// The bytes from `base` that the descriptor names: the last texel's end. Refused
    /// (None) when a size overflows or a row is wider than its pitch.
    pub fn extent(&self) -> Option<u64> {
        let row = self.width.checked_mul(self.texel_bytes())?;
        if self.height > 1 || self.depth > 1 {
            if row > self.pitch {
                return None;
            }
            let rows = self.height.checked_mul(self.depth)?;
            rows.checked_sub(1)?
                .checked_mul(self.pitch)?
                .checked_add(row)
        } else {
            Some(row)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_survives_its_bytes_and_bad_bytes_are_none() {
        let d = Descriptor {
            base: 0x7000_0000_1000,
            width: 640,
            height: 480,
            depth: 1,
            pitch: 2560,
            format: Format::F32,
            channels: 1,
            dims: 2,
            layered: false,
            linear: false,
            normalized_coords: true,
            normalized_float: false,
            linear_filter: true,
            surface: false,
            cubemap: false,
            address: [AddressMode::Wrap, AddressMode::Border, AddressMode::Clamp],
            border: [0.5, -1.0, 0.0, 1.0],
        };
        assert_eq!(Descriptor::decode(&d.encode()), Some(d));
        assert_eq!(d.extent(), Some(479 * 2560 + 2560));
        let mut bad = d.encode();
        bad[0] ^= 1;
        assert_eq!(Descriptor::decode(&bad), None);
        let mut bad = d.encode();
        bad[5] = 3;
        assert_eq!(Descriptor::decode(&bad), None);
        assert_eq!(Descriptor::decode(&d.encode()[..40]), None);
        let wide = Descriptor { pitch: 100, ..d };
        assert_eq!(wide.extent(), None);
    }
}
