//! Little-endian field readers and writers. The reader checks every length against a
//! limit and against the bytes left *before* allocating, and reports the field's name
//! and its offset in the frame.

use super::error::{EncodeError, FieldError};

/// A cursor over one frame's payload.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the frame (for error messages).
    base: usize,
    /// Leave bulk data in the buffer ([`Reader::data`]) instead of copying it.
    lend: bool,
    /// Where the bulk data left in the buffer is: offset in `buf`, length.
    pub(crate) lent: Option<(usize, usize)>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], base: usize) -> Self {
        Reader {
            buf,
            pos: 0,
            base,
            lend: false,
            lent: None,
        }
    }

    /// A reader that leaves bulk data in `buf` (see [`Reader::data`]).
    pub(crate) fn lending(buf: &'a [u8], base: usize) -> Self {
        Reader {
            lend: true,
            ..Reader::new(buf, base)
        }
    }

    /// `n` bytes of bulk data (inline copy data, a ping's echo): copied out, or, for a
    /// lending reader, left in place (recorded in `lent`) with an empty vector returned.
    pub(crate) fn data(&mut self, field: &'static str, n: u64) -> Result<Vec<u8>, FieldError> {
        let at = self.pos;
        let s = self.take(field, n)?;
        if self.lend {
            self.lent = Some((at, s.len()));
            Ok(Vec::new())
        } else {
            Ok(s.to_vec())
        }
    }

    /// Offset in the frame of the next byte.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, field: &'static str, n: u64) -> Result<&'a [u8], FieldError> {
        let have = self.remaining();
        if n > have as u64 {
            return Err(FieldError::Truncated {
                field,
                offset: self.offset(),
                need: n,
                have,
            });
        }
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FieldError> {
        let s = self.take(field, N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, FieldError> {
        self.array(field).map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, FieldError> {
        self.array(field).map(u32::from_le_bytes)
    }
    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32, FieldError> {
        self.array(field).map(i32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, FieldError> {
        self.array(field).map(u64::from_le_bytes)
    }
    pub(crate) fn uuid(&mut self, field: &'static str) -> Result<[u8; 16], FieldError> {
        self.array(field)
    }

    /// A `u32` count or length, checked against `max`.
    pub(crate) fn len_u32(&mut self, field: &'static str, max: u32) -> Result<u32, FieldError> {
        let offset = self.offset();
        let v = self.u32(field)?;
        if v > max {
            return Err(FieldError::LimitExceeded {
                field,
                offset,
                value: v.into(),
                max: max.into(),
            });
        }
        Ok(v)
    }

    /// `u32` length then that many bytes, at most `max`.
    pub(crate) fn blob(&mut self, field: &'static str, max: u32) -> Result<Vec<u8>, FieldError> {
        let n = self.len_u32(field, max)?;
        Ok(self.take(field, n.into())?.to_vec())
    }

    /// `u32` length then that many bytes of UTF-8, at most `max`.
    pub(crate) fn string(&mut self, field: &'static str, max: u32) -> Result<String, FieldError> {
        let n = self.len_u32(field, max)?;
        let offset = self.offset();
        let bytes = self.take(field, n.into())?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(FieldError::InvalidUtf8 { field, offset }),
        }
    }

    /// `count` items of `item_size` bytes must still be in the frame; checked before a
    /// vector of them is allocated.
    pub(crate) fn check_items(
        &self,
        field: &'static str,
        count: u32,
        item_size: u64,
    ) -> Result<(), FieldError> {
        let need = u64::from(count) * item_size;
        let have = self.remaining();
        if need > have as u64 {
            return Err(FieldError::Truncated {
                field,
                offset: self.offset(),
                need,
                have,
            });
        }
        Ok(())
    }

    /// The payload must be used up.
    pub(crate) fn finish(self) -> Result<(), FieldError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(FieldError::TrailingBytes {
                offset: self.offset(),
                count,
            }),
        }
    }
}

/// Appends little-endian fields to a buffer.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    pub(crate) out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    pub(crate) fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.out.extend_from_slice(v);
    }
    /// A length as `u32`.
    pub(crate) fn len_u32(&mut self, field: &'static str, len: usize) -> Result<(), EncodeError> {
        let n = u32::try_from(len).map_err(|_| EncodeError::TooLong {
            field,
            len: len as u64,
        })?;
        self.u32(n);
        Ok(())
    }
    /// `u32` length then the bytes.
    pub(crate) fn blob(&mut self, field: &'static str, v: &[u8]) -> Result<(), EncodeError> {
        self.len_u32(field, v.len())?;
        self.bytes(v);
        Ok(())
    }
}
