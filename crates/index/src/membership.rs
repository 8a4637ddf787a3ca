//! Which galleries each face in one shard belongs to.
//!
//! Gallery names are interned per shard to u32 so a face costs a few bytes per gallery, and
//! each gallery keeps its own member set so the search predicate is one set lookup and the
//! "is this gallery tiny?" question is O(1). Interned names are never dropped: galleries are
//! few and long-lived, and stable ids keep snapshots simple.

use std::collections::HashMap;

use crate::ids::{IdMap, IdSet};

#[derive(Default, Clone)]
pub struct Membership {
    names: Vec<String>,
    by_name: HashMap<String, u32>,
    /// Sorted, deduplicated gallery ids per face; faces in no gallery are absent.
    of_face: IdMap<Box<[u32]>>,
    /// Indexed by gallery id.
    members: Vec<IdSet>,
}

impl Membership {
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&g) = self.by_name.get(name) {
            return g;
        }
        let g = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.by_name.insert(name.to_owned(), g);
        self.members.push(IdSet::default());
        g
    }

    pub fn gallery(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub fn set<S: AsRef<str>>(&mut self, face: u64, galleries: &[S]) {
        let mut gs: Vec<u32> = galleries.iter().map(|g| self.intern(g.as_ref())).collect();
        gs.sort_unstable();
        gs.dedup();
        self.set_ids(face, gs.into_boxed_slice());
    }

    fn set_ids(&mut self, face: u64, gs: Box<[u32]>) {
        self.clear(face);
        if gs.is_empty() {
            return;
        }
        for &g in gs.iter() {
            self.members[g as usize].insert(face);
        }
        self.of_face.insert(face, gs);
    }

    pub fn clear(&mut self, face: u64) {
        if let Some(old) = self.of_face.remove(&face) {
            for g in old.iter() {
                self.members[*g as usize].remove(&face);
            }
        }
    }

    #[inline]
    pub fn contains(&self, gallery: u32, face: u64) -> bool {
        self.members[gallery as usize].contains(&face)
    }

    pub fn count(&self, gallery: u32) -> usize {
        self.members[gallery as usize].len()
    }

    pub fn members(&self, gallery: u32) -> impl Iterator<Item = u64> + '_ {
        self.members[gallery as usize].iter().copied()
    }

    pub fn galleries_of(&self, face: u64) -> Vec<&str> {
        self.of_face
            .get(&face)
            .map(|gs| {
                gs.iter()
                    .map(|&g| self.names[g as usize].as_str())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn faces(&self) -> impl Iterator<Item = (u64, &[u32])> + '_ {
        self.of_face.iter().map(|(&f, gs)| (f, &gs[..]))
    }

    pub fn face_count(&self) -> usize {
        self.of_face.len()
    }

    /// Rebuilds from a snapshot; `None` when the data is inconsistent (gallery id out of range).
    pub fn restore(names: Vec<String>, faces: Vec<(u64, Vec<u32>)>) -> Option<Membership> {
        let mut m = Membership::default();
        for n in names {
            let before = m.names.len();
            if m.intern(&n) as usize != before {
                return None; // duplicate name
            }
        }
        for (face, mut gs) in faces {
            if gs.iter().any(|&g| g as usize >= m.names.len()) {
                return None;
            }
            gs.sort_unstable();
            gs.dedup();
            m.set_ids(face, gs.into_boxed_slice());
        }
        Some(m)
    }

    /// Approximate heap bytes, for health reporting.
    pub fn heap_bytes(&self) -> usize {
        let faces = self.of_face.capacity() * (8 + 16 + 8)
            + self.of_face.values().map(|g| g.len() * 4).sum::<usize>();
        let sets: usize = self.members.iter().map(|s| s.capacity() * 9).sum();
        faces + sets + self.names.iter().map(|n| n.len() * 2 + 48).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replace_clear() {
        let mut m = Membership::default();
        m.set(1, &["a", "b", "a"]);
        m.set(2, &["b"]);
        let a = m.gallery("a").unwrap();
        let b = m.gallery("b").unwrap();
        assert_eq!((m.count(a), m.count(b)), (1, 2));
        m.set(1, &["b"]);
        assert_eq!((m.count(a), m.count(b)), (0, 2));
        assert_eq!(m.galleries_of(1), ["b"]);
        m.clear(2);
        assert!(!m.contains(b, 2));
        m.set(1, &[] as &[&str]);
        assert_eq!(m.face_count(), 0);
    }
}
