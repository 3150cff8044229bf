//! Data reduction's timing decisions (paper 004): whether a write is reduced
//! before its acknowledgement (inline) or staged raw and reduced later
//! (post-process), switched on the measured utilisation of the reduction
//! workers with one threshold or two (hysteresis), and how much may wait
//! staged.
//!
//! Sans-IO: the caller reports the workers' busy time and the clock; the
//! [`Switch`] answers which mode new writes take and when it changed. The
//! live reduced tier (`tierd_engine::device::reduce`) and the simulator's
//! processor model run this same code.
//!
//! The paper's rule: go inline when utilisation rises above T1 (65 %), back
//! to post-process when it falls below T2 (35 %), with
//! `T2 + (util_post − util_inline) < T1`, so the drop in work that the switch
//! to inline itself causes cannot take utilisation under T2 and switch back.
//! With post-process doing `r` times inline's work per write (`r ≥ 1`: it
//! stages and reads back), utilisation at the switch point falls from T1 to
//! `T1 / r`, so the inequality is `T2 < T1 / r`
//! ([`SwitchConfig::max_post_work_ratio`]).
//!
//! [`clean`]: the cleaner's decisions (when to clean, which packs, the
//! reserve only it may take, how long a write without room keeps trying).

pub mod clean;

/// How a write is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Mode {
    /// Reduced before the acknowledgement: least work per write (best
    /// throughput), the reduction's time is in the response.
    Inline,
    /// Staged raw, acknowledged, reduced later: best response at light load,
    /// more work per write (the stage is written and read back).
    Post,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Inline => "inline",
            Mode::Post => "post",
        }
    }
}

/// The configured mode: fixed, or switched on utilisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum ModeSetting {
    Inline,
    Post,
    Auto,
}

impl ModeSetting {
    pub fn name(self) -> &'static str {
        match self {
            ModeSetting::Inline => "inline",
            ModeSetting::Post => "post",
            ModeSetting::Auto => "auto",
        }
    }
}

/// `auto`'s rule: the paper's two thresholds, or the conventional single one
/// (for comparison: it oscillates near its threshold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum SwitchRule {
    /// Inline above `t1`, back to post below `t2`.
    Double,
    /// Inline above `t1`, post below `t1`.
    Single,
}

/// Default T1 (paper 004 §4).
pub const DEFAULT_T1: f64 = 0.65;
/// Default T2 (paper 004 §4).
pub const DEFAULT_T2: f64 = 0.35;
/// Default utilisation window: the switch decides once per window.
pub const DEFAULT_WINDOW_NS: u64 = 1_000_000_000;
/// Post-process work per write over inline's assumed before any is
/// measured: staging writes the block once more and reads it back, on top
/// of the same hashing and compression. Replaced by the measured ratio as
/// soon as both modes have run.
pub const DEFAULT_POST_WORK_RATIO: f64 = 1.5;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchConfig {
    pub setting: ModeSetting,
    pub rule: SwitchRule,
    /// To inline above this utilisation (0 < t1 < 1).
    pub t1: f64,
    /// Back to post below this utilisation (double rule; 0 < t2 < t1).
    pub t2: f64,
    /// Utilisation is measured over windows of this length.
    pub window_ns: u64,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            setting: ModeSetting::Auto,
            rule: SwitchRule::Double,
            t1: DEFAULT_T1,
            t2: DEFAULT_T2,
            window_ns: DEFAULT_WINDOW_NS,
        }
    }
}

impl SwitchConfig {
    /// The largest post/inline work ratio `r` the thresholds tolerate without
    /// oscillating: the paper's `T2 + (u_post − u_inline) < T1` at the
    /// switch point (`u_post = T1`, `u_inline = T1 / r`) is `r < T1 / T2`.
    pub fn max_post_work_ratio(&self) -> f64 {
        match self.rule {
            SwitchRule::Double => self.t1 / self.t2,
            SwitchRule::Single => 1.0,
        }
    }

    /// Checks the thresholds: `0 < t2 < t1 < 1`, a window, and for the
    /// double rule the paper's inequality at `post_work_ratio` (post's work
    /// per write over inline's: [`DEFAULT_POST_WORK_RATIO`] at start, the
    /// measured one later). The message says what to change.
    pub fn validate(&self, post_work_ratio: f64) -> Result<(), String> {
        if !(self.t1 > 0.0 && self.t1 < 1.0) {
            return Err(format!(
                "t1 = {} must be a utilisation between 0 and 1 (exclusive), e.g. 0.65",
                self.t1
            ));
        }
        if self.window_ns == 0 {
            return Err("window must be longer than 0 (e.g. \"1s\")".to_string());
        }
        if self.rule == SwitchRule::Single {
            return Ok(());
        }
        if !(self.t2 > 0.0 && self.t2 < self.t1) {
            return Err(format!(
                "t2 = {} must be above 0 and below t1 = {} (the paper uses t1 = 0.65, t2 = 0.35)",
                self.t2, self.t1
            ));
        }
        let gap = self.t1 - self.t1 / post_work_ratio.max(1.0);
        if self.t2 + gap >= self.t1 {
            return Err(format!(
                "t2 = {} is too close to t1 = {}: switching to inline lowers utilisation by about {:.2} \
                 (post-process does {:.2}x inline's work per write), so t2 + {:.2} must stay below t1 \
                 (paper 004: T2 + (util_post - util_inline) < T1); lower t2 below {:.2}",
                self.t2,
                self.t1,
                gap,
                post_work_ratio,
                gap,
                self.t1 - gap
            ));
        }
        Ok(())
    }
}

/// One change of mode and the utilisation that caused it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SwitchEvent {
    pub at_ns: u64,
    pub from: Mode,
    pub to: Mode,
    /// The window's utilisation (0..=1).
    pub utilisation: f64,
}

/// Exponential mean of per-write work, for the measured post/inline ratio.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct WorkMean {
    ns: f64,
    samples: u64,
}

impl WorkMean {
    fn add(&mut self, ns: f64) {
        self.samples += 1;
        let weight = (1.0 / self.samples as f64).max(1.0 / 1024.0);
        self.ns += (ns - self.ns) * weight;
    }
}

/// The mode decision: measures utilisation per window and applies the rule.
#[derive(Clone, Debug)]
pub struct Switch {
    config: SwitchConfig,
    mode: Mode,
    window_start_ns: u64,
    window_busy_ns: u64,
    last_utilisation: f64,
    switches: u64,
    last_event: Option<SwitchEvent>,
    work_inline: WorkMean,
    work_post: WorkMean,
}

impl Switch {
    /// Starts in post-process for `auto` (the light-load mode: utilisation
    /// is 0 before any write).
    pub fn new(config: SwitchConfig, now_ns: u64) -> Switch {
        let mode = match config.setting {
            ModeSetting::Inline => Mode::Inline,
            ModeSetting::Post | ModeSetting::Auto => Mode::Post,
        };
        Switch {
            config,
            mode,
            window_start_ns: now_ns,
            window_busy_ns: 0,
            last_utilisation: 0.0,
            switches: 0,
            last_event: None,
            work_inline: WorkMean::default(),
            work_post: WorkMean::default(),
        }
    }

    pub fn config(&self) -> &SwitchConfig {
        &self.config
    }

    /// The mode new writes take.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn switches(&self) -> u64 {
        self.switches
    }

    pub fn last_event(&self) -> Option<SwitchEvent> {
        self.last_event
    }

    /// The last closed window's utilisation.
    pub fn utilisation(&self) -> f64 {
        self.last_utilisation
    }

    /// A worker spent `busy_ns` on one write's reduction work in `mode`
    /// (post: reading the stage back, hashing, compressing, storing).
    pub fn record_work(&mut self, mode: Mode, busy_ns: u64) {
        self.window_busy_ns = self.window_busy_ns.saturating_add(busy_ns);
        match mode {
            Mode::Inline => self.work_inline.add(busy_ns as f64),
            Mode::Post => self.work_post.add(busy_ns as f64),
        }
    }

    /// Worker time spent on something other than one write (kept in the
    /// utilisation, not in the per-write ratio).
    pub fn record_busy(&mut self, busy_ns: u64) {
        self.window_busy_ns = self.window_busy_ns.saturating_add(busy_ns);
    }

    /// Post's measured work per write over inline's, once both have at
    /// least 16 samples.
    pub fn measured_post_work_ratio(&self) -> Option<f64> {
        (self.work_inline.samples >= 16
            && self.work_post.samples >= 16
            && self.work_inline.ns > 0.0)
            .then(|| self.work_post.ns / self.work_inline.ns)
    }

    /// Closes the window if `now_ns` is past its end (`workers` reduction
    /// workers) and applies the rule; returns the switch it made, if any.
    pub fn tick(&mut self, now_ns: u64, workers: u32) -> Option<SwitchEvent> {
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < self.config.window_ns {
            return None;
        }
        let capacity = elapsed as f64 * workers.max(1) as f64;
        let utilisation = (self.window_busy_ns as f64 / capacity).clamp(0.0, 1.0);
        self.window_start_ns = now_ns;
        self.window_busy_ns = 0;
        self.decide(now_ns, utilisation)
    }

    /// The rule alone: `utilisation` measured over the window ending at
    /// `now_ns`.
    pub fn decide(&mut self, now_ns: u64, utilisation: f64) -> Option<SwitchEvent> {
        self.last_utilisation = utilisation;
        if self.config.setting != ModeSetting::Auto {
            return None;
        }
        let to = match (self.mode, self.config.rule) {
            (Mode::Post, _) if utilisation > self.config.t1 => Mode::Inline,
            (Mode::Inline, SwitchRule::Double) if utilisation < self.config.t2 => Mode::Post,
            (Mode::Inline, SwitchRule::Single) if utilisation < self.config.t1 => Mode::Post,
            _ => return None,
        };
        let event = SwitchEvent {
            at_ns: now_ns,
            from: self.mode,
            to,
            utilisation,
        };
        self.mode = to;
        self.switches += 1;
        self.last_event = Some(event);
        Some(event)
    }
}

/// The stage's bound: how many blocks may wait raw for post-process
/// reduction. A post write that finds it full is reduced inline instead
/// (counted), so the stage never grows past what the tier can hold raw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Staging {
    pub limit_blocks: u64,
    pub staged_blocks: u64,
    /// Post writes reduced inline because the stage was full.
    pub overflows: u64,
}

impl Staging {
    pub fn new(limit_blocks: u64) -> Staging {
        Staging {
            limit_blocks,
            ..Staging::default()
        }
    }

    /// The mode one block of a write takes when the switch says `mode`:
    /// post only while the stage has room (the block is then counted as
    /// staged until [`Staging::reduced`]).
    pub fn admit(&mut self, mode: Mode) -> Mode {
        if mode == Mode::Inline {
            return Mode::Inline;
        }
        if self.staged_blocks >= self.limit_blocks {
            self.overflows += 1;
            return Mode::Inline;
        }
        self.staged_blocks += 1;
        Mode::Post
    }

    /// A staged block left the stage (reduced, or overwritten before).
    pub fn reduced(&mut self) {
        self.staged_blocks = self.staged_blocks.saturating_sub(1);
    }
}

/// Whose time a piece of reduction work is on, which orders the workers'
/// queue ([`WorkQueue`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Urgency {
    /// A user waits for it: an inline reduction, or storing a block in the
    /// stage before a post-process write is acknowledged.
    Foreground,
    /// Nobody waits: reducing a staged block.
    Background,
}

impl Urgency {
    /// The urgency of reducing a block that [`Staging::admit`] gave `mode`:
    /// inline's reduction is before the acknowledgement, post's after it
    /// (storing the block in the stage is foreground: the user waits).
    pub fn of_reduction(mode: Mode) -> Urgency {
        match mode {
            Mode::Inline => Urgency::Foreground,
            Mode::Post => Urgency::Background,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Urgency::Foreground => "foreground",
            Urgency::Background => "background",
        }
    }
}

/// How the reduction workers' queue orders work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum QueueOrder {
    /// Work a user waits for before staged reductions (the reduced tier's).
    #[default]
    ForegroundFirst,
    /// Arrival order whatever the urgency, for comparison: a staged
    /// reduction delays the writes queued behind it, as on a processor
    /// without priorities.
    Fifo,
}

impl QueueOrder {
    pub fn name(self) -> &'static str {
        match self {
            QueueOrder::ForegroundFirst => "foreground-first",
            QueueOrder::Fifo => "fifo",
        }
    }
}

/// The reduction workers' queue. In [`QueueOrder::ForegroundFirst`] (the
/// default) work a user waits for (inline reductions, stage stores) goes
/// before work nobody waits for (reducing staged blocks), first in first
/// out within each; a worker that frees takes [`WorkQueue::pop`]. Not
/// preemptive: background work already running finishes first. Background
/// work thus runs only in the workers' idle time, so post-process keeps its
/// short response while the backlog waits (bounded by [`Staging`]), and the
/// backlog drains when writes pause.
#[derive(Clone, Debug)]
pub struct WorkQueue<T> {
    order: QueueOrder,
    /// Foreground work; in FIFO order, all work.
    first: std::collections::VecDeque<(Urgency, T)>,
    /// Background work (foreground-first order only).
    second: std::collections::VecDeque<(Urgency, T)>,
    background_waiting: usize,
}

impl<T> Default for WorkQueue<T> {
    fn default() -> Self {
        WorkQueue::with_order(QueueOrder::default())
    }
}

impl<T> WorkQueue<T> {
    /// A foreground-first queue.
    pub fn new() -> WorkQueue<T> {
        WorkQueue::default()
    }

    pub fn with_order(order: QueueOrder) -> WorkQueue<T> {
        WorkQueue {
            order,
            first: std::collections::VecDeque::new(),
            second: std::collections::VecDeque::new(),
            background_waiting: 0,
        }
    }

    pub fn order(&self) -> QueueOrder {
        self.order
    }

    pub fn push(&mut self, urgency: Urgency, job: T) {
        if urgency == Urgency::Background {
            self.background_waiting += 1;
        }
        match (self.order, urgency) {
            (QueueOrder::ForegroundFirst, Urgency::Background) => {
                self.second.push_back((urgency, job))
            }
            _ => self.first.push_back((urgency, job)),
        }
    }

    /// The next job a free worker takes: foreground-first, the oldest
    /// foreground job, else the oldest background one; FIFO, the oldest.
    pub fn pop(&mut self) -> Option<(Urgency, T)> {
        let next = self.first.pop_front().or_else(|| self.second.pop_front());
        if let Some((Urgency::Background, _)) = next {
            self.background_waiting -= 1;
        }
        next
    }

    /// Jobs waiting (not running) of `urgency`.
    pub fn waiting(&self, urgency: Urgency) -> usize {
        match urgency {
            Urgency::Foreground => self.len() - self.background_waiting,
            Urgency::Background => self.background_waiting,
        }
    }

    pub fn len(&self) -> usize {
        self.first.len() + self.second.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_empty() && self.second.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(rule: SwitchRule) -> Switch {
        Switch::new(
            SwitchConfig {
                rule,
                ..SwitchConfig::default()
            },
            0,
        )
    }

    /// The paper's Fig. 3 loop: at a load where post runs at 70 % and
    /// inline at 50 %, one threshold at 65 % flips every window; two
    /// thresholds (65/35) switch once and stay (Fig. 4).
    #[test]
    fn one_threshold_oscillates_where_two_hold() {
        for (rule, expected) in [(SwitchRule::Single, 10), (SwitchRule::Double, 1)] {
            let mut switch = auto(rule);
            for window in 1..=10u64 {
                let utilisation = match switch.mode() {
                    Mode::Post => 0.70,
                    Mode::Inline => 0.50,
                };
                switch.decide(window, utilisation);
            }
            assert_eq!(switch.switches(), expected, "{rule:?}");
        }
    }

    #[test]
    fn utilisation_is_busy_time_over_the_window_and_the_workers() {
        let mut switch = auto(SwitchRule::Double);
        switch.record_work(Mode::Post, 700_000_000);
        switch.record_work(Mode::Post, 700_000_000);
        assert_eq!(switch.tick(999_999_999, 2), None, "window not over");
        let event = switch.tick(1_000_000_000, 2).expect("70 % > 65 %");
        assert_eq!((event.from, event.to), (Mode::Post, Mode::Inline));
        assert!((event.utilisation - 0.70).abs() < 1e-9);
        // 40 % stays inline (above t2); 30 % goes back.
        switch.record_busy(800_000_000);
        assert_eq!(switch.tick(2_000_000_000, 2), None);
        switch.record_busy(600_000_000);
        assert_eq!(
            switch.tick(3_000_000_000, 2).map(|event| event.to),
            Some(Mode::Post)
        );
        assert_eq!(switch.switches(), 2);
    }

    #[test]
    fn fixed_modes_never_switch() {
        for (setting, mode) in [
            (ModeSetting::Inline, Mode::Inline),
            (ModeSetting::Post, Mode::Post),
        ] {
            let mut switch = Switch::new(
                SwitchConfig {
                    setting,
                    ..SwitchConfig::default()
                },
                0,
            );
            assert_eq!(switch.decide(1, 0.99), None);
            assert_eq!(switch.decide(2, 0.0), None);
            assert_eq!(switch.mode(), mode);
        }
    }

    #[test]
    fn the_papers_inequality_is_checked() {
        let config = SwitchConfig::default();
        assert!(config.validate(DEFAULT_POST_WORK_RATIO).is_ok());
        // 0.65 / 0.35 = 1.857: post doing twice inline's work breaks it.
        let error = config.validate(2.0).unwrap_err();
        assert!(error.contains("lower t2 below 0.33"), "{error}");
        let close = SwitchConfig {
            t2: 0.6,
            ..SwitchConfig::default()
        };
        assert!(close.validate(1.2).is_err());
        let inverted = SwitchConfig {
            t1: 0.3,
            t2: 0.5,
            ..SwitchConfig::default()
        };
        assert!(inverted.validate(1.0).unwrap_err().contains("below t1"));
        assert!((config.max_post_work_ratio() - 0.65 / 0.35).abs() < 1e-12);
    }

    #[test]
    fn measured_ratio_needs_both_modes() {
        let mut switch = auto(SwitchRule::Double);
        for _ in 0..16 {
            switch.record_work(Mode::Inline, 100);
        }
        assert_eq!(switch.measured_post_work_ratio(), None);
        for _ in 0..16 {
            switch.record_work(Mode::Post, 150);
        }
        assert!((switch.measured_post_work_ratio().unwrap() - 1.5).abs() < 1e-9);
    }

    #[test]
    fn a_full_stage_sends_post_writes_inline() {
        let mut staging = Staging::new(2);
        assert_eq!(staging.admit(Mode::Post), Mode::Post);
        assert_eq!(staging.admit(Mode::Post), Mode::Post);
        assert_eq!(staging.admit(Mode::Post), Mode::Inline);
        assert_eq!(staging.overflows, 1);
        staging.reduced();
        assert_eq!(staging.admit(Mode::Post), Mode::Post);
        assert_eq!(staging.admit(Mode::Inline), Mode::Inline);
        assert_eq!(staging.staged_blocks, 2);
    }

    #[test]
    fn foreground_work_goes_before_background_work() {
        let mut queue = WorkQueue::new();
        queue.push(Urgency::of_reduction(Mode::Post), "reduce staged 1");
        queue.push(Urgency::Foreground, "stage 2");
        queue.push(Urgency::of_reduction(Mode::Post), "reduce staged 2");
        queue.push(Urgency::of_reduction(Mode::Inline), "inline 3");
        assert_eq!(queue.len(), 4);
        assert_eq!(queue.waiting(Urgency::Background), 2);
        let order: Vec<(Urgency, &str)> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(
            order,
            [
                (Urgency::Foreground, "stage 2"),
                (Urgency::Foreground, "inline 3"),
                (Urgency::Background, "reduce staged 1"),
                (Urgency::Background, "reduce staged 2"),
            ]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn a_fifo_queue_keeps_arrival_order() {
        let mut queue = WorkQueue::with_order(QueueOrder::Fifo);
        queue.push(Urgency::Background, 1);
        queue.push(Urgency::Foreground, 2);
        queue.push(Urgency::Background, 3);
        assert_eq!(queue.waiting(Urgency::Foreground), 1);
        assert_eq!(queue.waiting(Urgency::Background), 2);
        assert_eq!(queue.pop(), Some((Urgency::Background, 1)));
        assert_eq!(queue.pop(), Some((Urgency::Foreground, 2)));
        assert_eq!(queue.waiting(Urgency::Background), 1);
        assert_eq!(queue.pop(), Some((Urgency::Background, 3)));
        assert_eq!(queue.pop(), None);
        assert_eq!(queue.order(), QueueOrder::Fifo);
    }
}
