//! Full-precision copies of vectors for exact re-ranking of f16/i8 candidates.
//!
//! One contiguous slab rather than a `Box<[f32]>` per face: at a million faces the
//! per-allocation overhead and fragmentation of separate boxes would be noticeable, and a
//! slab with a free list reuses the slots of deleted faces.

use crate::ids::IdMap;

#[derive(Clone)]
pub struct ExactStore {
    dims: usize,
    slab: Vec<f32>,
    slot_of: IdMap<u32>,
    free: Vec<u32>,
}

impl ExactStore {
    pub fn new(dims: usize) -> Self {
        ExactStore {
            dims,
            slab: Vec::new(),
            slot_of: IdMap::default(),
            free: Vec::new(),
        }
    }

    pub fn put(&mut self, id: u64, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dims);
        let slot = match self.slot_of.get(&id) {
            Some(&s) => s,
            None => {
                let s = match self.free.pop() {
                    Some(s) => s,
                    None => {
                        let s = (self.slab.len() / self.dims) as u32;
                        self.slab.resize(self.slab.len() + self.dims, 0.0);
                        s
                    }
                };
                self.slot_of.insert(id, s);
                s
            }
        };
        let at = slot as usize * self.dims;
        self.slab[at..at + self.dims].copy_from_slice(v);
    }

    pub fn get(&self, id: u64) -> Option<&[f32]> {
        self.slot_of.get(&id).map(|&s| {
            let at = s as usize * self.dims;
            &self.slab[at..at + self.dims]
        })
    }

    pub fn remove(&mut self, id: u64) {
        if let Some(s) = self.slot_of.remove(&id) {
            self.free.push(s);
        }
    }

    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &[f32])> + '_ {
        self.slot_of.keys().map(|&id| (id, self.get(id).unwrap()))
    }

    pub fn heap_bytes(&self) -> usize {
        self.slab.capacity() * 4 + self.slot_of.capacity() * 13 + self.free.capacity() * 4
    }

    pub fn reserve(&mut self, faces: usize) {
        self.slab.reserve(faces.saturating_mul(self.dims));
        self.slot_of.reserve(faces);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_remove_reuses_slots() {
        let mut s = ExactStore::new(2);
        s.put(7, &[1.0, 2.0]);
        s.put(8, &[3.0, 4.0]);
        s.put(7, &[5.0, 6.0]);
        assert_eq!(s.get(7), Some(&[5.0, 6.0][..]));
        s.remove(7);
        assert_eq!(s.get(7), None);
        s.put(9, &[0.5, 0.5]);
        assert_eq!(s.slab.len(), 4, "freed slot reused");
        assert_eq!(s.len(), 2);
    }
}
