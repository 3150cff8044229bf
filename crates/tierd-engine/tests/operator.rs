//! Operator pins (`tierd pin` / `tierd unpin`), the last plan's reason and
//! the mean move time across a journal replay (issue 11), on a volume
//! driven directly: memory devices, a manual clock whose `now_ns` is also
//! its Unix time, `tick` and `copy_step` called by the test, and a "crash"
//! that drops the volume without a final checkpoint.

use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::meta::MetaStore;
use tierd_engine::volume::{StepOutcome, TierSpec, Volume, VolumeOptions};
use tierd_policy::policies::otf_ast::OtfAstConfig;
use tierd_policy::PolicyConfig;

const SEGMENT: u64 = 1 << 20;
const PERIOD_NS: u64 = 1_000_000_000;
/// 2026-11-25T14:00:00Z: the manual clock's start, as Unix time.
const START_NS: u64 = 1_795_615_200 * 1_000_000_000;

struct Lab {
    fast: Arc<MemoryDevice>,
    home: Arc<MemoryDevice>,
    clock: Arc<ManualClock>,
    dir: tempfile::TempDir,
    policy: PolicyConfig,
    checkpoint_every_periods: u32,
}

impl Lab {
    /// 8 segments over a 2-slot fast tier. The fast tier is not volatile:
    /// the devices outlive a "crash", as files would.
    fn new(policy: PolicyConfig) -> Lab {
        Lab {
            fast: Arc::new(MemoryDevice::new("fast", 2 * SEGMENT)),
            home: Arc::new(MemoryDevice::new("home", 8 * SEGMENT)),
            clock: Arc::new(ManualClock::new(START_NS)),
            dir: tempfile::tempdir().unwrap(),
            policy,
            checkpoint_every_periods: 1,
        }
    }

    fn open(&self) -> Volume {
        let specs = vec![
            TierSpec {
                name: "fast".into(),
                device: self.fast.clone(),
                volatile: false,
                unsafe_volatile: false,
            },
            TierSpec {
                name: "home".into(),
                device: self.home.clone(),
                volatile: false,
                unsafe_volatile: false,
            },
        ];
        let options = VolumeOptions {
            name: "v".into(),
            size_bytes: 8 * SEGMENT,
            segment_bytes: SEGMENT,
            chunk_bytes: 256 << 10,
            period_ns: PERIOD_NS,
            checkpoint_every_periods: self.checkpoint_every_periods,
            policy: self.policy.clone(),
            migration: Default::default(),
        };
        let clock: Arc<dyn Clock> = self.clock.clone();
        Volume::open(options, specs, self.dir.path(), clock)
            .unwrap()
            .0
    }

    /// Runs queued moves to the end, `step_ns` of clock per copy step.
    fn run_moves(&self, volume: &Volume, step_ns: u64) {
        loop {
            self.clock.advance_ns(step_ns);
            match volume.copy_step() {
                StepOutcome::Idle => break,
                StepOutcome::Failed { segment } => panic!("move of segment {segment} failed"),
                _ => {}
            }
        }
    }

    /// Closes one period (and runs the policy).
    fn period(&self, volume: &Volume) {
        self.clock.advance_ns(PERIOD_NS);
        assert!(volume.tick().unwrap());
    }
}

/// OTF-AST with nothing but the band rules: with no IO at all home is below
/// `low`, so every fast-tier segment it may move is demoted.
fn demoting_policy() -> PolicyConfig {
    PolicyConfig::OtfAst(OtfAstConfig {
        promote_persistent: false,
        ..OtfAstConfig::default()
    })
}

/// Regression (issue 11): after a restart that replayed journaled moves, the
/// mean move time divided the checkpoint's total time by a count that
/// included the replayed moves, whose time was lost (here: 0 instead of
/// 32 ms).
#[test]
fn mean_move_time_counts_journal_replayed_moves() {
    let mut lab = Lab::new(PolicyConfig::None);
    lab.checkpoint_every_periods = 1000;
    {
        let volume = lab.open();
        volume.request_move(1, 0, "test").unwrap();
        volume.request_move(2, 0, "test").unwrap();
        // The first step starts the move and copies chunk 0; 3 more chunks,
        // then the finish: 4 steps of 8 ms = 32 ms per move.
        lab.run_moves(&volume, 8_000_000);
        let status = volume.status();
        assert_eq!(status.completed_moves, 2);
        assert_eq!(status.mean_move_ns, Some(32_000_000.0));
        // kill -9: both moves are only in the journal.
    }
    let volume = lab.open();
    let status = volume.status();
    assert_eq!(status.completed_moves, 2);
    assert_eq!(status.mean_move_ns, Some(32_000_000.0));
    // One more move of 64 ms after the restart (a demotion that copies:
    // after a restart home's copy counts as stale): (32 + 32 + 64) / 3.
    volume.request_move(1, 1, "test").unwrap();
    lab.run_moves(&volume, 16_000_000);
    assert_eq!(
        volume.status().mean_move_ns,
        Some(128_000_000.0 / 3.0),
        "{:?}",
        volume.status().recent_moves
    );
    // And through a checkpoint and another restart.
    volume.checkpoint().unwrap();
    drop(volume);
    let volume = lab.open();
    assert_eq!(volume.status().completed_moves, 3);
    let mean = volume.status().mean_move_ns.unwrap();
    assert!((mean - 128_000_000.0 / 3.0).abs() < 1.0, "{mean}");
}

#[test]
fn a_pinned_segment_moves_to_its_tier_and_no_policy_moves_it_away() {
    let lab = Lab::new(demoting_policy());
    let volume = lab.open();
    // Segment 2 pinned to the fast tier; segment 5 put there by a plain
    // operator move: the policy demotes 5 but never 2.
    assert!(volume.pin(2, 0, None).unwrap(), "a move is queued");
    volume.request_move(5, 0, "test").unwrap();
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement(), [1, 1, 0, 1, 1, 0, 1, 1]);
    let pins = volume.status().pins;
    assert_eq!(pins.len(), 1);
    assert_eq!((pins[0].segment, pins[0].tier.as_str()), (2, "fast"));
    assert!(pins[0].placed);
    assert_eq!(pins[0].until, None);
    for _ in 0..4 {
        lab.period(&volume);
        lab.run_moves(&volume, 1_000_000);
    }
    assert_eq!(volume.placement(), [1, 1, 0, 1, 1, 1, 1, 1]);
    let last_plan = volume.status().last_plan.unwrap();
    assert!(
        last_plan.summary.contains("1 pinned segments left alone"),
        "{last_plan:?}"
    );
    // An operator move of a pinned segment is refused too.
    let error = volume.request_move(2, 1, "test").unwrap_err().to_string();
    assert!(error.contains("pinned to tier fast"), "{error}");

    // kill -9 (the pin is in the checkpoints the periods wrote), restart.
    drop(volume);
    let volume = lab.open();
    assert_eq!(volume.pins().len(), 1);
    for _ in 0..3 {
        lab.period(&volume);
        lab.run_moves(&volume, 1_000_000);
    }
    assert_eq!(volume.placement()[2], 0);

    // Unpinned, the policy demotes it at its next period.
    assert_eq!(volume.unpin(2).unwrap().tier, 0);
    assert!(volume
        .unpin(2)
        .unwrap_err()
        .to_string()
        .contains("not pinned"));
    lab.period(&volume);
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement()[2], 1);
    assert!(volume.status().pins.is_empty());
}

#[test]
fn an_acknowledged_pin_survives_a_crash_before_its_move() {
    let mut lab = Lab::new(PolicyConfig::None);
    lab.checkpoint_every_periods = 1000;
    {
        let volume = lab.open();
        volume.pin(6, 0, Some(START_NS + 3600 * PERIOD_NS)).unwrap();
        // kill -9 before the copier starts the move: only the journal has it.
    }
    let volume = lab.open();
    let pins = volume.status().pins;
    assert_eq!(pins.len(), 1, "the journaled pin was lost");
    assert_eq!(pins[0].until.as_deref(), Some("2026-11-25T15:00:00Z"));
    assert!(!pins[0].placed);
    assert_eq!(volume.placement()[6], 1);
    // The next period queues its move again.
    lab.period(&volume);
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement()[6], 0);
    assert!(volume.status().pins[0].placed);
    let events = volume.take_events();
    assert!(
        events.iter().any(|event| event.contains("queued again")),
        "{events:?}"
    );
    // The journal holds the pin as a record of its own.
    let (_, recovered) = MetaStore::open(lab.dir.path()).unwrap();
    assert!(!recovered.checkpoint.unwrap().pins.is_empty());
}

#[test]
fn pins_are_refused_clearly() {
    let lab = Lab::new(PolicyConfig::None);
    let volume = lab.open();
    let refusal =
        |result: Result<bool, tierd_engine::volume::VolumeError>| result.unwrap_err().to_string();
    let text = refusal(volume.pin(8, 0, None));
    assert!(
        text.contains("segment 8 is beyond volume v's 8 segments"),
        "{text}"
    );
    let text = refusal(volume.pin(1, 2, None));
    assert!(text.contains("tier 2 does not exist"), "{text}");
    let text = refusal(volume.pin(1, 0, Some(START_NS - 1)));
    assert!(text.contains("has passed"), "{text}");
    // Two slots: the pins' moves are still queued, yet their slots are
    // promised, so a third pin is refused before any copy ran.
    volume.pin(0, 0, None).unwrap();
    volume.pin(1, 0, None).unwrap();
    let text = refusal(volume.pin(2, 0, None));
    assert!(
        text.contains("tier fast has no room to pin segment 2 of volume v: its 2 slots are taken or promised to 2 queued moves"),
        "{text}"
    );
    lab.run_moves(&volume, 1_000_000);
    let text = refusal(volume.pin(2, 0, None));
    assert!(
        text.ends_with("its 2 slots are taken; unpin or move a segment off it first"),
        "{text}"
    );
    // Re-pinning a segment where it is needs no room; pinning to home
    // (keeping a segment down) always has room.
    volume.pin(1, 0, Some(START_NS + PERIOD_NS * 10)).unwrap();
    assert!(volume.pin(2, 1, None).is_ok());
    assert!(volume.unpin(5).is_err());
    assert!(volume.unpin(9).is_err());
}

#[test]
fn pin_to_home_moves_a_segment_down_and_keeps_it_there() {
    let lab = Lab::new(PolicyConfig::None);
    let volume = lab.open();
    volume.request_move(3, 0, "test").unwrap();
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement()[3], 0);
    assert!(volume.pin(3, 1, None).unwrap());
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement()[3], 1);
    assert!(volume.request_move(3, 0, "test").is_err());
}

#[test]
fn an_expired_pin_is_dropped_at_the_next_period_and_logged() {
    let lab = Lab::new(demoting_policy());
    let volume = lab.open();
    volume
        .pin(4, 0, Some(START_NS + 5 * PERIOD_NS / 2))
        .unwrap();
    lab.run_moves(&volume, 1_000_000);
    lab.period(&volume);
    lab.period(&volume);
    assert_eq!(volume.pins().len(), 1, "not expired yet");
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement()[4], 0);
    // 3 s after the start: past its 2.5 s.
    lab.period(&volume);
    assert!(volume.pins().is_empty());
    let events = volume.take_events();
    assert!(
        events
            .iter()
            .any(|event| event
                .contains("pin of segment 4 to tier fast expired at 2026-11-25T14:00:02Z")),
        "{events:?}"
    );
    lab.run_moves(&volume, 1_000_000);
    lab.period(&volume);
    lab.run_moves(&volume, 1_000_000);
    assert_eq!(volume.placement()[4], 1, "the policy may move it again");
    // The end of the pin is durable: a crash does not bring it back.
    drop(volume);
    assert!(lab.open().pins().is_empty());
}

#[test]
fn the_last_plan_says_why_even_when_nothing_moved() {
    let lab = Lab::new(PolicyConfig::OtfAst(OtfAstConfig::default()));
    let volume = lab.open();
    assert!(volume.status().last_plan.is_none());
    lab.period(&volume);
    let first = volume.status().last_plan.unwrap();
    assert_eq!(first.moves, 0);
    assert_eq!(
        first.summary,
        "waiting for 2 periods of history (1 so far): no move"
    );
    assert_eq!(first.period_end_ns, START_NS + PERIOD_NS);
    lab.period(&volume);
    let second = volume.status().last_plan.unwrap();
    assert!(
        second
            .summary
            .starts_with("home util 0.0% (mean of 2 periods, 0.0 iops) < low 10.0%: no move"),
        "{second:?}"
    );
    // Kept in the checkpoint, so it outlives the process.
    drop(volume);
    assert_eq!(lab.open().status().last_plan, Some(second));
}
