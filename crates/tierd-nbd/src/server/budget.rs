//! The in-flight byte budgets: READ replies and WRITE payloads are charged
//! against a per-connection and a server-wide [`ByteBudget`] before a
//! request is read or executed, and given back when its [`Charge`] drops.
//!
//! The server-wide budget is one counter every connection draws on; to keep
//! that shared cache line off the request path, a connection takes
//! server-wide bytes in batches ([`CREDIT_BATCH_BYTES`]) and keeps what its
//! requests gave back as spare credit ([`ConnectionBudget`]) for its next
//! ones. The bound is not weakened: the server-wide counter holds every
//! byte in flight plus every connection's spare credit, so bytes in flight
//! stay within `max_in_flight_bytes`. Spare credit cannot starve anyone: a
//! connection keeps at most [`SPARE_KEEP_BYTES`], gives all of it back while
//! anyone waits for server-wide bytes, and a waiter reclaims the spare
//! credit of every connection before it sleeps.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::{Shared, MAX_EXTENTS_PER_REPLY};
use crate::proto::*;

/// What a BLOCK_STATUS request is charged: its largest reply.
const BLOCK_STATUS_CHARGE_BYTES: u64 =
    (MAX_EXTENTS_PER_REPLY * 8 + STRUCTURED_REPLY_HEADER_BYTES + 4) as u64;

/// Server-wide bytes a connection takes beyond what a request needs when it
/// runs out of spare credit: 256 requests of 4 KiB touch the server-wide
/// counter once.
pub(super) const CREDIT_BATCH_BYTES: u64 = 1 << 20;
/// Spare credit a connection keeps when nobody waits; more goes back at
/// once.
pub(super) const SPARE_KEEP_BYTES: u64 = 2 << 20;

/// Bytes of READ replies and WRITE payloads held in memory, up to a limit.
/// A request takes its bytes before the server reads its payload or
/// executes it and gives them back once its reply is written, so a client
/// that stops reading replies holds at most the limit. Taking and giving
/// back are atomic operations (no lock on the request path); only a request
/// that must wait takes the lock.
pub(super) struct ByteBudget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
    /// The most bytes held at once (when tracked).
    peak_bytes: AtomicU64,
    track_peak: bool,
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
            track_peak: true,
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    pub(super) fn limit_bytes(&self) -> u64 {
        self.limit_bytes
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
                if self.track_peak {
                    self.peak_bytes.fetch_max(before + bytes, Ordering::Relaxed);
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Waits until `bytes` fit; false when `give_up` turns true first.
    /// `reclaim` runs before every sleep (it may give bytes back).
    pub(super) fn acquire(
        &self,
        bytes: u64,
        give_up: &dyn Fn() -> bool,
        reclaim: &dyn Fn(),
    ) -> bool {
        if self.try_acquire(bytes) {
            return true;
        }
        // Counted before the next try, so a release after a failed try sees
        // a waiter and notifies (under the lock, so not before the wait),
        // and connections give their spare credit back meanwhile.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let acquired = loop {
            reclaim();
            let mut guard = self.lock.lock();
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

    /// True while some request waits for bytes.
    #[inline]
    pub(super) fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::Relaxed) > 0
    }

    pub(super) fn release(&self, bytes: u64) {
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

/// One connection's side of the budgets: its own bound, and the server-wide
/// bytes it took and holds as spare credit. Only the thread that reads the
/// connection's requests charges; any of its threads gives back. Invariant:
/// bytes in flight plus spare credit never exceed the connection's limit.
pub(super) struct ConnectionBudget {
    local: ByteBudget,
    spare_bytes: AtomicU64,
}

impl ConnectionBudget {
    pub(super) fn new(limit_bytes: u64) -> ConnectionBudget {
        ConnectionBudget {
            // Nobody asks a connection for its peak: one atomic less per
            // request.
            local: ByteBudget {
                track_peak: false,
                ..ByteBudget::new(limit_bytes)
            },
            spare_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes this connection's requests hold now.
    pub(super) fn in_flight_bytes(&self) -> u64 {
        self.local.usage().0
    }

    /// Gives every byte of spare credit back to `server`.
    pub(super) fn return_spare(&self, server: &ByteBudget) {
        let spare = self.spare_bytes.swap(0, Ordering::SeqCst);
        server.release(spare);
    }

    /// Takes `bytes` without waiting; `None` when either budget is short
    /// (nothing is held then).
    pub(super) fn try_charge<'a>(
        &'a self,
        server: &'a ByteBudget,
        bytes: u64,
    ) -> Option<Charge<'a>> {
        if bytes == 0 {
            return Some(Charge::none());
        }
        if !self.local.try_acquire(bytes) {
            return None;
        }
        if self.take_server_bytes(server, bytes) {
            Some(Charge::new(self, server, bytes))
        } else {
            self.local.release(bytes);
            None
        }
    }

    /// Takes `bytes`, waiting for each budget in turn; `None` when
    /// `give_up` turned true first (nothing is held then). `reclaim` runs
    /// before each sleep on the server-wide budget.
    pub(super) fn charge<'a>(
        &'a self,
        server: &'a ByteBudget,
        bytes: u64,
        give_up: &dyn Fn() -> bool,
        reclaim: &dyn Fn(),
    ) -> Option<Charge<'a>> {
        if bytes == 0 {
            return Some(Charge::none());
        }
        if !self.local.acquire(bytes, give_up, &|| {}) {
            return None;
        }
        if self.take_server_bytes(server, bytes) {
            return Some(Charge::new(self, server, bytes));
        }
        // Short of server-wide bytes: hold none in spare while waiting.
        self.return_spare(server);
        if server.acquire(bytes, give_up, reclaim) {
            Some(Charge::new(self, server, bytes))
        } else {
            self.local.release(bytes);
            None
        }
    }

    /// Server-wide bytes for a request whose local bytes are taken: from
    /// spare credit, else from the server with a batch of credit on top.
    fn take_server_bytes(&self, server: &ByteBudget, bytes: u64) -> bool {
        let from_spare =
            self.spare_bytes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spare| {
                    spare.checked_sub(bytes)
                });
        if from_spare.is_ok() {
            return true;
        }
        // Use what spare there is, and top up so that bytes in flight plus
        // spare stay within this connection's limit.
        let spare = self.spare_bytes.swap(0, Ordering::SeqCst).min(bytes);
        let needed = bytes - spare;
        let in_flight = self.local.usage().0;
        let top_up = CREDIT_BATCH_BYTES.min(self.local.limit_bytes().saturating_sub(in_flight));
        if top_up > 0 && !server.has_waiters() && server.try_acquire(needed + top_up) {
            self.spare_bytes.fetch_add(top_up, Ordering::SeqCst);
            return true;
        }
        if server.try_acquire(needed) {
            return true;
        }
        server.release(spare);
        false
    }

    fn release(&self, server: &ByteBudget, bytes: u64) {
        self.local.release(bytes);
        let spare = self.spare_bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if server.has_waiters() {
            self.return_spare(server);
        } else if spare > SPARE_KEEP_BYTES {
            let trimmed =
                self.spare_bytes
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spare| {
                        (spare > SPARE_KEEP_BYTES).then_some(SPARE_KEEP_BYTES)
                    });
            if let Ok(before) = trimmed {
                server.release(before - SPARE_KEEP_BYTES);
            }
        }
    }
}

/// Bytes taken from a connection's budget and the server's, given back on
/// drop (also when a request is dropped unexecuted or its connection fails
/// mid-way).
pub(super) struct Charge<'a> {
    budgets: Option<(&'a ConnectionBudget, &'a ByteBudget)>,
    bytes: u64,
}

impl<'a> Charge<'a> {
    pub(super) fn none() -> Charge<'a> {
        Charge {
            budgets: None,
            bytes: 0,
        }
    }

    fn new(connection: &'a ConnectionBudget, server: &'a ByteBudget, bytes: u64) -> Charge<'a> {
        Charge {
            budgets: Some((connection, server)),
            bytes,
        }
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        if let Some((connection, server)) = self.budgets {
            connection.release(server, self.bytes);
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
        assert!(!budget.acquire(5, &|| true, &|| {}), "gives up at once");
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let acquired = budget.acquire(8, &|| false, &|| {});
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
    }

    /// A connection draws server-wide bytes in batches and serves its next
    /// requests from spare credit; bytes in flight plus spare never exceed
    /// its limit, and the server-wide count always covers both.
    #[test]
    fn connections_draw_server_bytes_in_batches_within_their_limit() {
        let server = ByteBudget::new(64 << 20);
        let connection = ConnectionBudget::new(4 << 20);
        let first = connection.try_charge(&server, 4096).unwrap();
        assert_eq!(server.usage().0, 4096 + CREDIT_BATCH_BYTES, "one batch");
        let rest: Vec<Charge<'_>> = (0..255)
            .map(|_| connection.try_charge(&server, 4096).unwrap())
            .collect();
        assert_eq!(
            server.usage().0,
            4096 + CREDIT_BATCH_BYTES,
            "255 more requests came from spare credit"
        );
        drop(rest);
        drop(first);
        assert_eq!(connection.in_flight_bytes(), 0);
        let spare = connection.spare_bytes.load(Ordering::SeqCst);
        assert_eq!(server.usage().0, spare, "the server counts spare credit");
        assert!(spare <= SPARE_KEEP_BYTES);
        // Filling the connection's limit never reserves beyond it.
        let whole = connection.try_charge(&server, 4 << 20).unwrap();
        assert_eq!(connection.spare_bytes.load(Ordering::SeqCst), 0);
        assert_eq!(server.usage().0, 4 << 20);
        assert!(
            connection.try_charge(&server, 1).is_none(),
            "the limit holds"
        );
        drop(whole);
        connection.return_spare(&server);
        assert_eq!(server.usage().0, 0);
    }

    /// The server-wide bound holds across connections; a waiter reclaims
    /// the spare credit of idle connections instead of starving.
    #[test]
    fn waiters_reclaim_spare_credit_and_the_server_bound_holds() {
        let server = ByteBudget::new(4 << 20);
        let idle = ConnectionBudget::new(2 << 20);
        let busy = ConnectionBudget::new(2 << 20);
        drop(idle.try_charge(&server, 4096).unwrap());
        assert!(
            idle.spare_bytes.load(Ordering::SeqCst) > 0,
            "idle keeps credit"
        );
        let held = busy.try_charge(&server, 2 << 20).unwrap();
        assert!(busy.try_charge(&server, 1).is_none(), "busy's own limit");
        drop(held);
        assert_eq!(busy.spare_bytes.load(Ordering::SeqCst), SPARE_KEEP_BYTES);
        // Spare credit fills the server: 2 MiB more fit only once it is
        // reclaimed.
        let other = ConnectionBudget::new(4 << 20);
        assert!(other.try_charge(&server, 2 << 20).is_none());
        let taken = other
            .charge(&server, 2 << 20, &|| false, &|| {
                idle.return_spare(&server);
                busy.return_spare(&server);
            })
            .unwrap();
        assert_eq!(server.usage().0, 2 << 20);
        assert!(server.usage().1 <= 4 << 20, "never more than the bound");
        drop(taken);
        let short = ByteBudget::new(1 << 20);
        let fresh = ConnectionBudget::new(4 << 20);
        assert!(
            fresh.charge(&short, 2 << 20, &|| true, &|| {}).is_none(),
            "gives up when told, holding nothing"
        );
        assert_eq!(fresh.in_flight_bytes(), 0);
        assert_eq!(short.usage().0, 0);
    }
}

/// Whether the server-wide budget's shared counter costs anything on the
/// request path: two threads (two connections) charge and give back 4 KiB
/// requests as fast as they can, once through the server-wide counter on
/// every request (before issue 12) and once through spare credit. Prints
/// ns per request; run with
/// `cargo test --release -p tierd-nbd --lib budget_contention -- --ignored --nocapture`.
#[cfg(test)]
mod contention {
    use super::*;
    use tierd_common::clock::{Clock, SystemClock};

    const REQUESTS: u64 = 5_000_000;

    fn per_request_ns(run: &(dyn Fn() + Sync), threads: usize) -> f64 {
        let clock = SystemClock::new();
        let started_ns = clock.now_ns();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(run);
            }
        });
        (clock.now_ns() - started_ns) as f64 / REQUESTS as f64
    }

    #[test]
    #[ignore = "a measurement, not a check: run it by hand (see above)"]
    fn budget_contention() {
        for threads in [1, 2] {
            let server = ByteBudget::new(1 << 30);
            let shared_counter = per_request_ns(
                &|| {
                    let connection = ByteBudget::new(64 << 20);
                    for _ in 0..REQUESTS {
                        assert!(connection.try_acquire(4096) && server.try_acquire(4096));
                        server.release(4096);
                        connection.release(4096);
                    }
                },
                threads,
            );
            let server = ByteBudget::new(1 << 30);
            let credit = per_request_ns(
                &|| {
                    let connection = ConnectionBudget::new(64 << 20);
                    for _ in 0..REQUESTS {
                        drop(connection.try_charge(&server, 4096).unwrap());
                    }
                    connection.return_spare(&server);
                },
                threads,
            );
            println!(
                "{threads} connection(s) at once: {shared_counter:.1} ns per request through the server-wide counter, {credit:.1} ns through spare credit"
            );
        }
    }
}
