//! The in-flight byte budgets: READ replies and WRITE payloads are charged
//! against a per-connection and a server-wide [`ByteBudget`] before a
//! request is read or executed, and given back when its [`Charge`] drops.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::{Shared, MAX_EXTENTS_PER_REPLY};
use crate::proto::*;

/// What a BLOCK_STATUS request is charged: its largest reply.
const BLOCK_STATUS_CHARGE_BYTES: u64 =
    (MAX_EXTENTS_PER_REPLY * 8 + STRUCTURED_REPLY_HEADER_BYTES + 4) as u64;

/// Bytes of READ replies and WRITE payloads held in memory, up to a limit.
/// A request takes its bytes before the server reads its payload or
/// executes it and gives them back once its reply is written, so a client
/// that stops reading replies holds at most the limit. Taking and giving
/// back are atomic operations (no lock on the request path); only a request
/// that must wait takes the lock.
pub(super) struct ByteBudget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
    /// The most bytes held at once.
    peak_bytes: AtomicU64,
    /// Requests waiting for bytes; releases notify only when there are any.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

/// How often a wait for in-flight bytes checks whether to give up.
const BUDGET_POLL: Duration = Duration::from_millis(50);

impl ByteBudget {
    pub(super) fn new(limit_bytes: u64) -> ByteBudget {
        ByteBudget {
            limit_bytes,
            used_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    pub(super) fn try_acquire(&self, bytes: u64) -> bool {
        let taken = self
            .used_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= self.limit_bytes)
            });
        match taken {
            Ok(before) => {
                self.peak_bytes.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Waits until `bytes` fit; false when `give_up` turns true first.
    pub(super) fn acquire(&self, bytes: u64, give_up: &dyn Fn() -> bool) -> bool {
        if self.try_acquire(bytes) {
            return true;
        }
        let mut guard = self.lock.lock();
        // Counted before the next try, so a release after a failed try sees
        // a waiter and notifies (under the lock, so not before the wait).
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let acquired = loop {
            if self.try_acquire(bytes) {
                break true;
            }
            if give_up() {
                break false;
            }
            self.freed.wait_for(&mut guard, BUDGET_POLL);
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        acquired
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let before = self.used_bytes.fetch_sub(bytes, Ordering::SeqCst);
        debug_assert!(before >= bytes, "released more than was taken");
        if self.waiters.load(Ordering::SeqCst) > 0 {
            drop(self.lock.lock());
            self.freed.notify_all();
        }
    }

    /// (bytes held now, most bytes held at once)
    pub(super) fn usage(&self) -> (u64, u64) {
        (
            self.used_bytes.load(Ordering::SeqCst),
            self.peak_bytes.load(Ordering::Relaxed),
        )
    }
}

/// Bytes taken from one or two budgets, given back on drop (also when a
/// request is dropped unexecuted or its connection fails mid-way).
pub(super) struct Charge<'a> {
    pub(super) budgets: [Option<&'a ByteBudget>; 2],
    pub(super) bytes: u64,
}

impl<'a> Charge<'a> {
    pub(super) fn none() -> Charge<'a> {
        Charge {
            budgets: [None, None],
            bytes: 0,
        }
    }

    /// Takes `bytes` from `first`, then `second`, waiting for each; `None`
    /// when `give_up` turned true first (nothing is held then).
    pub(super) fn acquire(
        first: &'a ByteBudget,
        second: &'a ByteBudget,
        bytes: u64,
        give_up: &dyn Fn() -> bool,
    ) -> Option<Charge<'a>> {
        if bytes == 0 {
            return Some(Charge::none());
        }
        if !first.acquire(bytes, give_up) {
            return None;
        }
        let mut charge = Charge {
            budgets: [Some(first), None],
            bytes,
        };
        if !second.acquire(bytes, give_up) {
            return None;
        }
        charge.budgets[1] = Some(second);
        Some(charge)
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        // In the reverse order of taking: the server-wide bytes are back
        // before the connection's, so a connection's next request can never
        // hold server-wide bytes beside the ones it is giving back (the
        // server-wide peak of one connection stays within its own limit).
        for budget in self.budgets.iter().rev().flatten() {
            budget.release(self.bytes);
        }
    }
}

/// What a request is charged against the in-flight budgets: the data it
/// brings (WRITE) or makes the server hold (READ, BLOCK_STATUS). Requests
/// refused for their length hold nothing.
pub(super) fn charge_bytes(shared: &Shared, header: &RequestHeader) -> u64 {
    match header.command {
        NBD_CMD_READ | NBD_CMD_WRITE if header.length_bytes <= shared.max_request_bytes => {
            u64::from(header.length_bytes)
        }
        NBD_CMD_BLOCK_STATUS => BLOCK_STATUS_CHARGE_BYTES,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A request that does not fit waits until bytes are given back, gives
    /// up when asked, and the peak is what was held at once.
    #[test]
    fn byte_budget_waits_for_releases_and_gives_up_when_told() {
        let budget = ByteBudget::new(10);
        assert!(budget.try_acquire(6));
        assert!(!budget.try_acquire(5));
        assert!(!budget.acquire(5, &|| true), "gives up at once");
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let acquired = budget.acquire(8, &|| false);
                done.store(true, Ordering::SeqCst);
                acquired
            });
            assert!(budget.try_acquire(4), "the rest still fits");
            assert!(!done.load(Ordering::SeqCst));
            budget.release(6);
            budget.release(4);
            assert!(waiter.join().unwrap());
        });
        assert_eq!(budget.usage(), (8, 10));
        {
            let both = Charge::acquire(&budget, &budget, 1, &|| true);
            assert!(both.is_some());
            assert_eq!(budget.usage().0, 10);
        }
        assert_eq!(budget.usage().0, 8, "a dropped charge gives both back");
        assert!(Charge::acquire(&budget, &budget, 2, &|| true).is_none());
        assert_eq!(budget.usage().0, 8, "a failed charge holds nothing");
    }
}
