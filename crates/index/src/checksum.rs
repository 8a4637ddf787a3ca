//! A fast non-cryptographic 64-bit checksum for snapshot files.
//!
//! Snapshots are gigabytes, so a byte-at-a-time hash would dominate load time; this one
//! consumes 32-byte blocks in four independent lanes (so the multiplies pipeline) and is
//! only meant to catch torn writes and bit rot, not tampering. The format is part of the
//! snapshot format: changing it invalidates every snapshot on disk (which then rebuild).

use std::io::Read;

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

#[derive(Clone)]
pub struct Checksum {
    lanes: [u64; 4],
    tail: [u8; 32],
    tail_len: usize,
    total: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Self::new()
    }
}

impl Checksum {
    pub fn new() -> Self {
        Checksum {
            lanes: [K1, K2, !K1, !K2],
            tail: [0; 32],
            tail_len: 0,
            total: 0,
        }
    }

    #[inline]
    fn block(&mut self, b: &[u8]) {
        for (lane, word) in self.lanes.iter_mut().zip(b.chunks_exact(8)) {
            let w = u64::from_le_bytes(word.try_into().unwrap());
            *lane = (*lane ^ w)
                .wrapping_mul(K1)
                .rotate_left(31)
                .wrapping_mul(K2);
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.tail_len > 0 {
            let take = (32 - self.tail_len).min(data.len());
            self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&data[..take]);
            self.tail_len += take;
            data = &data[take..];
            if self.tail_len < 32 {
                return;
            }
            let t = self.tail;
            self.block(&t);
            self.tail_len = 0;
        }
        let mut blocks = data.chunks_exact(32);
        for b in &mut blocks {
            self.block(b);
        }
        let rest = blocks.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    pub fn finish(&self) -> u64 {
        let mut last = [0u8; 32];
        last[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        let mut c = self.clone();
        c.block(&last);
        let mut h = self.total.wrapping_mul(K2);
        for lane in c.lanes {
            h = crate::route::mix64(h ^ lane);
        }
        h
    }

    /// Checksum of everything `reader` yields.
    pub fn of_reader(mut reader: impl Read) -> std::io::Result<u64> {
        let mut c = Checksum::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                return Ok(c.finish());
            }
            c.update(&buf[..n]);
        }
    }

    #[cfg(test)]
    pub fn of(data: &[u8]) -> u64 {
        let mut c = Checksum::new();
        c.update(data);
        c.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_equals_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let whole = Checksum::of(&data);
        for split in [0, 1, 7, 31, 32, 33, 500, 999, 1000] {
            let mut c = Checksum::new();
            c.update(&data[..split]);
            c.update(&data[split..]);
            assert_eq!(c.finish(), whole, "split at {split}");
        }
    }

    #[test]
    fn detects_single_bit_flips_and_length() {
        let data = vec![0u8; 4096];
        let base = Checksum::of(&data);
        for pos in [0, 1, 100, 4095] {
            let mut d = data.clone();
            d[pos] ^= 0x10;
            assert_ne!(Checksum::of(&d), base);
        }
        assert_ne!(Checksum::of(&data[..4095]), base);
    }
}
