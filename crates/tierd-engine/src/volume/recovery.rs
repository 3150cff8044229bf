//! Recovery at open (checkpoint and journal replay, table checks, refill of
//! volatile tiers), the checkpoint it starts from, and forgetting a lost
//! tier at startup.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tierd_common::clock::Clock;
use tierd_core::placement::PlacementTable;
use tierd_policy::monitor::{Monitor, DEFAULT_HISTORY_PERIODS};
use tierd_policy::{build_policy, SegmentId, TierId};

use crate::meta::{Checkpoint, Location, MetaStore, Pin, Record};

use super::cache::{CacheCore, CacheLayer};
use super::{
    CacheOptions, Entry, Planner, TierSpec, TierState, Volume, VolumeError, VolumeOptions,
};

impl Volume {
    /// Opens a volume over `tiers` (fastest first, home last) with its
    /// metadata in `meta_dir`: recovers placement from checkpoint + journal,
    /// reloads warm policy state, and refills volatile tiers from home.
    pub fn open(
        options: VolumeOptions,
        tiers: Vec<TierSpec>,
        meta_dir: &std::path::Path,
        clock: Arc<dyn Clock>,
    ) -> Result<(Volume, Vec<String>), VolumeError> {
        Self::open_with_cache(options, tiers, meta_dir, clock, None)
    }

    /// [`Volume::open`], as a cache volume when `cache` is set: its tier is
    /// used wholly as a block cache over home (it holds no segments), and
    /// the cache's mappings are recovered from the checkpoint and journal
    /// (warm: the same blocks hit after the restart).
    pub fn open_with_cache(
        options: VolumeOptions,
        tiers: Vec<TierSpec>,
        meta_dir: &std::path::Path,
        clock: Arc<dyn Clock>,
        cache: Option<CacheOptions>,
    ) -> Result<(Volume, Vec<String>), VolumeError> {
        let segment_bytes = options.segment_bytes;
        if tiers.is_empty() {
            return Err(VolumeError::Invalid(
                "a volume needs at least one tier".into(),
            ));
        }
        let segments_u64 = options.size_bytes.div_ceil(segment_bytes);
        let segments = u32::try_from(segments_u64)
            .map_err(|_| VolumeError::Invalid("too many segments".into()))?;
        let home = tiers.len() - 1;
        let cache_tier = match &cache {
            None => None,
            Some(cache) => {
                let Some(index) = tiers.iter().position(|tier| tier.name == cache.tier) else {
                    return Err(VolumeError::Invalid(format!(
                        "cache.tier = {:?} is not in volume {}'s tiers",
                        cache.tier, options.name
                    )));
                };
                if index == home {
                    return Err(VolumeError::Invalid(format!(
                        "cache.tier = {:?} is volume {}'s home (the last tier); the cache must be a faster tier in front of it",
                        cache.tier, options.name
                    )));
                }
                if !matches!(options.policy, tierd_policy::PolicyConfig::None) {
                    return Err(VolumeError::Invalid(format!(
                        "volume {} is a cache volume: its tiering policy must be `none` (the cache tier holds blocks, not segments)",
                        options.name
                    )));
                }
                Some(index)
            }
        };
        let home_needed = segments_u64 * segment_bytes;
        if tiers[home].device.size_bytes() < home_needed {
            return Err(VolumeError::Invalid(format!(
                "home tier {} holds {} bytes; volume {} needs {home_needed} (whole segments)",
                tiers[home].name,
                tiers[home].device.size_bytes(),
                options.name
            )));
        }
        let capacities_segments: Vec<u32> = tiers
            .iter()
            .enumerate()
            .map(|(index, spec)| {
                if index == home {
                    segments
                } else if Some(index) == cache_tier {
                    // The cache tier holds blocks, never segments.
                    0
                } else {
                    u32::try_from(spec.device.size_bytes() / segment_bytes).unwrap_or(u32::MAX)
                }
            })
            .collect();
        let tier_states: Vec<TierState> = tiers
            .into_iter()
            .map(|spec| TierState {
                name: spec.name,
                volatile: spec.volatile,
                write_through: spec.volatile && !spec.unsafe_volatile,
                device: spec.device,
            })
            .collect();
        let home_id = home as TierId;
        let mut placement: Vec<Location> = (0..segments)
            .map(|segment| Location {
                tier: home_id,
                slot: segment,
            })
            .collect();

        let (meta, recovered) = MetaStore::open(meta_dir)?;
        let mut notes = recovered.notes.clone();
        let mut policy = build_policy(&options.policy);
        let mut monitor = Monitor::new(
            options.period_ns,
            tier_states.len(),
            clock.now_ns(),
            DEFAULT_HISTORY_PERIODS,
        );
        let mut planner_completed = 0;
        let mut planner_timed = 0;
        let mut planner_total_ns = 0.0;
        let mut recent = VecDeque::new();
        let mut pins: BTreeMap<SegmentId, Pin> = BTreeMap::new();
        let mut last_plan = None;
        let tier_names: Vec<String> = tier_states.iter().map(|tier| tier.name.clone()).collect();
        if let Some(checkpoint) = &recovered.checkpoint {
            if checkpoint.segment_bytes != segment_bytes
                || checkpoint.placement.len() != segments as usize
            {
                return Err(VolumeError::Invalid(format!(
                    "{}: the checkpoint describes {} segments of {} bytes but the configuration gives {} segments of {} bytes; changing a volume's size or segment size needs a new volume",
                    MetaStore::checkpoint_path(meta_dir).display(),
                    checkpoint.placement.len(),
                    checkpoint.segment_bytes,
                    segments,
                    segment_bytes
                )));
            }
            if checkpoint.tiers != tier_names {
                return Err(VolumeError::Invalid(format!(
                    "{}: the checkpoint's tier stack is {:?} but the configuration gives {:?}; tierd will not guess where segments went",
                    MetaStore::checkpoint_path(meta_dir).display(),
                    checkpoint.tiers,
                    tier_names
                )));
            }
            placement.clone_from(&checkpoint.placement);
            if checkpoint.policy == policy.name() {
                if let Err(reason) = policy.restore_state(&checkpoint.policy_state) {
                    return Err(VolumeError::Invalid(format!(
                        "{}: saved {} policy state does not load: {reason}",
                        MetaStore::checkpoint_path(meta_dir).display(),
                        checkpoint.policy
                    )));
                }
                monitor.restore_history(checkpoint.history.clone());
            } else {
                notes.push(format!(
                    "policy changed from {} to {}: starting the new policy cold",
                    checkpoint.policy,
                    policy.name()
                ));
            }
            planner_completed = checkpoint.completed_moves;
            planner_timed = checkpoint.timed_moves.unwrap_or(checkpoint.completed_moves);
            planner_total_ns = checkpoint.mean_move_ns.unwrap_or(0.0) * planner_timed as f64;
            recent = checkpoint.recent_moves.iter().cloned().collect();
            pins = checkpoint
                .pins
                .iter()
                .map(|pin| (pin.segment, *pin))
                .collect();
            last_plan.clone_from(&checkpoint.last_plan);
        }
        for record in &recovered.records {
            match record {
                Record::Pin { .. } | Record::Unpin { .. } => record.apply_to_pins(&mut pins),
                Record::CacheMap { .. }
                | Record::CacheMode { .. }
                | Record::CacheDetached
                | Record::CacheLost { .. }
                | Record::CacheRewritten { .. } => {}
                Record::Place {
                    segment,
                    location,
                    move_ns,
                } => {
                    // A move that finished after the checkpoint: it counts,
                    // and so does its time when the record has it.
                    planner_completed += 1;
                    if let Some(move_ns) = move_ns {
                        planner_timed += 1;
                        planner_total_ns += *move_ns as f64;
                    }
                    let Some(slot) = placement.get_mut(*segment as usize) else {
                        return Err(VolumeError::Invalid(format!(
                            "{}: journal places segment {segment}, beyond the volume's {segments} segments",
                            MetaStore::journal_path(meta_dir).display()
                        )));
                    };
                    *slot = *location;
                }
            }
        }
        if let Some(pin) = pins
            .values()
            .find(|pin| pin.segment >= segments || pin.tier as usize >= tier_states.len())
        {
            return Err(VolumeError::Invalid(format!(
                "{}: a pin of segment {} to tier index {} is impossible for this volume ({segments} segments, {} tiers); tierd will not guess",
                meta_dir.display(),
                pin.segment,
                pin.tier,
                tier_states.len()
            )));
        }
        if let Some(index) = cache_tier {
            let on_cache_tier = placement
                .iter()
                .filter(|location| location.tier as usize == index)
                .count();
            if on_cache_tier > 0 && tier_states[index].volatile {
                // A memory tier lost its segments with the last process;
                // home holds them (written through), so they go home and
                // the tier becomes the cache.
                for (segment, location) in placement.iter_mut().enumerate() {
                    if location.tier as usize == index {
                        // Home holds every segment at its own index.
                        *location = Location {
                            tier: home_id,
                            slot: segment as u32,
                        };
                    }
                }
                notes.push(format!(
                    "{on_cache_tier} segments of memory tier {} went home: it is now the volume's cache{}",
                    tier_states[index].name,
                    if tier_states[index].write_through {
                        ""
                    } else {
                        " (it was unsafe_volatile: writes to them since their promotion were lost with the last process)"
                    }
                ));
            } else if on_cache_tier > 0 {
                // The caller names the volume (`EngineError::Volume`).
                let listed: Vec<String> = placement
                    .iter()
                    .enumerate()
                    .filter(|(_, location)| location.tier as usize == index)
                    .take(8)
                    .map(|(segment, _)| segment.to_string())
                    .collect();
                return Err(VolumeError::Invalid(format!(
                    "{on_cache_tier} segments are on tier {} from tiering (a policy moved them there: {}{}), so it cannot be a cache volume over that tier. To keep it tiered, give it a policy (`[volume.policy] kind = \"none\"` or the policy it had; a two-tier volume without policy or cache is an adaptive cache volume since this version); to make it a cache volume, first move its segments home under its old configuration (`tierd move --volume {} --segment N --to {}` for each)",
                    tier_names[index],
                    listed.join(", "),
                    if on_cache_tier > listed.len() { ", ..." } else { "" },
                    options.name,
                    tier_names[home]
                )));
            }
        }
        // Check the recovered table and rebuild the free lists from it.
        let table = PlacementTable::restore(&placement, &capacities_segments).map_err(|impossible| {
            VolumeError::Invalid(format!(
                "{}: recovered placement of segment {} ({:?}) is impossible for this tier stack; tierd will not guess",
                meta_dir.display(),
                impossible.segment,
                impossible.location
            ))
        })?;

        let cache_layer = match (cache, cache_tier) {
            (Some(cache), Some(index)) => Some(restore_cache(
                cache,
                index as TierId,
                &tier_states[index],
                options.size_bytes,
                recovered
                    .checkpoint
                    .as_ref()
                    .and_then(|checkpoint| checkpoint.cache.as_ref()),
                &recovered.records,
                meta_dir,
                &mut notes,
            )?),
            _ => None,
        };
        let last_busy_ns = tier_states
            .iter()
            .map(|tier| tier.device.stats().map_or(0, |stats| stats.busy_ns))
            .collect();
        let tier_count = tier_states.len();
        let volume = Volume {
            segments,
            entries: placement
                .iter()
                .map(|location| {
                    RwLock::new(Entry {
                        location: *location,
                        moving: false,
                    })
                })
                .collect(),
            home_current: placement
                .iter()
                .map(|location| {
                    let tier = &tier_states[location.tier as usize];
                    AtomicBool::new(location.tier == home_id || tier.write_through)
                })
                .collect(),
            tiers: tier_states,
            active: RwLock::new(Vec::new()),
            copy_buffers: Mutex::new(Vec::new()),
            next_write_id: AtomicU64::new(0),
            decision_log: Mutex::new(None),
            monitor: super::recorder::LiveMonitor::new(monitor),
            planner: Mutex::new(Planner {
                policy,
                table,
                recent,
                completed_moves: planner_completed,
                timed_moves: planner_timed,
                total_move_ns: planner_total_ns,
                dropped: Default::default(),
                completed_by_rule: Default::default(),
                last_busy_ns,
                periods_since_checkpoint: 0,
                periods_closed: 0,
                pins,
                last_plan,
                events: Vec::new(),
            }),
            meta: Mutex::new(meta),
            clock,
            // A repaired torn journal tail is reported as a warning (log
            // and status), not silently.
            warnings: Mutex::new(recovered.repaired.clone()),
            max_chunk_hold_ns: AtomicU64::new(0),
            max_switch_over_ns: AtomicU64::new(0),
            unavailable_tiers: (0..tier_count).map(|_| AtomicBool::new(false)).collect(),
            cache: cache_layer,
            options,
        };
        volume.refill_volatile_tiers(&mut notes)?;
        // Start the new generation from a checkpoint of what was recovered,
        // so the journal stays short.
        volume.checkpoint()?;
        Ok((volume, notes))
    }

    /// Segments placed on volatile tiers lost their data with the last
    /// process: copy them back from home (current by write-through).
    fn refill_volatile_tiers(&self, notes: &mut Vec<String>) -> Result<(), VolumeError> {
        let home = self.home();
        let mut refilled = 0u64;
        for segment in 0..self.segments {
            let location = self.entry(segment).location;
            let tier = &self.tiers[location.tier as usize];
            if location.tier == home || !tier.volatile {
                continue;
            }
            if !tier.write_through {
                self.warnings.lock().push(format!(
                    "segment {segment} was on unsafe_volatile tier {}: writes to it since its promotion were lost with the last process",
                    tier.name
                ));
            }
            let mut buffer = vec![0u8; self.options.chunk_bytes as usize];
            let mut done = 0;
            let mut full = None;
            while done < self.options.segment_bytes {
                let length = self
                    .options
                    .chunk_bytes
                    .min(self.options.segment_bytes - done);
                let piece = &mut buffer[..length as usize];
                self.tiers[home as usize].device.read_at(
                    u64::from(segment) * self.options.segment_bytes + done,
                    piece,
                )?;
                match tier
                    .device
                    .write_at(self.slot_offset(location) + done, piece)
                {
                    Ok(()) => {}
                    // An overcommitted reduced tier may not take back what
                    // it held (its last writes, refused there, reached
                    // home): home is current, so the segment stays there.
                    Err(error) if error.errno() == libc::ENOSPC => {
                        full = Some(error);
                        break;
                    }
                    Err(error) => return Err(error.into()),
                }
                done += length;
            }
            if let Some(error) = full {
                let mut planner = self.planner.lock();
                self.send_home(&mut planner, segment)?;
                notes.push(format!(
                    "segment {segment} could not be refilled on volatile tier {} ({error}): it is served from home",
                    tier.name
                ));
                continue;
            }
            refilled += 1;
        }
        if refilled > 0 {
            notes.push(format!(
                "refilled {refilled} segments of volatile tiers from home (warm restart)"
            ));
        }
        Ok(())
    }

    /// Writes a checkpoint of the durable placement and the policy's state
    /// (and a cache volume's mappings).
    pub fn checkpoint(&self) -> Result<(), VolumeError> {
        self.write_checkpoint(false)
    }

    /// The checkpoint of a clean stop (after every IO ended): a cache
    /// volume's dirty bits are exact in it, so the next start writes back
    /// only the blocks that were dirty.
    pub fn final_checkpoint(&self) -> Result<(), VolumeError> {
        self.write_checkpoint(true)
    }

    fn write_checkpoint(&self, clean_shutdown: bool) -> Result<(), VolumeError> {
        // Cache first (commit lock, then planner, then journal): the
        // mappings are snapshot with the changes taken for them, and every
        // tier is flushed before the checkpoint holds them.
        let cache = self.cache_checkpoint_begin(clean_shutdown)?;
        let (cache_state, cache_part) = match cache {
            Some((state, part)) => (Some(state), Some(part)),
            None => (None, None),
        };
        let mut planner = self.planner.lock();
        planner.periods_since_checkpoint = 0;
        let history = self.monitor.lock().history().to_vec();
        // The planner's table: a move's journal record and its flip in the
        // table happen together under the planner lock, so the checkpoint
        // never misses a placement the journal had.
        let mut meta = self.meta.lock();
        let placement = planner.table.locations().to_vec();
        let checkpoint = Checkpoint {
            volume: self.options.name.clone(),
            size_bytes: self.options.size_bytes,
            segment_bytes: self.options.segment_bytes,
            tiers: self.tier_names(),
            placement,
            policy: planner.policy.name().to_string(),
            policy_state: planner.policy.save_state(),
            history,
            completed_moves: planner.completed_moves,
            mean_move_ns: planner.mean_move_ns(),
            recent_moves: planner.recent.iter().cloned().collect(),
            timed_moves: Some(planner.timed_moves),
            pins: planner.pins.values().copied().collect(),
            last_plan: planner.last_plan.clone(),
            cache: cache_part,
        };
        drop(planner);
        meta.write_checkpoint(&checkpoint)?;
        drop(meta);
        if let Some(state) = cache_state {
            self.cache_checkpoint_done(state);
        }
        Ok(())
    }

    /// Startup, after an operator accepted losing tier `index`'s contents
    /// (`--accept-reset`): every segment placed on it is placed on home
    /// again (journaled), where its home copy — possibly stale — is served.
    /// Returns those segments. Home itself cannot be forgotten this way.
    pub fn forget_tier(&self, index: usize) -> Result<Vec<SegmentId>, VolumeError> {
        let home = self.home();
        let mut forgotten = Vec::new();
        if index >= self.tiers.len() || index == home as usize {
            return Ok(forgotten);
        }
        if self.is_cache_tier(index) {
            // A reset cache tier holds none of the mapped blocks: clean ones
            // read from home, dirty ones are reported lost.
            self.cache_tier_failed(&format!(
                "tier {} was reset at start (--accept-reset)",
                self.tiers[index].name
            ));
            return Ok(forgotten);
        }
        // Planner, then journal, then the entry: the order a move's flip
        // takes them in.
        let mut planner = self.planner.lock();
        for segment in 0..self.segments {
            let location = planner.table.location(segment);
            if location.tier as usize != index || planner.table.is_moving(segment) {
                continue;
            }
            self.send_home(&mut planner, segment)?;
            forgotten.push(segment);
        }
        Ok(forgotten)
    }

    /// Places `segment` on home (journaled; home's copy is served), at
    /// startup, when its tier cannot serve it.
    fn send_home(
        &self,
        planner: &mut parking_lot::MutexGuard<'_, Planner>,
        segment: SegmentId,
    ) -> Result<(), VolumeError> {
        let home = self.home();
        if let Some(undone) = planner.table.cancel(segment) {
            planner.dropped.refused += 1;
            planner.dropped.room_taken_back += undone.shed.len() as u64;
        }
        let to = Location {
            tier: home,
            slot: segment,
        };
        self.meta.lock().append(&Record::Place {
            segment,
            location: to,
            move_ns: None,
        })?;
        self.entries[segment as usize].write().location = to;
        self.home_current[segment as usize].store(true, Ordering::Release);
        planner.table.force_home(segment);
        Ok(())
    }
}

/// Rebuilds a cache volume's cache from its checkpoint part and the
/// journal's cache records (see `docs/engine/cache.md`, "In the engine").
#[allow(clippy::too_many_arguments)]
fn restore_cache(
    options: CacheOptions,
    tier: TierId,
    tier_state: &TierState,
    volume_bytes: u64,
    checkpoint: Option<&crate::meta::CacheCheckpoint>,
    records: &[Record],
    meta_dir: &std::path::Path,
    notes: &mut Vec<String>,
) -> Result<CacheLayer, VolumeError> {
    use crate::meta::CacheChangeKind;
    use std::collections::BTreeSet;
    use tierd_core::cache::{BlockCache, CacheMode};

    let invalid = |message: String| VolumeError::Invalid(format!("cache: {message}"));
    let mut settings = options.settings(volume_bytes, tier_state.device.size_bytes());
    settings.validate().map_err(|error| {
        invalid(format!(
            "tier {} of {} bytes in blocks of {}: {error}",
            tier_state.name,
            tier_state.device.size_bytes(),
            options.block_bytes
        ))
    })?;
    let mut entries: BTreeMap<u64, (u32, bool)> = BTreeMap::new();
    let mut clean = false;
    let mut requested = options.mode.name().to_string();
    let mut config_mode = options.mode;
    let mut detached = false;
    let mut lost_blocks: BTreeSet<u64> = BTreeSet::new();
    if let Some(saved) = checkpoint {
        let same_shape = saved.tier == tier_state.name
            && saved.block_bytes == settings.block_bytes
            && saved.slots == settings.slots;
        let holds_dirty = !saved.detached
            && !saved.entries.is_empty()
            && (!saved.clean_shutdown || saved.entries.iter().any(|entry| entry.2));
        if !same_shape && holds_dirty {
            return Err(invalid(format!(
                "{}: the cache was tier {} with {} slots of {} bytes and may hold dirty blocks, but the configuration gives tier {} with {} slots of {} bytes. Start once with the old cache settings and `tierd cache --mode detach` (or a clean stop in writethrough), then change them",
                crate::meta::MetaStore::checkpoint_path(meta_dir).display(),
                saved.tier,
                saved.slots,
                saved.block_bytes,
                tier_state.name,
                settings.slots,
                settings.block_bytes
            )));
        }
        clean = saved.clean_shutdown;
        requested.clone_from(&saved.mode);
        config_mode = CacheMode::parse(&saved.config_mode).unwrap_or(options.mode);
        detached = saved.detached;
        lost_blocks.extend(saved.lost_blocks.iter().copied());
        if same_shape {
            entries.extend(
                saved
                    .entries
                    .iter()
                    .map(|&(block, slot, dirty)| (block, (slot, dirty))),
            );
        } else {
            notes.push(format!(
                "cache settings changed (tier {}, {} slots of {} bytes before) and nothing was dirty: starting the cache cold",
                saved.tier, saved.slots, saved.block_bytes
            ));
        }
    }
    for record in records {
        match record {
            Record::CacheMap { changes } => {
                clean = false;
                for change in changes {
                    match change.0 {
                        CacheChangeKind::Mapped => {
                            entries.insert(change.1, (change.2, true));
                        }
                        CacheChangeKind::Unmapped => {
                            if entries
                                .get(&change.1)
                                .is_some_and(|entry| entry.0 == change.2)
                            {
                                entries.remove(&change.1);
                            }
                        }
                    }
                }
            }
            Record::CacheMode {
                mode,
                config_mode: configured,
            } => {
                clean = false;
                if detached && mode != "detach" {
                    detached = false;
                    entries.clear();
                }
                requested.clone_from(mode);
                config_mode = CacheMode::parse(configured).unwrap_or(options.mode);
            }
            Record::CacheDetached => {
                clean = false;
                detached = true;
                entries.clear();
            }
            Record::CacheLost { blocks } => {
                clean = false;
                lost_blocks.extend(blocks.iter().copied());
                entries.clear();
            }
            Record::CacheRewritten { blocks } => {
                for block in blocks {
                    lost_blocks.remove(block);
                }
            }
            Record::Place { .. } | Record::Pin { .. } | Record::Unpin { .. } => {}
        }
    }
    // An operator's switch holds until the configuration's mode changes.
    if config_mode != options.mode {
        notes.push(format!(
            "cache mode: the configuration changed from {config_mode} to {}; it replaces the mode last set with `tierd cache` ({requested})",
            options.mode
        ));
        if detached {
            detached = false;
            entries.clear();
        }
        requested = options.mode.name().to_string();
        config_mode = options.mode;
    }
    // Dirty bits are exact only after a clean stop.
    if !clean {
        for entry in entries.values_mut() {
            entry.1 = true;
        }
    }
    let mut lost = None;
    if tier_state.volatile && !entries.is_empty() {
        // RAM came back empty. Written through, home has everything; an
        // unsafe_volatile writeback cache lost its dirty blocks.
        let dirty: Vec<u64> = entries
            .iter()
            .filter(|(_, (_, dirty))| *dirty)
            .map(|(block, _)| *block)
            .collect();
        if !tier_state.write_through && requested == "writeback" {
            notes.push(format!(
                "cache tier {} is memory (unsafe_volatile): {} dirty blocks were lost with the last process",
                tier_state.name,
                dirty.len()
            ));
            lost_blocks.extend(dirty);
        }
        entries.clear();
    }
    if let Some(reason) = tier_state.device.failure() {
        lost_blocks.extend(
            entries
                .iter()
                .filter(|(_, (_, dirty))| *dirty)
                .map(|(block, _)| *block),
        );
        entries.clear();
        lost = Some(reason);
    }
    let detaching = requested == "detach";
    if let Ok(mode) = CacheMode::parse(&requested) {
        settings.mode = mode;
    }
    let restored = entries.len();
    let mut cache = BlockCache::restore(
        settings,
        entries
            .into_iter()
            .map(|(block, (slot, dirty))| (block, slot, dirty)),
    )
    .map_err(|error| {
        invalid(format!(
            "{}: the recovered cache mapping is impossible ({error}); tierd will not guess",
            meta_dir.display()
        ))
    })?;
    if detaching && !detached {
        cache.detach();
    }
    if restored > 0 {
        notes.push(format!(
            "cache: {restored} blocks recovered warm ({} dirty{})",
            cache.dirty_blocks(),
            if clean {
                ""
            } else {
                ": after an unclean stop every mapped block counts as dirty"
            }
        ));
    }
    Ok(CacheLayer::new(
        tier,
        options,
        CacheCore {
            cache,
            requested,
            config_mode,
            detached,
            lost,
            lost_blocks,
            rewritten: Vec::new(),
        },
    ))
}
