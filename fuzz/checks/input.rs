//! A reader of fuzz input: every call takes bytes from the front and returns a
//! default once they run out, so any byte string decodes to some case.

/// The undecoded rest of a fuzz input.
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Input { bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A number in `0..=max`.
    pub fn upto(&mut self, max: usize) -> usize {
        let n = if max <= usize::from(u8::MAX) {
            usize::from(self.u8())
        } else {
            usize::from(self.u16())
        };
        n % (max + 1)
    }

    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        head
    }

    /// Bytes up to (not including) the next `end` byte, which is consumed.
    pub fn until(&mut self, end: u8) -> &'a [u8] {
        match self.bytes.iter().position(|&b| b == end) {
            Some(i) => {
                let head = &self.bytes[..i];
                self.bytes = &self.bytes[i + 1..];
                head
            }
            None => self.take(self.bytes.len()),
        }
    }

    /// A byte string of length-prefixed size (one byte).
    pub fn short_bytes(&mut self) -> &'a [u8] {
        let n = usize::from(self.u8());
        self.take(n)
    }
}
