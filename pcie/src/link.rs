//! PCIe link speed and width (`current_link_speed`, `max_link_width`, ...).

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};

/// A link speed as the kernel prints it (`16.0 GT/s PCIe`), kept in tenths of GT/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkSpeed {
    deci_gts: u32,
}

impl LinkSpeed {
    /// A speed of `deci_gts` tenths of GT/s (160 is 16.0 GT/s).
    pub fn from_gts_tenths(deci_gts: u32) -> Self {
        Self { deci_gts }
    }

    /// The speed in GT/s.
    pub fn gts(&self) -> f64 {
        f64::from(self.deci_gts) / 10.0
    }

    /// PCIe generation for the standard rates, `None` for anything else.
    pub fn generation(&self) -> Option<u8> {
        Some(match self.deci_gts {
            25 => 1,
            50 => 2,
            80 => 3,
            160 => 4,
            320 => 5,
            640 => 6,
            _ => return None,
        })
    }

    /// Parses `2.5 GT/s PCIe`, `8.0 GT/s PCIe`, older `8 GT/s`. `Unknown` (link down or
    /// not reported) is `None`.
    pub(crate) fn parse(path: &Path, value: &str) -> Result<Option<Self>> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("unknown") || value.is_empty() {
            return Ok(None);
        }
        let bad = || Error::parse(path, value, "a link speed such as \"16.0 GT/s PCIe\"");
        let number = value.split_whitespace().next().ok_or_else(bad)?;
        if !value[number.len()..].trim_start().starts_with("GT/s") {
            return Err(bad());
        }
        let (whole, frac) = number.split_once('.').unwrap_or((number, "0"));
        if frac.len() != 1 {
            return Err(bad());
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let frac: u32 = frac.parse().map_err(|_| bad())?;
        Ok(Some(Self {
            deci_gts: whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(frac))
                .ok_or_else(bad)?,
        }))
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{} GT/s", self.deci_gts / 10, self.deci_gts % 10)
    }
}

impl serde::Serialize for LinkSpeed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_f64(self.gts())
    }
}

/// A PCIe link: what it runs at now and what it could run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Link {
    /// GT/s in JSON; `None` when the kernel says `Unknown`.
    pub current_speed: Option<LinkSpeed>,
    /// Lanes in use; `None` when the kernel could not read them.
    pub current_width: Option<u8>,
    /// The fastest speed both ends support.
    pub max_speed: Option<LinkSpeed>,
    /// The most lanes both ends support.
    pub max_width: Option<u8>,
}

impl Link {
    /// True when the link trained below what both ends support (often just power
    /// saving on an idle GPU, but worth showing).
    pub fn is_degraded(&self) -> bool {
        let slower = matches!((self.current_speed, self.max_speed), (Some(c), Some(m)) if c < m);
        let narrower = matches!((self.current_width, self.max_width), (Some(c), Some(m)) if c < m);
        slower || narrower
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let speed = |s: Option<LinkSpeed>| s.map_or("unknown".to_string(), |s| s.to_string());
        let width = |w: Option<u8>| w.map_or("?".to_string(), |w| w.to_string());
        write!(
            f,
            "{} x{} (max {} x{})",
            speed(self.current_speed),
            width(self.current_width),
            speed(self.max_speed),
            width(self.max_width)
        )
    }
}

/// Parses a link width (`16`); `0` or `255` mean the kernel could not read it.
pub(crate) fn parse_width(path: &Path, value: &str) -> Result<Option<u8>> {
    let width: u8 = value
        .trim()
        .parse()
        .map_err(|_| Error::parse(path, value, "a link width such as \"16\""))?;
    Ok((width != 0 && width != 255).then_some(width))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speed(s: &str) -> Option<LinkSpeed> {
        LinkSpeed::parse(Path::new("current_link_speed"), s).unwrap()
    }

    #[test]
    fn parses_kernel_speeds() {
        assert_eq!(speed("2.5 GT/s PCIe").unwrap().generation(), Some(1));
        assert_eq!(speed("16.0 GT/s PCIe").unwrap().generation(), Some(4));
        assert_eq!(speed("32.0 GT/s PCIe").unwrap().to_string(), "32.0 GT/s");
        assert_eq!(speed("8 GT/s").unwrap().generation(), Some(3));
        assert_eq!(speed("Unknown"), None);
    }

    #[test]
    fn rejects_garbage_speed_with_path() {
        for bad in [
            "fast",
            "16.00 GT/s",
            "x GT/s",
            "16.0 Gb/s",
            "429496729.9 GT/s",
            "4294967295.0 GT/s",
        ] {
            let err = LinkSpeed::parse(Path::new("/d/max_link_speed"), bad).unwrap_err();
            assert!(err.to_string().starts_with("/d/max_link_speed:"), "{err}");
        }
    }

    #[test]
    fn widths_and_degradation() {
        assert_eq!(parse_width(Path::new("w"), "16").unwrap(), Some(16));
        assert_eq!(parse_width(Path::new("w"), "0").unwrap(), None);
        assert!(parse_width(Path::new("w"), "x16").is_err());
        let link = Link {
            current_speed: speed("2.5 GT/s PCIe"),
            current_width: Some(16),
            max_speed: speed("16.0 GT/s PCIe"),
            max_width: Some(16),
        };
        assert!(link.is_degraded());
        assert_eq!(link.to_string(), "2.5 GT/s x16 (max 16.0 GT/s x16)");
    }
}
