//! `atsmf`: automated tiered storage with fast memory and slow flash, paper
//! 002 §4.2–4.3. Doc page: `docs/policies/atsmf.md`.
//!
//! Every period: find the IO concentrations (top-N segments, adjacent ones
//! merged into groups, groups taken until they hold M % of the IO), follow
//! them from period to period and count how long each has lasted (A). A
//! prediction table learned from the concentrations that ended so far gives
//! the rest of its life; a concentration is moved to the fast tier when the
//! response time it saves there (Y) beats what moving it costs (X):
//!
//! ```text
//! Xduration = AveMgTime × subLUNs          (1)
//! Yduration = Pduration − Xduration        (2)
//! X = (AvefWithMg − Avef) × Xduration      (3)
//! Y = (Avef − Avem) × Yduration            (4)
//! ```
//!
//! A concentration walking to adjacent segments also gets the segments it
//! will reach within its predicted rest prefetched. Fast-tier segments that
//! no live concentration covers any more go home, unless the slow tier's
//! response under migration is high (the hold rule of §4.3).
//!
//! The fast tier is the one just above home (tier 0 in a two-tier stack).

pub mod detect;
pub mod predict;

use serde::{Deserialize, Serialize};
use tierd_common::hash::FastSet;

use crate::concentration::{select_groups, SegmentIo, Selection};
use crate::policies::Policy;
use crate::view::{Move, MoveReason, PeriodStats, Plan, SegmentId, TierId, View};

pub use detect::{Concentration, Position};
pub use predict::Row as PredictionRow;

/// The paper's period (002 §4.1: 20 s of block trace + 4 s of analysis).
/// The caller owns the period; the defaults below were set for this one.
pub const PAPER_PERIOD_NS: u64 = 24_000_000_000;

/// ATSMF settings. Defaults are paper 002's values where it gives them;
/// the priors (used only until the run has measured the figure) are ours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AtsmfConfig {
    /// N (002 §4.2 Fig. 4 step 2): segments kept after sorting a period's
    /// segments by IO count. Paper: "a few % of all sub-LUNs"; 20 in Fig. 4,
    /// 30 in the evaluation (§5.2). Default 30.
    pub top_n_segments: u32,
    /// M (002 §4.2 Fig. 4 step 4): groups are taken, most IO first, until
    /// they hold this percentage (0–100) of the period's IO. Paper: ≥ 50; 60
    /// in Fig. 4 and §5.2. Default 60.
    pub share_percent: f64,
    /// When all groups together hold less than M %: true finds no
    /// concentration in that period, false takes them all. The paper
    /// defines a concentration as the groups that hold M % of the IO (§4.2
    /// step 4; §3: "most concentrations hold more than half of all IO, so M
    /// ≥ 50"): top-N groups holding less are spread IO, not a concentration,
    /// and moving them was most of the churn measured on quiet hours.
    /// Default true (`tierd trace analyze` defaults to false, to show them).
    pub require_share: bool,
    /// 002 §4.2: the prediction table is learned from the concentrations
    /// that ended within this many periods ("half a day or so"). Count of
    /// periods; default 1800 = 12 h at 24 s.
    pub prediction_history_periods: u64,
    /// Not in the paper: a row of the table (A) is used once at least this
    /// many ended concentrations lasted ≥ A; before that the prior below is.
    /// Count, ≥ 1. Default 5.
    pub prediction_min_samples: u32,
    /// Prior for the table, ours: rest = ratio × A periods. 002 Table 2's
    /// example gives rest/A = 0.73, 0.69, 0.61, 0.59, 0.60 for A = 1..5.
    /// Default 0.6.
    pub prior_rest_ratio: f64,
    /// Avef, AvefWithMg and Avem (002 §4.2) are measured over the last this
    /// many periods (the tiering driver "totals the response of every IO").
    /// Count of periods, ≥ 1. Default 10 (4 min at 24 s).
    pub measure_periods: u32,
    /// Prior Avef in µs, until the slow (home) tier has served IO. An Intel
    /// P3700's mean in 002 Table 5 is 40–70 µs. Default 50.
    pub prior_flash_response_us: f64,
    /// Prior Avem in µs, until the fast tier has served IO. 002 Table 5's
    /// usr1 row (85 % of IO in memory, 15 µs overall) suggests ~10 µs
    /// through the block layer. Default 10.
    pub prior_memory_response_us: f64,
    /// Prior AvefWithMg as a multiple of Avef, until a user IO has completed
    /// on the slow tier during a migration. Ratio. Default 2.
    pub prior_migration_slowdown: f64,
    /// Prior AveMgTime = segment bytes / this bandwidth, used only when
    /// no move has completed and the caller knows nothing of the devices
    /// (`MigrationStats::device_move_ns`; both `tierd sim` and `tierd
    /// serve` give it). Bytes per second. Default 1e9 (a memory tier's
    /// copy: far too fast for a disk).
    pub prior_migration_bytes_per_s: f64,
    /// Positions kept per concentration (for reports and the saved state).
    /// Its moving speed (002 §4.2) is measured over its whole life, from its
    /// first range. Count, ≥ 1. Default 5.
    pub speed_window_periods: u32,
    /// Not in the paper (its §6.2 names prefetch as a cause of memory use):
    /// at most this many segments prefetched ahead of one concentration.
    /// Default 16.
    pub max_prefetch_segments: u32,
    /// 002 §4.3 hold rule: demotions wait while the slow tier's mean
    /// response during migration in the latest period exceeds this multiple
    /// of Avef (the paper's threshold is a preset absolute value it does not
    /// publish; a ratio carries across devices). Ratio. Default 2.
    pub demotion_hold_ratio: f64,
    /// 002 §6.2: ATSMF does not return sub-LUNs to the SSD as soon as their
    /// concentration ended. A fast-tier segment goes home once no live
    /// concentration (its range or its prefetch window) has covered it for
    /// this many periods, so a concentration whose edges come and go, or
    /// that pauses for a while, is not moved back and forth. Count of
    /// periods; 0 demotes at once. Default 20 (8 min at 24 s; §3.4:
    /// concentrations walk "every few minutes"). On the src1_0, usr_1,
    /// proj_2 and dbt2 presets 5 → 10 → 20 took ATSMF from 92/211/283/172
    /// moves to 44/130/262/81 and 21/58/247/51, response ratios equal or
    /// better, fast-tier peak +20–60 % (`docs/policies/atsmf.md`).
    pub demotion_grace_periods: u32,
    /// Not in the paper (a minimum load): a concentration whose group served
    /// fewer IOs per second than this in the latest period is not moved.
    /// The paper's X and Y are per-IO response times × durations and never
    /// weigh the IO rate, so on a trace with almost no IO (0.001 iops) its
    /// test moved 19 GB for 3.5 MB of user IO. Every workload the paper
    /// measured ran at tens to hundreds of iops, far above the default; 1
    /// iops already left out concentrations that paid on MSR hm_0 (26 iops
    /// in all). IOs per second, ≥ 0; 0 gives the paper's test. Default 0.1.
    pub min_load_iops: f64,
}

impl Default for AtsmfConfig {
    fn default() -> Self {
        Self {
            top_n_segments: 30,
            share_percent: 60.0,
            require_share: true,
            prediction_history_periods: 1800,
            prediction_min_samples: 5,
            prior_rest_ratio: 0.6,
            measure_periods: 10,
            prior_flash_response_us: 50.0,
            prior_memory_response_us: 10.0,
            prior_migration_slowdown: 2.0,
            prior_migration_bytes_per_s: 1e9,
            speed_window_periods: 5,
            max_prefetch_segments: 16,
            demotion_hold_ratio: 2.0,
            demotion_grace_periods: 20,
            min_load_iops: 0.1,
        }
    }
}

impl AtsmfConfig {
    /// Checks the settings; `Err` names the key and what it must be. The
    /// policy itself never panics on bad settings, but a caller should
    /// refuse them.
    pub fn validate(&self) -> Result<(), String> {
        if self.top_n_segments == 0 {
            return Err("top_n_segments = 0: must be at least 1".to_string());
        }
        if !(self.min_load_iops.is_finite() && self.min_load_iops >= 0.0) {
            return Err(format!(
                "min_load_iops = {}: must be a finite rate ≥ 0 (0 gives the paper's test)",
                self.min_load_iops
            ));
        }
        if !(0.0..=100.0).contains(&self.share_percent) {
            return Err(format!(
                "share_percent = {}: must be a percentage in 0..=100",
                self.share_percent
            ));
        }
        for (key, value) in [
            (
                "prediction_min_samples",
                u64::from(self.prediction_min_samples),
            ),
            ("measure_periods", u64::from(self.measure_periods)),
            ("speed_window_periods", u64::from(self.speed_window_periods)),
            (
                "prediction_history_periods",
                self.prediction_history_periods,
            ),
        ] {
            if value == 0 {
                return Err(format!("{key} = 0: must be at least 1"));
            }
        }
        for (key, value) in [
            ("prior_rest_ratio", self.prior_rest_ratio),
            ("prior_flash_response_us", self.prior_flash_response_us),
            ("prior_memory_response_us", self.prior_memory_response_us),
            ("prior_migration_slowdown", self.prior_migration_slowdown),
            ("demotion_hold_ratio", self.demotion_hold_ratio),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!("{key} = {value}: must be a finite number ≥ 0"));
            }
        }
        if !(self.prior_migration_bytes_per_s.is_finite() && self.prior_migration_bytes_per_s > 0.0)
        {
            return Err(format!(
                "prior_migration_bytes_per_s = {}: must be a finite number > 0",
                self.prior_migration_bytes_per_s
            ));
        }
        Ok(())
    }
}

/// Where a figure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// Measured in the current window.
    Measured,
    /// Measured earlier in the run (the window had no sample).
    LastKnown,
    /// Derived from the devices in use (AveMgTime before the first move:
    /// [`crate::view::MigrationStats::device_move_ns`]).
    Devices,
    /// The configured prior: nothing measured yet.
    Prior,
}

impl Source {
    fn word(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::LastKnown => "last measured",
            Source::Devices => "from the devices",
            Source::Prior => "prior",
        }
    }
}

/// The four figures of equations 1–4, in ns, with where each came from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimates {
    /// Avef: mean response of the slow (home) tier, IOs during migration excluded.
    pub flash_response_ns: f64,
    pub flash_source: Source,
    /// AvefWithMg: mean response of the slow tier's IOs that completed while a
    /// migration was running.
    pub flash_response_with_migration_ns: f64,
    pub flash_with_migration_source: Source,
    /// Avem: mean response of the fast tier.
    pub memory_response_ns: f64,
    pub memory_source: Source,
    /// AveMgTime: mean time to move one segment.
    pub move_ns: f64,
    pub move_source: Source,
}

/// Response sums over the measurement window: (sum of response ns, IOs).
#[derive(Clone, Copy, Debug, Default)]
struct WindowSums {
    flash: (u64, u64),
    flash_with_migration: (u64, u64),
    memory: (u64, u64),
}

/// Learned state. Figures are kept as the integers they came from so that
/// a JSON round trip restores them bit for bit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AtsmfState {
    /// Index of the last period taken into the tracker.
    last_period: Option<u64>,
    tracker: detect::Tracker,
    durations: predict::DurationLog,
    /// Last measured (response ns sum, IOs) of Avef, AvefWithMg, Avem.
    last_flash: Option<(u64, u64)>,
    last_flash_with_migration: Option<(u64, u64)>,
    last_memory: Option<(u64, u64)>,
    /// Last period a live concentration's range or prefetch window covered
    /// each segment (for the grace before demotion; pruned after it).
    #[serde(default)]
    last_claimed: std::collections::BTreeMap<SegmentId, u64>,
}

pub struct Atsmf {
    config: AtsmfConfig,
    state: AtsmfState,
}

fn mean((total_ns, ios): (u64, u64)) -> f64 {
    total_ns as f64 / ios as f64
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

impl Atsmf {
    pub fn new(config: AtsmfConfig) -> Self {
        Self {
            config,
            state: AtsmfState::default(),
        }
    }

    pub fn config(&self) -> &AtsmfConfig {
        &self.config
    }

    /// Concentrations alive in the latest period taken in, IO descending.
    pub fn concentrations(&self) -> &[Concentration] {
        &self.state.tracker.alive
    }

    /// Ended concentrations the prediction table is learned from now.
    pub fn learned_durations(&self) -> usize {
        self.state.durations.len()
    }

    /// Table 2 row for a concentration that has lasted `periods_lasted`.
    pub fn prediction_row(&self, periods_lasted: u64) -> PredictionRow {
        self.state.durations.table().row(
            periods_lasted,
            u64::from(self.config.prediction_min_samples),
            self.config.prior_rest_ratio,
        )
    }

    /// Equations 1–4's live figures for `view` (without recording them).
    pub fn estimates(&self, view: &View) -> Estimates {
        self.estimates_from(view, &self.window_sums(view))
    }

    fn window_sums(&self, view: &View) -> WindowSums {
        let mut sums = WindowSums::default();
        if view.tiers.len() < 2 {
            return sums;
        }
        let home = view.tiers.len() - 1;
        let periods = (self.config.measure_periods.max(1) as usize).min(view.history.len());
        for period in &view.history[view.history.len() - periods..] {
            if let Some(slow) = period.tiers.get(home) {
                let ios = slow.ios.saturating_sub(slow.ios_during_migration);
                let total = slow
                    .response_ns_total
                    .saturating_sub(slow.response_ns_total_during_migration);
                sums.flash.0 += total;
                sums.flash.1 += ios;
                sums.flash_with_migration.0 += slow.response_ns_total_during_migration;
                sums.flash_with_migration.1 += slow.ios_during_migration;
            }
            if let Some(fast) = period.tiers.get(home - 1) {
                sums.memory.0 += fast.response_ns_total;
                sums.memory.1 += fast.ios;
            }
        }
        sums
    }

    fn estimates_from(&self, view: &View, sums: &WindowSums) -> Estimates {
        let config = &self.config;
        let pick = |window: (u64, u64), last: Option<(u64, u64)>| {
            if window.1 > 0 {
                Some((mean(window), Source::Measured))
            } else {
                last.filter(|sample| sample.1 > 0)
                    .map(|sample| (mean(sample), Source::LastKnown))
            }
        };
        let (flash_response_ns, flash_source) = pick(sums.flash, self.state.last_flash)
            .unwrap_or((config.prior_flash_response_us * 1e3, Source::Prior));
        let (flash_response_with_migration_ns, flash_with_migration_source) = pick(
            sums.flash_with_migration,
            self.state.last_flash_with_migration,
        )
        .unwrap_or((
            flash_response_ns * config.prior_migration_slowdown,
            Source::Prior,
        ));
        let (memory_response_ns, memory_source) = pick(sums.memory, self.state.last_memory)
            .unwrap_or((config.prior_memory_response_us * 1e3, Source::Prior));
        // Measured moves first, then the copy time of the devices in use,
        // then the prior (a memory tier's copy time: wrong on a disk).
        let usable = |ns: Option<f64>| ns.filter(|ns| ns.is_finite() && *ns >= 0.0);
        let (move_ns, move_source) = match (
            usable(view.migration.mean_move_ns),
            usable(view.migration.device_move_ns),
        ) {
            (Some(ns), _) => (ns, Source::Measured),
            (None, Some(ns)) => (ns, Source::Devices),
            (None, None) => (
                view.segment_bytes as f64 / config.prior_migration_bytes_per_s * 1e9,
                Source::Prior,
            ),
        };
        Estimates {
            flash_response_ns,
            flash_source,
            flash_response_with_migration_ns,
            flash_with_migration_source,
            memory_response_ns,
            memory_source,
            move_ns,
            move_source,
        }
    }

    /// Takes the periods of `history` not seen yet into the tracker and the
    /// duration log.
    fn observe(&mut self, history: &[PeriodStats]) {
        let Some(newest) = history.last().map(|period| period.index) else {
            return;
        };
        if self.state.last_period.is_some_and(|last| newest < last) {
            // Period numbering restarted (a restarted engine): the learned
            // durations stay, the concentrations being followed are dropped.
            self.state.last_period = None;
            self.state.tracker.alive.clear();
            self.state.tracker.alive_period = None;
        }
        let keep_positions = self.config.speed_window_periods.max(1) as usize + 1;
        let selection = Selection {
            top_n: self.config.top_n_segments as usize,
            share_percent: self.config.share_percent,
            require_share: self.config.require_share,
        };
        let mut cells: Vec<SegmentIo> = Vec::new();
        for period in history {
            if self
                .state
                .last_period
                .is_some_and(|last| period.index <= last)
            {
                continue;
            }
            cells.clear();
            cells.extend(
                period
                    .segments
                    .iter()
                    .filter(|stats| stats.ios() > 0)
                    .map(|stats| SegmentIo {
                        segment: u64::from(stats.segment),
                        io: u64::from(stats.ios()),
                        writes: u64::from(stats.writes),
                    }),
            );
            let groups = select_groups(&mut cells, &selection);
            for ended in self
                .state
                .tracker
                .observe(period.index, &groups, keep_positions)
            {
                self.state
                    .durations
                    .record(ended.last_period, ended.periods);
            }
            self.state.last_period = Some(period.index);
        }
        self.state
            .durations
            .expire(newest, self.config.prediction_history_periods);
    }
}

fn claimed(ranges: &[(SegmentId, SegmentId)], segment: SegmentId) -> bool {
    ranges
        .iter()
        .any(|&(first, last)| first <= segment && segment <= last)
}

impl Policy for Atsmf {
    fn name(&self) -> &'static str {
        "atsmf"
    }

    fn restates_plan(&self) -> bool {
        true
    }

    fn plan(&mut self, view: &View) -> Plan {
        self.observe(view.history);
        let mut plan = Plan::default();
        if view.tiers.len() < 2 {
            return Plan::nothing("one tier: nothing to move");
        }
        let home = view.home_tier();
        let fast: TierId = home - 1;
        let sums = self.window_sums(view);
        let estimates = self.estimates_from(view, &sums);
        if sums.flash.1 > 0 {
            self.state.last_flash = Some(sums.flash);
        }
        if sums.flash_with_migration.1 > 0 {
            self.state.last_flash_with_migration = Some(sums.flash_with_migration);
        }
        if sums.memory.1 > 0 {
            self.state.last_memory = Some(sums.memory);
        }
        let config = &self.config;
        let table = self.state.durations.table();
        let period_s = view.period_ns as f64 / 1e9;
        let move_s = estimates.move_ns / 1e9;
        let volume_segments = (view.segments as usize).min(view.placement.len());
        let last_segment = match volume_segments.checked_sub(1) {
            Some(last) => SegmentId::try_from(last).unwrap_or(SegmentId::MAX),
            None => return Plan::nothing("no segments: nothing to move"),
        };
        // Segments no rule may pick: moving already, or pinned by an
        // operator (they keep their place and their slot).
        let moving: FastSet<SegmentId> = view
            .in_flight
            .iter()
            .map(|m| m.segment)
            .chain(view.pinned.iter().copied())
            .collect();
        let on_home = |segment: SegmentId| {
            view.placement.get(segment as usize) == Some(&home) && !moving.contains(&segment)
        };
        let figures = format!(
            "Avef {:.1} µs ({}), AvefWithMg {:.1} µs ({}), Avem {:.1} µs ({}), AveMgTime {:.3} s ({})",
            us(estimates.flash_response_ns),
            estimates.flash_source.word(),
            us(estimates.flash_response_with_migration_ns),
            estimates.flash_with_migration_source.word(),
            us(estimates.memory_response_ns),
            estimates.memory_source.word(),
            move_s,
            estimates.move_source.word(),
        );

        let mut claims: Vec<(SegmentId, SegmentId)> = Vec::new();
        let mut promotions: Vec<Move> = Vec::new();
        let mut chosen: FastSet<SegmentId> = FastSet::default();
        let mut below_load = 0usize;
        for concentration in &self.state.tracker.alive {
            let position = concentration.current();
            let first = position.first_segment.min(last_segment);
            let last = position.last_segment.min(last_segment);
            claims.push((first, last));
            let row = table.row(
                concentration.periods,
                u64::from(config.prediction_min_samples),
                config.prior_rest_ratio,
            );
            let rest_s = row.rest_periods * period_s;
            let missing: Vec<SegmentId> = (first..=last)
                .filter(|segment| on_home(*segment) && !chosen.contains(segment))
                .collect();
            let x_duration_s = move_s * missing.len() as f64;
            let y_duration_s = rest_s - x_duration_s;
            let x = us(estimates.flash_response_with_migration_ns - estimates.flash_response_ns)
                * x_duration_s;
            let y = us(estimates.flash_response_ns - estimates.memory_response_ns) * y_duration_s;
            // Move when Y > X; otherwise re-judge next period (NaN never moves).
            let worth_moving = y > x;
            if !worth_moving {
                continue;
            }
            // The minimum load.
            let rate = concentration.ios as f64 / period_s;
            if !missing.is_empty() && rate < config.min_load_iops {
                below_load += 1;
                continue;
            }
            // The longest these moves may wait and still pay back: Y
            // shrinks by (Avef − Avem) per second waited until it meets X.
            let saving_us = us(estimates.flash_response_ns - estimates.memory_response_ns);
            if saving_us > 0.0 {
                let payback_s = (y - x) / saving_us;
                let payback_ns = (payback_s * 1e9).clamp(0.0, u64::MAX as f64) as u64;
                plan.payback_ns = Some(plan.payback_ns.map_or(payback_ns, |ns| ns.max(payback_ns)));
            }
            let judgement = format!(
                "concentration {} at segments {first}..={last}, lasted A = {} periods; rest {:.2} periods = {rest_s:.1} s ({} from {} samples); subLUNs {}; Xduration {x_duration_s:.2} s, Yduration {y_duration_s:.2} s; X {x:.1} µs·s < Y {y:.1} µs·s; its IO {rate:.2} iops; {figures}",
                concentration.id,
                concentration.periods,
                row.rest_periods,
                if row.learned { "learned" } else { "prior" },
                row.samples,
                missing.len(),
            );
            for segment in missing {
                chosen.insert(segment);
                promotions.push(Move {
                    segment,
                    from: home,
                    to: fast,
                    reason: MoveReason {
                        rule: "atsmf:benefit".to_string(),
                        detail: judgement.clone(),
                    },
                });
            }
            // Prefetch where a moving concentration will be within its rest.
            let Some(speed) = concentration.speed_segments_per_period() else {
                continue;
            };
            if !concentration.moving || speed == 0.0 || !speed.is_finite() {
                continue;
            }
            // The segments its range will have reached within its rest.
            let ahead = (speed.abs() * row.rest_periods.max(0.0))
                .floor()
                .min(f64::from(config.max_prefetch_segments)) as u32;
            if ahead == 0 {
                continue;
            }
            let targets: Vec<SegmentId> = if speed > 0.0 {
                (1..=ahead)
                    .map_while(|step| last.checked_add(step).filter(|s| *s <= last_segment))
                    .collect()
            } else {
                (1..=ahead)
                    .map_while(|step| first.checked_sub(step))
                    .collect()
            };
            if let (Some(&near), Some(&far)) = (targets.first(), targets.last()) {
                claims.push((near.min(far), near.max(far)));
            }
            for segment in targets {
                if !on_home(segment) || !chosen.insert(segment) {
                    continue;
                }
                promotions.push(Move {
                    segment,
                    from: home,
                    to: fast,
                    reason: MoveReason {
                        rule: "atsmf:prefetch".to_string(),
                        detail: format!(
                            "concentration {} at segments {first}..={last} moves {speed:+.2} segments/period; rest {:.2} periods → {ahead} segments ahead",
                            concentration.id, row.rest_periods
                        ),
                    },
                });
            }
        }

        // Demote what no live concentration covers, unless held (§4.3).
        let latest_with_migration = view
            .latest()
            .and_then(|period| period.tiers.get(home as usize))
            .filter(|slow| slow.ios_during_migration > 0)
            .map(|slow| {
                mean((
                    slow.response_ns_total_during_migration,
                    slow.ios_during_migration,
                ))
            });
        let hold_ns = config.demotion_hold_ratio * estimates.flash_response_ns;
        let held = latest_with_migration.is_some_and(|ns| ns > hold_ns);
        let newest = view.latest().map_or(0, |period| period.index);
        for &(first, last) in &claims {
            for segment in first..=last {
                self.state.last_claimed.insert(segment, newest);
            }
        }
        // A segment still among the latest period's top N is in a sub-LUN
        // group (Fig. 4 step 3), only not needed to reach M %: its
        // concentration has not ended (§4.3), so it is not demoted either.
        if let Some(latest) = view.latest() {
            let mut top: Vec<(u32, SegmentId)> = latest
                .segments
                .iter()
                .filter(|stats| stats.ios() > 0)
                .map(|stats| (stats.ios(), stats.segment))
                .collect();
            let keep = (config.top_n_segments as usize).min(top.len());
            if keep > 0 && keep < top.len() {
                top.select_nth_unstable_by(keep - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            }
            for &(_, segment) in &top[..keep] {
                if view.placement.get(segment as usize) == Some(&fast) {
                    self.state.last_claimed.insert(segment, newest);
                }
            }
        }
        let grace = u64::from(config.demotion_grace_periods);
        self.state
            .last_claimed
            .retain(|_, claimed| newest.saturating_sub(*claimed) <= grace);
        let mut demotions = 0u32;
        let mut held_note = None;
        if let (true, Some(ns)) = (held, latest_with_migration) {
            held_note = Some(format!(
                "demotions held: slow-tier response under migration {:.1} µs > hold {:.1} µs",
                us(ns),
                us(hold_ns)
            ));
        }
        if !held {
            let why = match latest_with_migration {
                Some(ns) => format!(
                    "slow-tier response under migration {:.1} µs ≤ hold {:.1} µs ({} × Avef)",
                    us(ns),
                    us(hold_ns),
                    config.demotion_hold_ratio
                ),
                None => "no migration in the latest period".to_string(),
            };
            for index in 0..volume_segments {
                let Ok(segment) = SegmentId::try_from(index) else {
                    break;
                };
                if view.placement[index] != fast
                    || moving.contains(&segment)
                    || claimed(&claims, segment)
                {
                    continue;
                }
                let since = match self.state.last_claimed.get(&segment) {
                    Some(&claimed) if newest.saturating_sub(claimed) < grace.max(1) => continue,
                    Some(&claimed) => format!("since period {claimed}"),
                    None => format!("for over {grace} periods"),
                };
                demotions += 1;
                plan.moves.push(Move {
                    segment,
                    from: fast,
                    to: home,
                    reason: MoveReason {
                        rule: "atsmf:ended".to_string(),
                        detail: format!(
                            "no live concentration has covered segment {segment} {since} (grace {grace} periods); {why}"
                        ),
                    },
                });
            }
        }
        let fast_info = &view.tiers[fast as usize];
        let free = fast_info
            .capacity_segments
            .saturating_sub(fast_info.used_segments)
            .saturating_add(demotions);
        let wanted = promotions.len();
        promotions.truncate(free as usize);
        let promoted = promotions.len();
        plan.moves.extend(promotions);
        let alive = self.state.tracker.alive.len();
        plan.summary = if plan.moves.is_empty() {
            format!("{alive} live concentrations: no move")
        } else {
            format!("{alive} live concentrations: {promoted} promotions, {demotions} demotions")
        };
        if promoted < wanted {
            plan.summary.push_str(&format!(
                "; {} promotions left out (fast tier has room for {free})",
                wanted - promoted
            ));
        }
        if below_load > 0 {
            plan.summary.push_str(&format!(
                "; {below_load} concentrations below the minimum load of {} iops left where they are",
                config.min_load_iops
            ));
        }
        if let Some(note) = held_note {
            plan.summary.push_str("; ");
            plan.summary.push_str(&note);
        }
        if !view.pinned.is_empty() {
            plan.summary.push_str(&format!(
                "; {} pinned segments left alone",
                view.pinned.len()
            ));
        }
        plan
    }

    fn save_state(&self) -> serde_json::Value {
        serde_json::to_value(&self.state).unwrap_or(serde_json::Value::Null)
    }

    fn restore_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        let restored: AtsmfState = serde_json::from_value(state.clone())
            .map_err(|error| format!("atsmf state: {error}"))?;
        if restored
            .tracker
            .alive
            .iter()
            .any(|concentration| concentration.positions.is_empty())
        {
            return Err("atsmf state: a concentration without positions".to_string());
        }
        self.state = restored;
        Ok(())
    }
}
