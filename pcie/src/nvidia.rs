//! NVIDIA functions: what each function of a board is, and which GPU architecture
//! a device id belongs to.

use std::fmt;

use crate::class::ClassCode;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR_ID: u16 = 0x10de;

/// The role of one NVIDIA PCI function. A GPU board exposes the GPU and often an
/// HDA audio function, an xHCI controller and a USB-C (UCSI) serial-bus function;
/// HGX baseboards add NVSwitches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NvidiaFunction {
    /// The GPU (display class).
    Gpu,
    /// The HDA audio function.
    Audio,
    /// The xHCI USB controller.
    Usb,
    /// The USB-C controller (UCSI) and other serial-bus functions.
    SerialBus,
    /// NVSwitch (class 0x0680, "other bridge").
    #[serde(rename = "nvswitch")]
    NvSwitch,
    /// Any other NVIDIA bridge (e.g. an NF200 PCIe switch).
    Bridge,
    /// Anything else.
    Other,
}

impl NvidiaFunction {
    /// Classifies by class code, which is what the hardware reports for each function.
    pub fn classify(class: ClassCode) -> Self {
        match (class.base(), class.sub()) {
            (ClassCode::DISPLAY, _) => Self::Gpu,
            (ClassCode::MULTIMEDIA, 0x03) => Self::Audio,
            (ClassCode::SERIAL_BUS, 0x03) => Self::Usb,
            (ClassCode::SERIAL_BUS, _) => Self::SerialBus,
            (ClassCode::BRIDGE, 0x80) => Self::NvSwitch,
            (ClassCode::BRIDGE, _) => Self::Bridge,
            _ => Self::Other,
        }
    }

    /// The JSON name (`gpu`, `audio`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Audio => "audio",
            Self::Usb => "usb",
            Self::SerialBus => "serial-bus",
            Self::NvSwitch => "nvswitch",
            Self::Bridge => "bridge",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for NvidiaFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// NVIDIA GPU architectures, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)] // the names are the documentation
pub enum GpuArchitecture {
    Kepler,
    Maxwell,
    Pascal,
    Volta,
    Turing,
    Ampere,
    Hopper,
    Ada,
    Blackwell,
}

/// Device-id ranges per chip family. NVIDIA allocates ids in blocks per chip, so a
/// range table stays correct for boards released after this table was written.
const ARCHITECTURE_RANGES: &[(u16, u16, GpuArchitecture)] = {
    use GpuArchitecture::*;
    &[
        (0x0fc0, 0x0fff, Kepler),    // GK107
        (0x1000, 0x103f, Kepler),    // GK110/GK110B/GK210 (K40, K80)
        (0x1180, 0x11ff, Kepler),    // GK104/GK106
        (0x1280, 0x12ff, Kepler),    // GK208
        (0x1340, 0x13ff, Maxwell),   // GM107/GM108/GM204
        (0x1400, 0x143f, Maxwell),   // GM206
        (0x1740, 0x17ff, Maxwell),   // GM200 (M40, Titan X)
        (0x15f0, 0x15ff, Pascal),    // GP100 (P100)
        (0x1b00, 0x1bff, Pascal),    // GP102/GP104 (P40, P4)
        (0x1c00, 0x1cff, Pascal),    // GP106/GP107
        (0x1d00, 0x1d7f, Pascal),    // GP108
        (0x1d80, 0x1dff, Volta),     // GV100 (V100, Titan V)
        (0x1e00, 0x1fff, Turing),    // TU102/TU104/TU106/TU117 (T4)
        (0x2180, 0x21ff, Turing),    // TU116
        (0x2080, 0x20ff, Ampere),    // GA100 (A100, A30)
        (0x2200, 0x22ff, Ampere),    // GA102 (A40, A10, RTX 3090)
        (0x2300, 0x23ff, Hopper),    // GH100 (H100, H200, GH200)
        (0x2400, 0x25ff, Ampere),    // GA103..GA107 (A2000, RTX 3060)
        (0x2680, 0x28ff, Ada),       // AD102..AD107 (RTX 4090, L40, L4)
        (0x2900, 0x29ff, Blackwell), // GB100/GB102 (B200, GB200)
        (0x2b00, 0x2fff, Blackwell), // GB202..GB207 (RTX 5090)
        (0x3180, 0x31ff, Blackwell), // GB110 (B300)
    ]
};

impl GpuArchitecture {
    /// The architecture of an NVIDIA GPU device id, if the id is in a known block.
    pub fn from_device_id(device_id: u16) -> Option<Self> {
        ARCHITECTURE_RANGES
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&device_id))
            .map(|(_, _, arch)| *arch)
    }

    /// The JSON name (`hopper`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Kepler => "kepler",
            Self::Maxwell => "maxwell",
            Self::Pascal => "pascal",
            Self::Volta => "volta",
            Self::Turing => "turing",
            Self::Ampere => "ampere",
            Self::Hopper => "hopper",
            Self::Ada => "ada",
            Self::Blackwell => "blackwell",
        }
    }
}

impl fmt::Display for GpuArchitecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What we know of an NVIDIA function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NvidiaInfo {
    /// What the function is.
    pub function: NvidiaFunction,
    /// The GPU's architecture when its id is in a known block. A board's audio,
    /// USB and UCSI functions get that of the GPU in the same slot when read
    /// from sysfs ([`NvidiaInfo::identify`] alone leaves them `None`).
    pub architecture: Option<GpuArchitecture>,
}

impl NvidiaInfo {
    /// `None` for other vendors.
    pub fn identify(vendor_id: u16, device_id: u16, class: ClassCode) -> Option<Self> {
        if vendor_id != NVIDIA_VENDOR_ID {
            return None;
        }
        let function = NvidiaFunction::classify(class);
        let architecture = match function {
            NvidiaFunction::Gpu => GpuArchitecture::from_device_id(device_id),
            _ => None,
        };
        Some(Self {
            function,
            architecture,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::GpuArchitecture::*;
    use super::*;

    #[test]
    fn known_boards_map_to_their_architecture() {
        let boards = [
            (0x102d, Kepler),    // Tesla K80
            (0x13bb, Maxwell),   // Quadro K620
            (0x17fd, Maxwell),   // Tesla M40
            (0x15f8, Pascal),    // Tesla P100
            (0x1bb3, Pascal),    // Tesla P4
            (0x1db4, Volta),     // Tesla V100 PCIe
            (0x1eb8, Turing),    // Tesla T4
            (0x2182, Turing),    // GTX 1660 Ti
            (0x20b0, Ampere),    // A100 SXM4
            (0x20f1, Ampere),    // A100 PCIe
            (0x2204, Ampere),    // RTX 3090
            (0x2531, Ampere),    // RTX A2000
            (0x2330, Hopper),    // H100 SXM5
            (0x2335, Hopper),    // H200
            (0x2684, Ada),       // RTX 4090
            (0x26b5, Ada),       // L40
            (0x27b8, Ada),       // L4
            (0x2901, Blackwell), // B200
            (0x2b85, Blackwell), // RTX 5090
        ];
        for (id, arch) in boards {
            assert_eq!(GpuArchitecture::from_device_id(id), Some(arch), "{id:#06x}");
        }
        assert_eq!(GpuArchitecture::from_device_id(0x0020), None);
    }

    #[test]
    fn ranges_do_not_overlap() {
        for (i, a) in ARCHITECTURE_RANGES.iter().enumerate() {
            assert!(a.0 <= a.1);
            for b in &ARCHITECTURE_RANGES[i + 1..] {
                assert!(a.1 < b.0 || b.1 < a.0, "{a:x?} overlaps {b:x?}");
            }
        }
    }

    #[test]
    fn functions_classified_by_class_code() {
        let cases = [
            (0x030000, NvidiaFunction::Gpu),
            (0x030200, NvidiaFunction::Gpu),
            (0x040300, NvidiaFunction::Audio),
            (0x0c0330, NvidiaFunction::Usb),
            (0x0c8000, NvidiaFunction::SerialBus),
            (0x068000, NvidiaFunction::NvSwitch),
            (0x060400, NvidiaFunction::Bridge),
            (0x020000, NvidiaFunction::Other),
        ];
        for (class, function) in cases {
            assert_eq!(
                NvidiaFunction::classify(ClassCode(class)),
                function,
                "{class:06x}"
            );
        }
        let gpu = NvidiaInfo::identify(0x10de, 0x2330, ClassCode(0x030200)).unwrap();
        assert_eq!(gpu.architecture, Some(Hopper));
        let audio = NvidiaInfo::identify(0x10de, 0x22ba, ClassCode(0x040300)).unwrap();
        assert_eq!(
            (audio.function, audio.architecture),
            (NvidiaFunction::Audio, None)
        );
        assert_eq!(
            NvidiaInfo::identify(0x8086, 0x2330, ClassCode(0x030200)),
            None
        );
    }
}
