//! Replicas in free space on the HDD home tier (paper 003): the engine
//! drives `tierd_core::replica::ReplicaManager` — reads reaching home are
//! reported and routed to the copy the HDD model predicts cheapest (its
//! seek + rotation from where the head is), every write to home is
//! reported before it is issued, and copy jobs run one at a time once home
//! has had no user IO for `idle_ns`, their reads and writes charged to the
//! disk in virtual time like any IO.

use tierd_core::replica::{CopyJob, Fragment, ReplicaManager, ReplicaStats};

use super::*;
use crate::replicas::{ReplicaResult, ReplicaRun};

/// The timer slot of the replica copies' idle wake-up.
pub(super) const REPLICA_TIMER: u32 = u32::MAX - 1;

pub(super) struct ReplicaDriver {
    /// `None` for `--replicas off` (the run still measures disk access).
    manager: Option<ReplicaManager>,
    fragments: Vec<Fragment>,
    /// The copy in progress, and whether its write has been issued.
    copying: Option<(CopyJob, bool)>,
    idle_ns: u64,
    idle_since_ns: u64,
    wake_ns: u64,
    /// HDD busy time (service) of user reads, of copies.
    disk_access_ns: u128,
    copy_busy_ns: u128,
    /// Per read session (arrivals less than the gap apart): the HDD busy
    /// time of its user reads.
    session_gap_ns: u64,
    last_read_ns: Option<u64>,
    sessions: Vec<u128>,
}

impl ReplicaDriver {
    pub(super) fn new(run: &ReplicaRun, home_bytes: u64) -> Result<ReplicaDriver, SimError> {
        let manager = run
            .config
            .clone()
            .map(|config| ReplicaManager::new(config, home_bytes))
            .transpose()
            .map_err(|message| SimError::option("replicas", message))?;
        let session_gap_ns = run.config.as_ref().map_or(
            tierd_core::replica::ReplicaConfig::default().session_gap_ns,
            |config| config.session_gap_ns,
        );
        Ok(ReplicaDriver {
            manager,
            fragments: Vec::new(),
            copying: None,
            idle_ns: run.idle_ns,
            idle_since_ns: 0,
            wake_ns: 0,
            disk_access_ns: 0,
            copy_busy_ns: 0,
            session_gap_ns,
            last_read_ns: None,
            sessions: Vec::new(),
        })
    }
}

impl<'run> Engine<'run> {
    /// Routes a user read piece bound for home: to the cheapest current
    /// copy of each extent (one device IO per fragment; the piece completes
    /// when all have).
    pub(super) fn route_home_read(&mut self, piece_index: u32, device_offset: u64, bytes: u64) {
        let home = self.home;
        let mut fragments = match self.replicas.as_deref_mut() {
            Some(driver) => std::mem::take(&mut driver.fragments),
            None => return,
        };
        if !self.replica_route(device_offset, bytes, true, &mut fragments) {
            fragments.push(Fragment {
                device_offset,
                length_bytes: bytes,
                replica: false,
            });
        }
        self.pieces.get_mut(piece_index).parts_left = fragments.len() as u8;
        for fragment in &fragments {
            self.submit(
                home,
                DeviceIo {
                    id: (KIND_USER << KIND_SHIFT) | u64::from(piece_index),
                    op: Op::Read,
                    offset_bytes: fragment.device_offset,
                    length_bytes: fragment.length_bytes,
                    background: false,
                },
            );
        }
        if let Some(driver) = self.replicas.as_deref_mut() {
            driver.fragments = fragments;
        }
    }

    /// A read of home at `now`: a new session after the gap, reported to
    /// the manager, and with `route` its fragments (cheapest current copy
    /// per extent) in `out`. False without a manager (`--replicas off`):
    /// `out` is left empty and the caller reads the primary.
    fn replica_route(
        &mut self,
        offset_bytes: u64,
        length_bytes: u64,
        route: bool,
        out: &mut Vec<Fragment>,
    ) -> bool {
        out.clear();
        let now_ns = self.now_ns;
        let home = self.home;
        let Some(driver) = self.replicas.as_deref_mut() else {
            return false;
        };
        if driver
            .last_read_ns
            .is_none_or(|last| now_ns.saturating_sub(last) >= driver.session_gap_ns)
        {
            driver.sessions.push(0);
        }
        driver.last_read_ns = Some(now_ns);
        let Some(manager) = driver.manager.as_mut() else {
            return false;
        };
        manager.on_read(now_ns, offset_bytes, length_bytes);
        if !route {
            return false;
        }
        let device = &self.devices[home];
        manager.route_read(
            offset_bytes,
            length_bytes,
            |at, length| {
                device
                    .read_cost_ns(now_ns, at, length)
                    .unwrap_or(at.abs_diff(offset_bytes) as f64)
            },
            out,
        );
        true
    }

    /// A block cache's read of home that is not the user's own (a fill, a
    /// promotion's copy-in): reported for detection, and routed to a
    /// cheaper current copy when it lies within one extent (a cache block
    /// does, at the default sizes); across extents it reads the primary
    /// (one IO, one completion, as the fill expects). The cache's own user
    /// reads of home are split per fragment in `cache_user_io`.
    pub(super) fn route_cache_home_read(&mut self, io: DeviceIo) -> DeviceIo {
        if !matches!(
            io.id >> KIND_SHIFT,
            KIND_CACHE_FILL | KIND_CACHE_FILL_READ | KIND_CACHE_LOAD_READ
        ) {
            return io;
        }
        let single = self
            .replicas
            .as_deref()
            .and_then(|driver| driver.manager.as_ref())
            .is_some_and(|manager| {
                let extent = manager.config().extent_bytes;
                io.length_bytes > 0
                    && io.offset_bytes / extent == (io.offset_bytes + io.length_bytes - 1) / extent
            });
        let mut fragments = self
            .replicas
            .as_deref_mut()
            .map(|driver| std::mem::take(&mut driver.fragments))
            .unwrap_or_default();
        let routed = self.replica_route(io.offset_bytes, io.length_bytes, single, &mut fragments);
        let io = match (routed, fragments.as_slice()) {
            (true, [only]) => DeviceIo {
                offset_bytes: only.device_offset,
                ..io
            },
            _ => io,
        };
        if let Some(driver) = self.replicas.as_deref_mut() {
            driver.fragments = fragments;
        }
        io
    }

    /// A block cache's user read of home (`group`'s part): one IO per
    /// fragment, each a part of the group.
    pub(super) fn cache_user_home_read(
        &mut self,
        group: u32,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> bool {
        let mut fragments = match self.replicas.as_deref_mut() {
            Some(driver) => std::mem::take(&mut driver.fragments),
            None => return false,
        };
        if !self.replica_route(offset_bytes, length_bytes, true, &mut fragments) {
            if let Some(driver) = self.replicas.as_deref_mut() {
                driver.fragments = fragments;
            }
            return false;
        }
        self.cache_groups[group as usize].parts_left += fragments.len() as u32;
        for fragment in &fragments {
            self.submit(
                self.home,
                DeviceIo {
                    id: (KIND_CACHE_USER << KIND_SHIFT) | u64::from(group),
                    op: Op::Read,
                    offset_bytes: fragment.device_offset,
                    length_bytes: fragment.length_bytes,
                    background: false,
                },
            );
        }
        if let Some(driver) = self.replicas.as_deref_mut() {
            driver.fragments = fragments;
        }
        true
    }

    /// A write is about to be issued to home (not a copy's own): replicas
    /// in that space and copies of it are dropped first.
    #[inline]
    pub(super) fn replica_write(&mut self, io: &DeviceIo) {
        if let Some(manager) = self
            .replicas
            .as_deref_mut()
            .and_then(|driver| driver.manager.as_mut())
        {
            manager.on_write(io.offset_bytes, io.length_bytes);
        }
    }

    /// Home completed `completion`: disk access time of user reads, copy
    /// progress.
    pub(super) fn replica_completion(&mut self, completion: &Completion) {
        let Some(driver) = self.replicas.as_deref_mut() else {
            return;
        };
        let kind = completion.id >> KIND_SHIFT;
        // A block cache's fill of a miss is a user read of the disk too.
        let fill = matches!(kind, KIND_CACHE_FILL | KIND_CACHE_FILL_READ);
        if completion.op == Op::Read && (is_user_io(completion.id) || fill) {
            let service = u128::from(completion.service_ns());
            driver.disk_access_ns += service;
            if let Some(last) = driver.sessions.last_mut() {
                *last += service;
            }
        }
        if kind != KIND_REPLICA_COPY {
            return;
        }
        driver.copy_busy_ns += u128::from(completion.service_ns());
        match driver.copying {
            Some((job, false)) => {
                driver.copying = Some((job, true));
                self.submit(
                    self.home,
                    DeviceIo {
                        id: KIND_REPLICA_COPY << KIND_SHIFT,
                        op: Op::Write,
                        offset_bytes: job.target_offset,
                        length_bytes: job.length_bytes,
                        background: true,
                    },
                );
            }
            Some((job, true)) => {
                driver.copying = None;
                if let Some(manager) = driver.manager.as_mut() {
                    manager.job_done(job.id);
                }
                self.pump_replicas();
            }
            None => debug_assert!(false, "a copy IO with no copy in progress"),
        }
    }

    /// Home's user IO all completed at `done_ns`: copies may start once it
    /// has been idle for `idle_ns`.
    pub(super) fn replica_idle_from(&mut self, done_ns: u64) {
        if let Some(driver) = self.replicas.as_deref_mut() {
            driver.idle_since_ns = done_ns;
            let wake = done_ns + driver.idle_ns;
            self.replica_wake_at(wake);
        }
    }

    fn replica_wake_at(&mut self, wake_ns: u64) {
        let Some(driver) = self.replicas.as_deref_mut() else {
            return;
        };
        if driver.manager.is_none() || wake_ns <= self.now_ns || driver.wake_ns == wake_ns {
            return;
        }
        driver.wake_ns = wake_ns;
        self.timer_sequence += 1;
        self.timers.push(std::cmp::Reverse((
            wake_ns,
            self.timer_sequence,
            REPLICA_TIMER,
        )));
    }

    /// Starts the next copy if home is idle and none is in progress; else
    /// wakes when the manager next has something to do.
    pub(super) fn pump_replicas(&mut self) {
        let now_ns = self.now_ns;
        let home_busy = self.user_outstanding[self.home] > 0;
        let Some(driver) = self.replicas.as_deref_mut() else {
            return;
        };
        if driver.copying.is_some() || home_busy {
            return;
        }
        let idle_at = driver.idle_since_ns + driver.idle_ns;
        if now_ns < idle_at {
            self.replica_wake_at(idle_at);
            return;
        }
        let Some(manager) = driver.manager.as_mut() else {
            return;
        };
        match manager.next_job(now_ns) {
            Some(job) => {
                driver.copying = Some((job, false));
                self.submit(
                    self.home,
                    DeviceIo {
                        id: KIND_REPLICA_COPY << KIND_SHIFT,
                        op: Op::Read,
                        offset_bytes: job.source_offset,
                        length_bytes: job.length_bytes,
                        background: true,
                    },
                );
            }
            None => {
                if let Some(wake) = manager.next_wake_ns() {
                    self.replica_wake_at(wake);
                }
            }
        }
    }

    /// The run's replica figures.
    pub(super) fn replica_result(&self) -> (Option<String>, Option<f64>, Option<ReplicaResult>) {
        let (Some(run), Some(driver)) = (&self.config.replicas, self.replicas.as_deref()) else {
            return (None, None, None);
        };
        let disk_access_ms = driver.disk_access_ns as f64 / 1e6;
        let sessions: Vec<f64> = driver.sessions.iter().map(|ns| *ns as f64 / 1e6).collect();
        let mut result = ReplicaResult {
            copy_busy_ms: driver.copy_busy_ns as f64 / 1e6,
            last_session_disk_access_ms: sessions.last().copied().unwrap_or(0.0),
            session_disk_access_ms: sessions,
            ..ReplicaResult::default()
        };
        if let Some(manager) = &driver.manager {
            let config = manager.config();
            let stats = manager.stats();
            let status = manager.status();
            result.extent_bytes = config.extent_bytes;
            result.max_copies = config.max_copies;
            result.contiguous_sequences = config.contiguous_sequences;
            result.stats = ReplicaStats {
                // Each copy is read and written.
                copy_bytes: stats.copy_bytes * 2,
                ..stats
            };
            result.replicated_extents = status.replicated_extents;
            result.current_copies = status.current_copies;
            result.replica_bytes = status.replica_extents * config.extent_bytes;
        }
        (
            Some(run.setting.name().to_string()),
            Some(disk_access_ms),
            Some(result),
        )
    }
}
