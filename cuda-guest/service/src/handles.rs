//! Tables of opaque, generation-tagged handles, one per object kind and session.
//!
//! A handle is `tag << 56 | generation << 32 | slot`, XORed below the tag with a secret
//! of the session: the tag names the kind (a module handle given as a stream is
//! refused), the generation changes every time a slot is reused (a freed handle is
//! caught, not aliased), and the secret makes handles of one session meaningless in
//! another and hard to guess. The tag keeps every handle at or above `1 << 56`, far
//! above the reserved stream values 0, 1 and 2 and the protocol's `0x100`.

/// Kind tags (the top byte of a handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Context = 1,
    Module = 2,
    Function = 3,
    Stream = 4,
    Event = 5,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// One kind's live objects of one session.
#[derive(Debug)]
pub(crate) struct Table<T> {
    kind: Kind,
    key: u64,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
}

const GEN_MASK: u32 = 0x00ff_ffff;

impl<T> Table<T> {
    /// An empty table; `key` is the session's secret (only its low 56 bits are used).
    pub(crate) fn new(kind: Kind, key: u64) -> Self {
        Table {
            kind,
            key: key & 0x00ff_ffff_ffff_ffff,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    fn encode(&self, slot: u32, generation: u32) -> u64 {
        let raw = (u64::from(generation & GEN_MASK) << 32) | u64::from(slot);
        ((self.kind as u64) << 56) | (raw ^ self.key)
    }

    fn decode(&self, handle: u64) -> Option<(usize, u32)> {
        if handle >> 56 != self.kind as u64 {
            return None;
        }
        let raw = (handle & 0x00ff_ffff_ffff_ffff) ^ self.key;
        Some(((raw & 0xffff_ffff) as usize, (raw >> 32) as u32))
    }

    /// Stores `value`; returns its handle.
    pub(crate) fn insert(&mut self, value: T) -> u64 {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            let s = &mut self.slots[i as usize];
            s.generation = s.generation.wrapping_add(1) & GEN_MASK;
            s.value = Some(value);
            let g = s.generation;
            return self.encode(i, g);
        }
        let i = self.slots.len() as u32;
        self.slots.push(Slot {
            generation: 0,
            value: Some(value),
        });
        self.encode(i, 0)
    }

    /// The live object of `handle`.
    pub(crate) fn get(&self, handle: u64) -> Option<&T> {
        let (i, g) = self.decode(handle)?;
        let s = self.slots.get(i)?;
        (s.generation == g).then_some(s.value.as_ref()?)
    }

    /// The live object of `handle`, mutably.
    pub(crate) fn get_mut(&mut self, handle: u64) -> Option<&mut T> {
        let (i, g) = self.decode(handle)?;
        let s = self.slots.get_mut(i)?;
        if s.generation != g {
            return None;
        }
        s.value.as_mut()
    }

    /// Takes the object of `handle` out; its handle is dead from now on.
    pub(crate) fn remove(&mut self, handle: u64) -> Option<T> {
        let (i, g) = self.decode(handle)?;
        let s = self.slots.get_mut(i)?;
        if s.generation != g {
            return None;
        }
        let v = s.value.take()?;
        self.free.push(i as u32);
        self.live -= 1;
        Some(v)
    }

    /// Takes every object out (teardown), with its handle.
    pub(crate) fn drain(&mut self) -> Vec<(u64, T)> {
        let mut out = Vec::with_capacity(self.live);
        for i in 0..self.slots.len() {
            if let Some(v) = self.slots[i].value.take() {
                out.push((self.encode(i as u32, self.slots[i].generation), v));
                self.free.push(i as u32);
            }
        }
        self.live = 0;
        out
    }

    /// How many objects are live.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Handles and objects, for lookups by value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((self.encode(i as u32, s.generation), s.value.as_ref()?)))
    }

    /// Takes out every object for which `pick` holds, with its handle (their handles are
    /// dead from now on).
    pub(crate) fn remove_where(&mut self, mut pick: impl FnMut(&T) -> bool) -> Vec<(u64, T)> {
        let mut out = Vec::new();
        for i in 0..self.slots.len() {
            if self.slots[i].value.as_ref().is_some_and(&mut pick) {
                if let Some(v) = self.slots[i].value.take() {
                    out.push((self.encode(i as u32, self.slots[i].generation), v));
                    self.free.push(i as u32);
                    self.live -= 1;
                }
            }
        }
        out
    }
}

/// Why a handle names no object of the context a request runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Freed, made up, of another kind or of another session.
    Dead,
    /// A live object of another context of the session.
    Foreign,
}

/// One kind's live objects of one session, each made in one of its contexts (by the
/// guest's context handle): a lookup finds an object only in its own context, as the
/// driver refuses a handle of another context.
#[derive(Debug)]
pub(crate) struct Scoped<T> {
    table: Table<(u64, T)>,
}

impl<T> Scoped<T> {
    /// An empty table (see [`Table::new`]).
    pub(crate) fn new(kind: Kind, key: u64) -> Self {
        Scoped {
            table: Table::new(kind, key),
        }
    }

    /// Stores `value`, made in context `ctx`; returns its handle.
    pub(crate) fn insert(&mut self, ctx: u64, value: T) -> u64 {
        self.table.insert((ctx, value))
    }

    /// The live object of `handle` in context `ctx`.
    pub(crate) fn get(&self, handle: u64, ctx: u64) -> Result<&T, Miss> {
        match self.table.get(handle) {
            Some((c, v)) if *c == ctx => Ok(v),
            Some(_) => Err(Miss::Foreign),
            None => Err(Miss::Dead),
        }
    }

    /// The live object of `handle` in context `ctx`, mutably.
    pub(crate) fn get_mut(&mut self, handle: u64, ctx: u64) -> Result<&mut T, Miss> {
        match self.table.get_mut(handle) {
            Some((c, v)) if *c == ctx => Ok(v),
            Some(_) => Err(Miss::Foreign),
            None => Err(Miss::Dead),
        }
    }

    /// Takes the object of `handle` in context `ctx` out; its handle is dead from now on.
    pub(crate) fn remove(&mut self, handle: u64, ctx: u64) -> Result<T, Miss> {
        self.get(handle, ctx)?;
        self.table.remove(handle).map(|(_, v)| v).ok_or(Miss::Dead)
    }

    /// Takes out every object of context `ctx` (its teardown), with its handle.
    pub(crate) fn remove_context(&mut self, ctx: u64) -> Vec<(u64, T)> {
        self.table
            .remove_where(|(c, _)| *c == ctx)
            .into_iter()
            .map(|(h, (_, v))| (h, v))
            .collect()
    }

    /// Takes out every object for which `pick` holds (all contexts).
    pub(crate) fn remove_where(&mut self, mut pick: impl FnMut(&T) -> bool) -> Vec<(u64, T)> {
        self.table
            .remove_where(|(_, v)| pick(v))
            .into_iter()
            .map(|(h, (_, v))| (h, v))
            .collect()
    }

    /// How many objects are live (all contexts).
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// The handles and objects of context `ctx`.
    pub(crate) fn of(&self, ctx: u64) -> impl Iterator<Item = (u64, &T)> {
        self.table
            .iter()
            .filter(move |(_, (c, _))| *c == ctx)
            .map(|(h, (_, v))| (h, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_foreign_and_made_up_handles_are_refused() {
        let mut a: Table<u32> = Table::new(Kind::Stream, 0x1234_5678_9abc);
        let b: Table<u32> = Table::new(Kind::Stream, 0x0fed_cba9_8765);
        let h = a.insert(7);
        assert!(h >= 1 << 56);
        assert_eq!(a.get(h), Some(&7));
        assert_eq!(b.get(h), None, "another session's key");
        assert_eq!(a.get(h ^ 1), None);
        assert_eq!(a.get(0x100), None);
        assert_eq!(a.remove(h), Some(7));
        assert_eq!(a.get(h), None, "freed");
        let h2 = a.insert(8);
        assert_ne!(h, h2, "a reused slot has a new generation");
        assert_eq!(a.get(h), None);
        assert_eq!(a.get(h2), Some(&8));
        let m: Table<u32> = Table::new(Kind::Module, 0x1234_5678_9abc);
        assert_eq!(m.get(h2), None, "wrong kind");
        assert_eq!(a.len(), 1);
        assert_eq!(a.drain().len(), 1);
        assert_eq!(a.len(), 0);
    }

    #[test]
    fn a_scoped_handle_is_found_in_its_own_context_only() {
        let mut t: Scoped<u32> = Scoped::new(Kind::Event, 0x5555_aaaa_1234);
        let (x, y) = (t.insert(10, 1), t.insert(20, 2));
        let z = t.insert(10, 3);
        assert_eq!(t.get(x, 10), Ok(&1));
        assert_eq!(t.get(x, 20), Err(Miss::Foreign));
        assert_eq!(t.get(x ^ (1 << 40), 10), Err(Miss::Dead));
        assert_eq!(t.remove(y, 10), Err(Miss::Foreign));
        assert_eq!(t.get(y, 20), Ok(&2), "a refused removal removes nothing");
        *t.get_mut(z, 10).unwrap() = 4;
        assert_eq!(t.of(10).map(|(_, v)| *v).collect::<Vec<_>>(), [1, 4]);
        let gone = t.remove_context(10);
        assert_eq!(gone.iter().map(|(h, _)| *h).collect::<Vec<_>>(), [x, z]);
        assert_eq!(
            (t.len(), t.get(x, 10), t.get(y, 20)),
            (1, Err(Miss::Dead), Ok(&2))
        );
        assert_eq!(t.remove_where(|v| *v == 2).len(), 1);
        assert_eq!(t.len(), 0);
    }
}
