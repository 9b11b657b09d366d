//! PCI addresses (`domain:bus:device.function`, the kernel's "BDF").

use std::fmt;
use std::str::FromStr;

/// Why a string is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// Not of the form `[DDDD:]BB:DD.F`.
    #[error("{input:?}: expected [DDDD:]BB:DD.F, e.g. 0000:01:00.0")]
    Format {
        /// The text (its first bytes when long).
        input: String,
    },
    /// The device or function number is too large.
    #[error("{input:?}: {field} {value:#x} out of range (max {max:#x})")]
    OutOfRange {
        /// The text.
        input: String,
        /// `device` or `function`.
        field: &'static str,
        /// The number given.
        value: u32,
        /// The largest allowed.
        max: u32,
    },
}

/// A PCI function address. Ordered like the kernel enumerates: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI segment (domain).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, up to [`PciAddress::MAX_DEVICE`].
    pub device: u8,
    /// Function number, up to [`PciAddress::MAX_FUNCTION`].
    pub function: u8,
}

impl PciAddress {
    /// Largest device number.
    pub const MAX_DEVICE: u8 = 0x1f;
    /// Largest function number.
    pub const MAX_FUNCTION: u8 = 0x7;

    /// Builds an address, checking the device and function ranges.
    pub fn new(domain: u16, bus: u8, device: u8, function: u8) -> Result<Self, AddressError> {
        let addr = Self {
            domain,
            bus,
            device,
            function,
        };
        let input = || addr.to_string();
        if device > Self::MAX_DEVICE {
            return Err(AddressError::OutOfRange {
                input: input(),
                field: "device",
                value: device.into(),
                max: Self::MAX_DEVICE.into(),
            });
        }
        if function > Self::MAX_FUNCTION {
            return Err(AddressError::OutOfRange {
                input: input(),
                field: "function",
                value: function.into(),
                max: Self::MAX_FUNCTION.into(),
            });
        }
        Ok(addr)
    }

    /// True when `other` is another function of the same physical slot (same
    /// domain, bus and device): a GPU's audio or USB controller, for instance.
    pub fn same_slot(&self, other: &PciAddress) -> bool {
        self.domain == other.domain && self.bus == other.bus && self.device == other.device
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for PciAddress {
    type Err = AddressError;

    /// Accepts `DDDD:BB:DD.F` and the short `BB:DD.F` (domain 0), hex, either case.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let format = || AddressError::Format {
            input: crate::error::quote(input),
        };
        let (rest, function) = input.rsplit_once('.').ok_or_else(format)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, s] => (*d, *b, *s),
            [b, s] => ("0", *b, *s),
            _ => return Err(format()),
        };
        let hex = |s: &str, max_len: usize| -> Result<u32, AddressError> {
            if s.is_empty() || s.len() > max_len || !s.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format());
            }
            u32::from_str_radix(s, 16).map_err(|_| format())
        };
        let (domain, bus, device, function) = (
            hex(domain, 4)?,
            hex(bus, 2)?,
            hex(device, 2)?,
            hex(function, 1)?,
        );
        // Lengths bound domain and bus; device and function are checked by `new`.
        let narrow = |v: u32| u8::try_from(v).unwrap_or(u8::MAX);
        Self::new(domain as u16, bus as u8, narrow(device), narrow(function)).map_err(|e| match e {
            AddressError::OutOfRange {
                field, value, max, ..
            } => AddressError::OutOfRange {
                input: input.to_string(),
                field,
                value,
                max,
            },
            other => other,
        })
    }
}

impl serde::Serialize for PciAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PciAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_and_short_forms() {
        let a: PciAddress = "0000:1b:00.0".parse().unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0x1b, 0, 0));
        let b: PciAddress = "01:00.1".parse().unwrap();
        assert_eq!(b.to_string(), "0000:01:00.1");
        let c: PciAddress = "ABCD:FF:1F.7".parse().unwrap();
        assert_eq!(c.to_string(), "abcd:ff:1f.7");
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "",
            "0000:01:00",
            "1:2:3:4.0",
            "0000:01:00.",
            "0000:0g:00.0",
            "00000:01:00.0",
            "0000:001:00.0",
            "0000:01:00.10",
            " 0000:01:00.0",
            "0000:01:00.0\n",
        ] {
            assert!(
                matches!(bad.parse::<PciAddress>(), Err(AddressError::Format { .. })),
                "{bad:?} should be a format error"
            );
        }
    }

    #[test]
    fn rejects_out_of_range_device_and_function() {
        let err = "0000:01:20.0".parse::<PciAddress>().unwrap_err();
        assert_eq!(
            err,
            AddressError::OutOfRange {
                input: "0000:01:20.0".into(),
                field: "device",
                value: 0x20,
                max: 0x1f
            }
        );
        let err = "01:00.8".parse::<PciAddress>().unwrap_err();
        assert!(matches!(
            err,
            AddressError::OutOfRange {
                field: "function",
                value: 8,
                ..
            }
        ));
        assert!(err.to_string().contains("01:00.8"));
    }

    #[test]
    fn orders_like_the_kernel() {
        let mut v: Vec<PciAddress> = [
            "0000:1b:00.0",
            "0000:01:00.1",
            "0000:01:00.0",
            "0001:00:00.0",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        v.sort();
        let s: Vec<String> = v.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            s,
            [
                "0000:01:00.0",
                "0000:01:00.1",
                "0000:1b:00.0",
                "0001:00:00.0"
            ]
        );
    }

    #[test]
    fn same_slot_matches_sibling_functions_only() {
        let gpu: PciAddress = "0000:01:00.0".parse().unwrap();
        assert!(gpu.same_slot(&"0000:01:00.1".parse().unwrap()));
        assert!(!gpu.same_slot(&"0000:01:01.0".parse().unwrap()));
        assert!(!gpu.same_slot(&"0001:01:00.1".parse().unwrap()));
    }
}
