//! A free-list arena: indices are reused, so steady state allocates nothing.

/// A free-list arena: indices are reused, so steady state allocates nothing.
pub(super) struct Slab<T> {
    pub(super) items: Vec<T>,
    pub(super) free: Vec<u32>,
}

impl<T: Copy> Slab<T> {
    pub(super) fn new() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    #[inline]
    pub(super) fn insert(&mut self, item: T) -> u32 {
        if let Some(index) = self.free.pop() {
            self.items[index as usize] = item;
            index
        } else {
            self.items.push(item);
            (self.items.len() - 1) as u32
        }
    }

    #[inline]
    pub(super) fn take(&mut self, index: u32) -> T {
        self.free.push(index);
        self.items[index as usize]
    }

    #[inline]
    pub(super) fn get_mut(&mut self, index: u32) -> &mut T {
        &mut self.items[index as usize]
    }
}
