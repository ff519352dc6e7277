//! Short names (`sm_90a`, `12.8`) built on the stack, for serializing the entries of a
//! library: cuFFT's 24,454 modules are listed with several names each, and a `String` per
//! name (and `fmt`'s machinery per number) was most of what rendering them cost.

/// A name of at most [`ShortName::CAPACITY`] bytes, built from text and numbers.
pub(crate) struct ShortName {
    bytes: [u8; ShortName::CAPACITY],
    len: usize,
}

impl ShortName {
    /// Room for `compute_` and two `u32` numbers with a separator and a suffix.
    pub(crate) const CAPACITY: usize = 32;

    /// The empty name.
    pub(crate) fn new() -> ShortName {
        ShortName {
            bytes: [0; ShortName::CAPACITY],
            len: 0,
        }
    }

    /// The name with `text` appended.
    pub(crate) fn text(mut self, text: &str) -> ShortName {
        let end = self.len + text.len();
        assert!(
            end <= Self::CAPACITY,
            "a short name holds {} bytes",
            Self::CAPACITY
        );
        self.bytes[self.len..end].copy_from_slice(text.as_bytes());
        self.len = end;
        self
    }

    /// The name with `number` appended in decimal.
    pub(crate) fn number(self, number: u32) -> ShortName {
        let mut digits = itoa::Buffer::new();
        let text = digits.format(number);
        self.text(text)
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        // Only whole `&str`s were appended.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_their_pieces_in_order() {
        let name = ShortName::new()
            .text("compute_")
            .number(4_294_967_295)
            .text("f");
        assert_eq!(name.as_str(), "compute_4294967295f");
        let name = ShortName::new().number(0).text(".").number(12);
        assert_eq!(name.as_str(), "0.12");
    }
}
