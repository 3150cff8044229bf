//! Policy behaviour on hand-built views: OTF-AST (paper 000 §4.2, §5.4) and
//! ATSMF (paper 002 §4.2–4.3). Every expected number below is computed by
//! hand in the comment next to it.

use tierd_policy::policies::atsmf::{Atsmf, AtsmfConfig};
use tierd_policy::policies::otf_ast::{OtfAst, OtfAstConfig};
use tierd_policy::view::{MigrationStats, PeriodStats, SegmentStats, TierInfo, TierPeriodStats};
use tierd_policy::{
    build_policy, Move, MoveReason, Plan, Policy, PolicyConfig, SegmentId, TierId, View,
};

const GIB: u64 = 1 << 30;
const MINUTE_NS: u64 = 60_000_000_000;
const ATSMF_PERIOD_NS: u64 = 24_000_000_000;

/// A volume, its tiers and the completed periods, from which views are made.
struct Lab {
    period_ns: u64,
    placement: Vec<TierId>,
    capacities: Vec<u32>,
    history: Vec<PeriodStats>,
    in_flight: Vec<Move>,
    migration: MigrationStats,
    tier_infos: Vec<TierInfo>,
    /// Segments pinned by an operator, sorted.
    pinned: Vec<SegmentId>,
}

impl Lab {
    /// Every segment at home (the last tier); `capacities` per tier, fastest first.
    fn new(segments: u32, capacities: &[u32], period_ns: u64) -> Self {
        let home = (capacities.len() - 1) as TierId;
        Self {
            period_ns,
            placement: vec![home; segments as usize],
            capacities: capacities.to_vec(),
            history: Vec::new(),
            in_flight: Vec::new(),
            migration: MigrationStats::default(),
            tier_infos: Vec::new(),
            pinned: Vec::new(),
        }
    }

    fn place(&mut self, segment: SegmentId, tier: TierId) {
        self.placement[segment as usize] = tier;
    }

    /// Appends a completed period: `segment_ios` = (segment, reads), `tiers`
    /// one entry per tier. Keeps the last 64 periods like the monitor.
    fn push(&mut self, segment_ios: &[(SegmentId, u32)], tiers: Vec<TierPeriodStats>) {
        let index = self.history.last().map_or(0, |period| period.index + 1);
        let mut segments: Vec<SegmentStats> = segment_ios
            .iter()
            .map(|&(segment, reads)| SegmentStats {
                segment,
                reads,
                read_bytes: u64::from(reads) * 4096,
                ..SegmentStats::default()
            })
            .collect();
        segments.sort_by_key(|stats| stats.segment);
        assert_eq!(tiers.len(), self.capacities.len());
        self.history.push(PeriodStats {
            index,
            start_ns: index * self.period_ns,
            end_ns: (index + 1) * self.period_ns,
            segments,
            tiers,
        });
        if self.history.len() > 64 {
            self.history.remove(0);
        }
    }

    /// Executes a plan at once (no migration time), as a caller would.
    fn apply(&mut self, plan: &Plan) {
        for step in &plan.moves {
            assert_eq!(self.placement[step.segment as usize], step.from, "{step:?}");
            self.placement[step.segment as usize] = step.to;
        }
    }

    fn view(&mut self) -> View<'_> {
        self.tier_infos = self
            .capacities
            .iter()
            .enumerate()
            .map(|(tier, &capacity_segments)| TierInfo {
                name: format!("tier{tier}"),
                capacity_segments,
                used_segments: self
                    .placement
                    .iter()
                    .filter(|placed| **placed as usize == tier)
                    .count() as u32,
            })
            .collect();
        View {
            now_ns: self.history.last().map_or(0, |period| period.end_ns),
            period_ns: self.period_ns,
            segment_bytes: GIB,
            segments: self.placement.len() as u32,
            history: &self.history,
            placement: &self.placement,
            in_flight: &self.in_flight,
            tiers: &self.tier_infos,
            migration: self.migration,
            pinned: &self.pinned,
        }
    }

    fn plan(&mut self, policy: &mut dyn Policy) -> Plan {
        let view = self.view();
        policy.plan(&view)
    }
}

/// A device's period: `iops` user IOs per second at `util` busy fraction,
/// each answered in `response_us` on average.
fn device(period_ns: u64, iops: f64, util: f64, response_us: f64) -> TierPeriodStats {
    let ios = (iops * period_ns as f64 / 1e9).round() as u64;
    TierPeriodStats {
        ios,
        bytes: ios * 4096,
        busy_ns: (util * period_ns as f64) as u64,
        response_ns_total: (ios as f64 * response_us * 1e3) as u64,
        ..TierPeriodStats::default()
    }
}

fn idle() -> TierPeriodStats {
    TierPeriodStats::default()
}

/// (segment, IO count in a 60 s period) for a mean of `iops`.
fn per_minute(segment: SegmentId, iops: f64) -> (SegmentId, u32) {
    (segment, (iops * 60.0).round() as u32)
}

fn moves(plan: &Plan) -> Vec<(SegmentId, TierId, TierId, &str)> {
    plan.moves
        .iter()
        .map(|step| (step.segment, step.from, step.to, step.reason.rule.as_str()))
        .collect()
}

fn no_persistence() -> OtfAstConfig {
    OtfAstConfig {
        promote_persistent: false,
        max_promotions_per_period_above_up: 0,
        ..OtfAstConfig::default()
    }
}

// ---------------------------------------------------------------- OTF-AST

/// Home at 90 % util and 100 iops (0.9 %util per iops). Hot segments
/// 0: 20 iops, 1: 15, 2: 10, 3: 10, and 9 segments of 5 iops.
fn overloaded_home(lab: &mut Lab, periods: usize) {
    let mut segments = vec![
        per_minute(0, 20.0),
        per_minute(1, 15.0),
        per_minute(2, 10.0),
        per_minute(3, 10.0),
    ];
    segments.extend((10..19).map(|segment| per_minute(segment, 5.0)));
    for _ in 0..periods {
        lab.push(
            &segments,
            vec![
                device(MINUTE_NS, 0.0, 0.0, 0.0),
                device(MINUTE_NS, 100.0, 0.9, 5_000.0),
            ],
        );
    }
}

#[test]
fn otf_ast_promotes_the_hottest_until_util_falls_below_mid() {
    let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
    overloaded_home(&mut lab, 2);
    let mut policy = OtfAst::new(no_persistence());
    let plan = lab.plan(&mut policy);
    // 90 − 20×0.9 = 72 − 15×0.9 = 58.5 − 10×0.9 = 49.5 < 50: segments 0, 1, 2.
    assert_eq!(
        moves(&plan),
        [
            (0, 1, 0, "otf-ast:util-above-up"),
            (1, 1, 0, "otf-ast:util-above-up"),
            (2, 1, 0, "otf-ast:util-above-up"),
        ]
    );
    let detail = &plan.moves[2].reason.detail;
    for figure in [
        "90.0%",
        "0.9000 %util/iops",
        "iops 10.00",
        "sum 40.50%",
        "util after 49.5%",
        "mid 50.0%",
    ] {
        assert!(detail.contains(figure), "{figure} missing from {detail}");
    }
}

#[test]
fn otf_ast_waits_for_n_periods_and_paces_one_promotion_per_period() {
    let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
    overloaded_home(&mut lab, 1);
    let mut policy = OtfAst::new(OtfAstConfig::default());
    assert!(
        lab.plan(&mut policy).moves.is_empty(),
        "n = 2 periods needed"
    );
    overloaded_home(&mut lab, 1);
    // Default: one promotion per period while above up (paper: 60 s apart).
    assert_eq!(
        moves(&lab.plan(&mut policy)),
        [(0, 1, 0, "otf-ast:util-above-up")]
    );
}

#[test]
fn otf_ast_counts_moves_in_flight_as_done() {
    let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
    overloaded_home(&mut lab, 2);
    lab.place(0, 0);
    lab.in_flight.push(Move {
        segment: 0,
        from: 1,
        to: 0,
        reason: MoveReason {
            rule: "test".to_string(),
            detail: String::new(),
        },
    });
    // 90 − 18 (segment 0 in flight) = 72 → 1 (58.5) → 2 (49.5).
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(moves(&plan).iter().map(|m| m.0).collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn otf_ast_does_nothing_inside_the_band() {
    for util in [0.10, 0.5, 0.70] {
        let mut lab = Lab::new(8, &[4, 8], MINUTE_NS);
        lab.place(5, 0);
        for _ in 0..2 {
            lab.push(
                &[per_minute(0, 30.0), per_minute(5, 0.5)],
                vec![idle(), device(MINUTE_NS, 30.0, util, 5_000.0)],
            );
        }
        let plan = lab.plan(&mut OtfAst::new(no_persistence()));
        assert!(plan.moves.is_empty(), "util {util}: {plan:?}");
        // The empty plan still says why (issue 11: status shows it).
        let percent = format!("home util {:.1}% (mean of 2 periods", util * 100.0);
        assert!(plan.summary.starts_with(&percent), "{}", plan.summary);
        assert!(
            plan.summary.ends_with("inside 10.0-70.0%: no move"),
            "{}",
            plan.summary
        );
    }
}

#[test]
fn every_policy_says_why_even_when_it_moves_nothing() {
    let mut lab = Lab::new(8, &[4, 8], MINUTE_NS);
    let none = lab.plan(build_policy(&PolicyConfig::None).as_mut());
    assert!(none.moves.is_empty());
    assert!(none.summary.contains("policy none"), "{}", none.summary);
    let waiting = lab.plan(&mut OtfAst::new(OtfAstConfig::default()));
    assert_eq!(
        waiting.summary,
        "waiting for 2 periods of history (0 so far): no move"
    );
    let mut atsmf_lab = atsmf_lab();
    atsmf_lab.push(&[], ssd_period(0));
    let quiet = atsmf_lab.plan(&mut Atsmf::new(AtsmfConfig::default()));
    assert!(quiet.moves.is_empty());
    assert_eq!(quiet.summary, "0 live concentrations: no move");
    // And a plan with moves counts them.
    let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
    overloaded_home(&mut lab, 2);
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert!(
        plan.summary
            .contains("> up 70.0%: 3 promotions, 0 demotions"),
        "{}",
        plan.summary
    );
}

#[test]
fn otf_ast_leaves_pinned_segments_alone() {
    // As in the first test, but segment 0 (the hottest) is pinned home:
    // 90 − 13.5 (1) − 9 (2) − 9 (3) − 4.5 (10) − 4.5 (11) = 49.5 < 50.
    let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
    overloaded_home(&mut lab, 2);
    lab.pinned = vec![0];
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(
        moves(&plan).iter().map(|m| m.0).collect::<Vec<_>>(),
        [1, 2, 3, 10, 11]
    );
    assert!(
        plan.summary.ends_with("; 1 pinned segments left alone"),
        "{}",
        plan.summary
    );
    // Pinned on the fast tier: never demoted (0 and 3 pinned; ascending
    // 1 (+1 → 6), 2 (+50 → 56 > mid), stop).
    let mut lab = idle_home(100.0);
    lab.pinned = vec![0, 3];
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(
        moves(&plan),
        [
            (1, 0, 1, "otf-ast:util-below-low"),
            (2, 0, 1, "otf-ast:util-below-low"),
        ]
    );
}

/// Home at 5 % and 10 iops (0.5 %util per iops); fast tier holds segments
/// 0 (idle), 1 (2 iops), 3 (5 iops), 2 (`third_iops`) and 4 (200 iops).
fn idle_home(third_iops: f64) -> Lab {
    let mut lab = Lab::new(16, &[8, 16], MINUTE_NS);
    for segment in 0..5 {
        lab.place(segment, 0);
    }
    for _ in 0..2 {
        lab.push(
            &[
                per_minute(1, 2.0),
                per_minute(2, third_iops),
                per_minute(3, 5.0),
                per_minute(4, 200.0),
                per_minute(9, 10.0),
            ],
            vec![
                device(MINUTE_NS, 300.0, 0.3, 50.0),
                device(MINUTE_NS, 10.0, 0.05, 5_000.0),
            ],
        );
    }
    lab
}

#[test]
fn otf_ast_demotes_the_coldest_until_util_would_pass_mid() {
    // Ascending: 0 (+0 → 5), 1 (+1 → 6), 3 (+2.5 → 8.5), 2 (+50 → 58.5 > mid: the
    // paper includes the one that crosses mid), then stop; 4 stays.
    let mut lab = idle_home(100.0);
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(
        moves(&plan),
        [
            (0, 0, 1, "otf-ast:util-below-low"),
            (1, 0, 1, "otf-ast:util-below-low"),
            (3, 0, 1, "otf-ast:util-below-low"),
            (2, 0, 1, "otf-ast:util-below-low"),
        ]
    );
    let detail = &plan.moves[3].reason.detail;
    assert!(detail.contains("5.0% (mean of 2 periods"), "{detail}");
    assert!(detail.contains("< low 10.0%"), "{detail}");
    assert!(detail.contains("util after 58.5%"), "{detail}");
}

#[test]
fn otf_ast_judges_home_load_by_user_io_not_by_migration_copies() {
    // Home busy the whole window, but users had IO outstanding only 5 % of
    // it (a segment copy kept the disk busy): not an overload, no promotion
    // (the copies would otherwise cause more copies).
    let copying = |user_busy_fraction: f64| {
        let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
        for _ in 0..2 {
            let mut home = device(MINUTE_NS, 10.0, 1.0, 5_000.0);
            home.user_busy_ns = (user_busy_fraction * MINUTE_NS as f64) as u64;
            home.migration_ios = 6_000;
            lab.push(
                &[per_minute(0, 6.0), per_minute(1, 4.0)],
                vec![idle(), home],
            );
        }
        lab
    };
    let plan = copying(0.05).plan(&mut OtfAst::new(no_persistence()));
    assert!(plan.moves.is_empty(), "{plan:?}");
    // Users waiting on it 90 % of the time: an overload, whatever copies ran.
    // 0.9 %util per iops × 6 iops = 5.4 % per step: promotes the hottest.
    let plan = copying(0.9).plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(moves(&plan)[0], (0, 1, 0, "otf-ast:util-above-up"));
    assert!(plan.moves[0].reason.detail.contains("home util 90.0%"));
}

#[test]
fn otf_ast_low_rule_spares_segments_the_persistent_rule_would_bring_back() {
    // Home idle (5 %); on the fast tier segment 0 had IO 3 periods ago,
    // segment 1 none for 10 periods, segment 2 IO every other period.
    let mut lab = Lab::new(16, &[8, 16], MINUTE_NS);
    for segment in 0..3 {
        lab.place(segment, 0);
    }
    for period in 0..10u64 {
        let mut segments = vec![per_minute(9, 10.0)];
        if period == 6 {
            segments.push(per_minute(0, 1.0));
        }
        if period % 2 == 0 {
            segments.push(per_minute(2, 1.0));
        }
        lab.push(
            &segments,
            vec![
                device(MINUTE_NS, 1.0, 0.01, 50.0),
                device(MINUTE_NS, 10.0, 0.05, 5_000.0),
            ],
        );
    }
    // (Segment 9, at home with IO in every period, is promoted by §5.4.)
    let plan = lab.plan(&mut OtfAst::new(OtfAstConfig::default()));
    assert_eq!(
        moves(&plan),
        [
            (1, 0, 1, "otf-ast:util-below-low"),
            (9, 1, 0, "otf-ast:persistent-io")
        ]
    );
    // The paper's rule alone (no hysteresis) demotes all three.
    let config = OtfAstConfig {
        demote_idle_periods: 0,
        ..OtfAstConfig::default()
    };
    let plan = lab.plan(&mut OtfAst::new(config));
    let demoted: Vec<SegmentId> = plan
        .moves
        .iter()
        .filter(|step| step.to == 1)
        .map(|step| step.segment)
        .collect();
    assert_eq!(demoted, [0, 1, 2]);
}

#[test]
fn otf_ast_never_demotes_into_an_overload() {
    // Segment 2 at 150 iops would add 75 % → 83.5 % > up: not demoted.
    let mut lab = idle_home(150.0);
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(
        moves(&plan).iter().map(|m| m.0).collect::<Vec<_>>(),
        [0, 1, 3]
    );
}

#[test]
fn otf_ast_honours_fast_tier_capacity() {
    // Fast tier: 2 slots, one taken by segment 20 (idle). Without swaps only
    // segment 0 fits.
    let mut lab = Lab::new(32, &[2, 32], MINUTE_NS);
    lab.place(20, 0);
    overloaded_home(&mut lab, 2);
    let config = OtfAstConfig {
        swap_when_full: false,
        ..no_persistence()
    };
    assert_eq!(
        moves(&lab.plan(&mut OtfAst::new(config))),
        [(0, 1, 0, "otf-ast:util-above-up")]
    );
    // With swaps (default): segment 20 (0 iops) makes room for segment 1.
    let plan = lab.plan(&mut OtfAst::new(no_persistence()));
    assert_eq!(
        moves(&plan),
        [
            (0, 1, 0, "otf-ast:util-above-up"),
            (20, 0, 1, "otf-ast:swap-out"),
            (1, 1, 0, "otf-ast:util-above-up"),
        ]
    );
    // A fast segment at 8 iops is not cold enough for a 15-iops candidate
    // (8 × 2 > 15): no swap.
    let mut lab = Lab::new(32, &[2, 32], MINUTE_NS);
    lab.place(20, 0);
    let mut segments = vec![
        per_minute(0, 20.0),
        per_minute(1, 15.0),
        per_minute(20, 8.0),
    ];
    segments.extend((10..19).map(|segment| per_minute(segment, 5.0)));
    for _ in 0..2 {
        lab.push(
            &segments,
            vec![
                device(MINUTE_NS, 8.0, 0.01, 50.0),
                device(MINUTE_NS, 100.0, 0.9, 5_000.0),
            ],
        );
    }
    assert_eq!(
        moves(&lab.plan(&mut OtfAst::new(no_persistence()))),
        [(0, 1, 0, "otf-ast:util-above-up")]
    );
}

fn persistent_lab(periods_with_io: u64) -> Lab {
    // Segment 3 has IO in the last `periods_with_io` periods of 10; segment
    // 6 in all but one; home in the band (40 %).
    let mut lab = Lab::new(8, &[4, 8], MINUTE_NS);
    for index in 0..10u64 {
        let mut segments = vec![per_minute(0, 1.0)];
        if index >= 10 - periods_with_io {
            segments.push((3, 1));
        }
        if index != 6 {
            segments.push((6, 5));
        }
        lab.push(
            &segments,
            vec![idle(), device(MINUTE_NS, 20.0, 0.4, 5_000.0)],
        );
    }
    lab
}

#[test]
fn otf_ast_persistent_rule_fires_at_m_consecutive_periods_and_not_before() {
    let mut policy = OtfAst::new(OtfAstConfig::default());
    let mut lab = persistent_lab(8);
    let plan = lab.plan(&mut policy);
    // Segment 0 (IO in all 10) and 3 (the last 8); 6 missed period 6.
    assert_eq!(
        moves(&plan),
        [
            (0, 1, 0, "otf-ast:persistent-io"),
            (3, 1, 0, "otf-ast:persistent-io")
        ]
    );
    let detail = &plan.moves[1].reason.detail;
    assert!(detail.contains("m = 8 periods (2..=9)"), "{detail}");
    assert!(detail.contains("40.0%"), "{detail}");
    let mut lab = persistent_lab(7);
    assert_eq!(
        moves(&lab.plan(&mut policy)),
        [(0, 1, 0, "otf-ast:persistent-io")]
    );
    // Off: nothing in the band.
    let mut lab = persistent_lab(8);
    let off = OtfAstConfig {
        promote_persistent: false,
        ..OtfAstConfig::default()
    };
    assert!(lab.plan(&mut OtfAst::new(off)).moves.is_empty());
}

#[test]
fn otf_ast_works_between_home_and_the_tier_above_it() {
    // Three tiers: memory (0), SSD (1), HDD home (2). Promotions go to 1.
    let mut lab = Lab::new(32, &[4, 10, 32], MINUTE_NS);
    let mut segments = vec![per_minute(0, 20.0), per_minute(1, 15.0)];
    segments.extend((10..19).map(|segment| per_minute(segment, 5.0)));
    for _ in 0..2 {
        lab.push(
            &segments,
            vec![idle(), idle(), device(MINUTE_NS, 80.0, 0.9, 5_000.0)],
        );
    }
    let plan = lab.plan(&mut OtfAst::new(OtfAstConfig::default()));
    assert_eq!(moves(&plan), [(0, 2, 1, "otf-ast:util-above-up")]);
    // One tier: nothing to do, no panic.
    let mut single = Lab::new(4, &[4], MINUTE_NS);
    single.push(&[(0, 10)], vec![device(MINUTE_NS, 1.0, 1.0, 1.0)]);
    single.push(&[(0, 10)], vec![device(MINUTE_NS, 1.0, 1.0, 1.0)]);
    assert!(single
        .plan(&mut OtfAst::new(OtfAstConfig::default()))
        .moves
        .is_empty());
}

#[test]
fn otf_ast_remembers_util_per_iops_across_save_and_restore() {
    // Learn 0.9 %/iops while overloaded, then home goes silent (util 2 %,
    // no IO): demotion uses the remembered figure after a restore.
    let mut lab = Lab::new(32, &[10, 32], MINUTE_NS);
    overloaded_home(&mut lab, 2);
    let mut policy = OtfAst::new(no_persistence());
    lab.plan(&mut policy);
    let saved = serde_json::to_string(&policy.save_state()).unwrap();
    let mut restored = OtfAst::new(no_persistence());
    restored
        .restore_state(&serde_json::from_str(&saved).unwrap())
        .unwrap();
    let mut quiet = Lab::new(32, &[10, 32], MINUTE_NS);
    quiet.place(0, 0);
    quiet.place(1, 0);
    for _ in 0..2 {
        quiet.push(
            &[per_minute(0, 10.0), per_minute(1, 60.0)],
            vec![
                device(MINUTE_NS, 70.0, 0.02, 50.0),
                TierPeriodStats {
                    busy_ns: MINUTE_NS / 50,
                    ..idle()
                },
            ],
        );
    }
    // 2 + 10×0.9 = 11 → segment 0; + 60×0.9 = 65 ≤ up → segment 1 too (crosses mid).
    let expected = [
        (0, 0, 1, "otf-ast:util-below-low"),
        (1, 0, 1, "otf-ast:util-below-low"),
    ];
    assert_eq!(moves(&quiet.plan(&mut restored)), expected);
    assert_eq!(moves(&quiet.plan(&mut policy)), expected);
    // A fresh policy knows no %util per iops: only idle segments could go.
    assert!(quiet
        .plan(&mut OtfAst::new(no_persistence()))
        .moves
        .is_empty());
}

// ---------------------------------------------------------------- ATSMF

/// SSD (home) at 60 µs mean response; memory idle.
fn ssd_period(ios: u64) -> Vec<TierPeriodStats> {
    vec![
        idle(),
        TierPeriodStats {
            ios,
            response_ns_total: ios * 60_000,
            busy_ns: ATSMF_PERIOD_NS / 2,
            ..TierPeriodStats::default()
        },
    ]
}

/// A period whose concentration is `hot` (1000 IO each) over light
/// background IO on segments 100..150 (1 IO each).
fn concentration_period(lab: &mut Lab, hot: &[SegmentId]) {
    let mut segments: Vec<(SegmentId, u32)> = hot.iter().map(|&segment| (segment, 1000)).collect();
    segments.extend((100..150).map(|segment| (segment, 1)));
    let ios = 1000 * hot.len() as u64 + 50;
    lab.push(&segments, ssd_period(ios));
}

fn atsmf_lab() -> Lab {
    Lab::new(200, &[64, 200], ATSMF_PERIOD_NS)
}

#[test]
fn atsmf_detects_a_static_concentration_and_promotes_it_when_y_beats_x() {
    let mut lab = atsmf_lab();
    concentration_period(&mut lab, &[10, 11]);
    let mut policy = Atsmf::new(AtsmfConfig::default());
    let plan = lab.plan(&mut policy);
    let alive = policy.concentrations();
    assert_eq!(alive.len(), 1);
    assert_eq!(alive[0].current().first_segment, 10);
    assert_eq!(alive[0].current().last_segment, 11);
    // A = 1, prior rest 0.6 periods = 14.4 s; AveMgTime prior 2^30/1e9 = 1.0737 s;
    // Xduration = 2.147 s, Yduration = 12.253 s; X = (120 − 60) × 2.147 = 128.8;
    // Y = (60 − 10) × 12.253 = 612.6 µs·s: Y > X.
    assert_eq!(
        moves(&plan),
        [(10, 1, 0, "atsmf:benefit"), (11, 1, 0, "atsmf:benefit")]
    );
    let detail = &plan.moves[0].reason.detail;
    for figure in [
        "A = 1",
        "rest 0.60 periods = 14.4 s (prior",
        "subLUNs 2",
        "Xduration 2.15 s",
        "Yduration 12.25 s",
        "X 128.8 µs·s < Y 612.6 µs·s",
        "Avef 60.0 µs (measured)",
        "AvefWithMg 120.0 µs (prior)",
        "Avem 10.0 µs (prior)",
    ] {
        assert!(detail.contains(figure), "{figure} missing from {detail}");
    }
    // Applied and still hot next period: nothing more to do.
    lab.apply(&plan);
    concentration_period(&mut lab, &[10, 11]);
    assert!(lab.plan(&mut policy).moves.is_empty());
}

/// The minimum load: the same concentration shape at a trickle of IO (one
/// IO per segment in a 24 s period, 0.083 iops for the pair) is not moved;
/// with `min_load_iops = 0` (the paper's test) it is, since X and Y do not
/// weigh the rate.
#[test]
fn atsmf_does_not_move_a_concentration_below_the_minimum_load() {
    let trickle = |lab: &mut Lab| {
        lab.push(&[(10, 1), (11, 1)], ssd_period(2));
    };
    let mut lab = atsmf_lab();
    trickle(&mut lab);
    let mut policy = Atsmf::new(AtsmfConfig::default());
    let plan = lab.plan(&mut policy);
    assert_eq!(policy.concentrations().len(), 1);
    assert!(plan.moves.is_empty(), "{:?}", moves(&plan));
    assert!(
        plan.summary
            .contains("1 concentrations below the minimum load of 0.1 iops"),
        "{}",
        plan.summary
    );
    let mut lab = atsmf_lab();
    trickle(&mut lab);
    let paper = AtsmfConfig {
        min_load_iops: 0.0,
        ..AtsmfConfig::default()
    };
    assert_eq!(
        moves(&lab.plan(&mut Atsmf::new(paper))),
        [(10, 1, 0, "atsmf:benefit"), (11, 1, 0, "atsmf:benefit")]
    );
    assert!(AtsmfConfig {
        min_load_iops: -1.0,
        ..AtsmfConfig::default()
    }
    .validate()
    .unwrap_err()
    .contains("min_load_iops = -1"));
}

#[test]
fn atsmf_leaves_pinned_segments_alone() {
    let mut lab = atsmf_lab();
    lab.pinned = vec![11];
    concentration_period(&mut lab, &[10, 11]);
    let mut policy = Atsmf::new(grace(3));
    let plan = lab.plan(&mut policy);
    assert_eq!(moves(&plan), [(10, 1, 0, "atsmf:benefit")]);
    assert!(
        plan.summary
            .starts_with("1 live concentrations: 1 promotions, 0 demotions"),
        "{}",
        plan.summary
    );
    assert!(plan.summary.ends_with("1 pinned segments left alone"));
    // On the fast tier and long unclaimed: segment 10 is demoted, 11 stays.
    lab.apply(&plan);
    lab.place(11, 0);
    for _ in 0..6 {
        lab.push(&[(60, 40)], ssd_period(40));
        let plan = lab.plan(&mut policy);
        assert!(plan.moves.iter().all(|step| step.segment != 11), "{plan:?}");
        lab.apply(&plan);
    }
    assert_eq!(lab.placement[10], 1);
    assert_eq!(lab.placement[11], 0);
}

#[test]
fn atsmf_holds_when_the_move_costs_more_than_it_saves() {
    // 14 adjacent hot segments at A = 1: Xduration = 14 × 1.0737 = 15.03 s >
    // rest 14.4 s, so Y < 0 < X.
    let hot: Vec<SegmentId> = (20..34).collect();
    let mut lab = atsmf_lab();
    concentration_period(&mut lab, &hot);
    let mut policy = Atsmf::new(AtsmfConfig::default());
    assert!(lab.plan(&mut policy).moves.is_empty());
    // Re-judged next period: A = 2, rest 1.2 periods = 28.8 s, Yduration
    // 13.77 s: Y = 50 × 13.77 = 688 < X = 60 × 15.03 = 902: still held.
    concentration_period(&mut lab, &hot);
    assert!(lab.plan(&mut policy).moves.is_empty());
    // A = 3: rest 43.2 s, Ydur 28.2 s: Y = 1408 > X = 902 → moved, all 14.
    concentration_period(&mut lab, &hot);
    let plan = lab.plan(&mut policy);
    assert_eq!(plan.moves.len(), 14);
    assert!(plan.moves[0].reason.detail.contains("A = 3"));
}

/// Runs concentrations of the given durations (periods) one after another,
/// each at its own segment, each ended by a period without IO; plans are
/// applied as a caller would.
fn learn_durations(lab: &mut Lab, policy: &mut dyn Policy, durations: &[u64]) {
    for (index, &duration) in durations.iter().enumerate() {
        let segment = 10 + 3 * index as SegmentId;
        for _ in 0..duration {
            concentration_period(lab, &[segment]);
            let plan = lab.plan(policy);
            lab.apply(&plan);
        }
        lab.push(&[], ssd_period(0));
        let plan = lab.plan(policy);
        lab.apply(&plan);
    }
}

#[test]
fn atsmf_learns_the_prediction_table_from_observed_durations() {
    let config = AtsmfConfig {
        prediction_min_samples: 1,
        ..AtsmfConfig::default()
    };
    let mut policy = Atsmf::new(config);
    let mut lab = atsmf_lab();
    learn_durations(&mut lab, &mut policy, &[1, 1, 2, 3, 5]);
    // A concentration still alive is not a sample.
    concentration_period(&mut lab, &[90]);
    lab.plan(&mut policy);
    assert_eq!(policy.learned_durations(), 5);
    // Like 002 Table 2: A → B = mean of durations ≥ A → rest B − A.
    // A=1: 12/5 = 2.4 → 1.4 (33.6 s); A=2: 10/3 → 1.333 (32 s);
    // A=3: 8/2 = 4 → 1; A=4: 5 → 1; A=5: 5 → 0.
    let expected = [
        (1, 5, 2.4),
        (2, 3, 10.0 / 3.0),
        (3, 2, 4.0),
        (4, 1, 5.0),
        (5, 1, 5.0),
    ];
    for (lasted, samples, mean_total) in expected {
        let row = policy.prediction_row(lasted);
        assert!(row.learned);
        assert_eq!(row.samples, samples);
        assert!(
            (row.mean_total_periods - mean_total).abs() < 1e-12,
            "{row:?}"
        );
        assert!((row.rest_periods - (mean_total - lasted as f64)).abs() < 1e-12);
    }
    assert!((policy.prediction_row(1).rest_periods * 24.0 - 33.6).abs() < 1e-9);
    // Beyond the longest: the prior (0.6 × 6).
    let beyond = policy.prediction_row(6);
    assert!(!beyond.learned);
    assert!((beyond.rest_periods - 3.6).abs() < 1e-12);
}

#[test]
fn atsmf_does_not_move_a_concentration_predicted_to_end_now() {
    // Five concentrations that each lasted one period: rest(A = 1) = 1 − 1 = 0.
    let mut policy = Atsmf::new(AtsmfConfig::default());
    let mut lab = atsmf_lab();
    learn_durations(&mut lab, &mut policy, &[1, 1, 1, 1, 1]);
    assert_eq!(policy.prediction_row(1).rest_periods, 0.0);
    concentration_period(&mut lab, &[70]);
    let plan = lab.plan(&mut policy);
    assert!(plan.moves.iter().all(|step| step.segment != 70), "{plan:?}");
    // It lasts: A = 2 has no sample, so the prior (1.2 periods) moves it.
    concentration_period(&mut lab, &[70]);
    let plan = lab.plan(&mut policy);
    let promoted: Vec<_> = moves(&plan)
        .into_iter()
        .filter(|step| step.3 != "atsmf:ended")
        .collect();
    assert_eq!(promoted, [(70, 1, 0, "atsmf:benefit")]);
}

/// Defaults with a demotion grace of `periods`.
fn grace(periods: u32) -> AtsmfConfig {
    AtsmfConfig {
        demotion_grace_periods: periods,
        ..AtsmfConfig::default()
    }
}

#[test]
fn atsmf_prefetches_ahead_of_a_moving_concentration() {
    let mut policy = Atsmf::new(grace(5));
    let mut lab = atsmf_lab();
    concentration_period(&mut lab, &[10]);
    let plan = lab.plan(&mut policy);
    assert_eq!(moves(&plan), [(10, 1, 0, "atsmf:benefit")]);
    lab.apply(&plan);
    // Walks to 11, off its first range: speed 1 segment/period over its
    // life, rest 0.6 × 2 = 1.2 periods → it reaches floor(1.2) = 1 segment
    // ahead (12). 10, left behind, stays for the grace (5 periods).
    concentration_period(&mut lab, &[11]);
    let plan = lab.plan(&mut policy);
    assert_eq!(
        moves(&plan),
        [(11, 1, 0, "atsmf:benefit"), (12, 1, 0, "atsmf:prefetch")]
    );
    assert!(plan.moves[1]
        .reason
        .detail
        .contains("moves +1.00 segments/period; rest 1.20 periods → 1 segments ahead"));
    lab.apply(&plan);
    // At 12 (already in memory), period 2: rest 1.8 → 13 prefetched.
    concentration_period(&mut lab, &[12]);
    let plan = lab.plan(&mut policy);
    assert_eq!(moves(&plan), [(13, 1, 0, "atsmf:prefetch")]);
    lab.apply(&plan);
    // Periods 3, 4 at 13, 14: A = 4, 5 → rest 2.4, 3.0 → 2 and 3 ahead.
    for (at, expected) in [(13, vec![14, 15]), (14, vec![16, 17])] {
        concentration_period(&mut lab, &[at]);
        let plan = lab.plan(&mut policy);
        let prefetched: Vec<_> = plan.moves.iter().map(|step| step.segment).collect();
        assert_eq!(prefetched, expected, "{plan:?}");
        lab.apply(&plan);
    }
    // Period 5: 10 was last covered in period 0 — the grace is over.
    concentration_period(&mut lab, &[15]);
    let plan = lab.plan(&mut policy);
    assert_eq!(moves(&plan)[0], (10, 0, 1, "atsmf:ended"));
    assert!(plan.moves[0]
        .reason
        .detail
        .contains("has covered segment 10 since period 0 (grace 5 periods)"));
    assert!(plan.moves.iter().all(|step| step.segment != 11));
}

#[test]
fn atsmf_does_not_prefetch_for_a_concentration_whose_edges_jitter() {
    // 002 §3.4 type (a): the same sub-LUNs, its range widening and
    // shrinking by one segment. Never off its first range: no prefetch,
    // and its edge segments are not moved back and forth.
    let mut policy = Atsmf::new(AtsmfConfig::default());
    let mut lab = atsmf_lab();
    let mut moved = Vec::new();
    for step in 0..30 {
        let hot: &[SegmentId] = match step % 3 {
            0 => &[40],
            1 => &[40, 41],
            _ => &[39, 40],
        };
        concentration_period(&mut lab, hot);
        let plan = lab.plan(&mut policy);
        moved.extend(
            plan.moves
                .iter()
                .map(|step| (step.segment, step.from, step.to, step.reason.rule.clone())),
        );
        lab.apply(&plan);
    }
    moved.sort();
    let benefit = "atsmf:benefit".to_string();
    assert_eq!(
        moved,
        [
            (39, 1, 0, benefit.clone()),
            (40, 1, 0, benefit.clone()),
            (41, 1, 0, benefit)
        ]
    );
}

#[test]
fn atsmf_demotes_after_the_end_and_holds_while_migration_response_is_high() {
    let mut policy = Atsmf::new(grace(5));
    let mut lab = atsmf_lab();
    concentration_period(&mut lab, &[10, 11]);
    let plan = lab.plan(&mut policy);
    lab.apply(&plan);
    // The concentration moves to 60-61 (a new one, promoted too); 10-11
    // stay in memory for the grace: periods 1-4.
    for _ in 1..5 {
        lab.push(&[(60, 40), (61, 10)], ssd_period(50));
        let plan = lab.plan(&mut policy);
        assert!(
            plan.moves
                .iter()
                .all(|step| step.reason.rule != "atsmf:ended"),
            "{plan:?}"
        );
        lab.apply(&plan);
    }
    assert_eq!(lab.placement[10], 0);
    // Period 5, the grace is over, but the SSD answered its IO during a
    // migration in 500 µs > 2 × 60 µs: hold.
    let mut tiers = ssd_period(50);
    tiers[1].ios_during_migration = 10;
    tiers[1].response_ns_total_during_migration = 10 * 500_000;
    tiers[1].ios += 10;
    tiers[1].response_ns_total += 10 * 500_000;
    lab.push(&[(60, 40), (61, 10)], tiers);
    let plan = lab.plan(&mut policy);
    assert!(plan.moves.is_empty(), "{plan:?}");
    // Migration response back at 100 µs ≤ 120 µs: demote both.
    let mut tiers = ssd_period(50);
    tiers[1].ios_during_migration = 10;
    tiers[1].response_ns_total_during_migration = 10 * 100_000;
    tiers[1].ios += 10;
    tiers[1].response_ns_total += 10 * 100_000;
    lab.push(&[(60, 40), (61, 10)], tiers);
    let plan = lab.plan(&mut policy);
    assert_eq!(
        moves(&plan),
        [(10, 0, 1, "atsmf:ended"), (11, 0, 1, "atsmf:ended")]
    );
    assert!(plan.moves[0]
        .reason
        .detail
        .contains("100.0 µs ≤ hold 120.0 µs"));
}

#[test]
fn atsmf_keeps_a_top_segment_that_m_percent_did_not_need() {
    // Segment 10 holds 1000 of 1550 IOs (64.5 % ≥ M = 60 %): the only
    // concentration. Segment 50 (500 IOs, on the fast tier) is still among
    // the top N — in a sub-LUN group, just not needed to reach M — so even
    // without a grace it stays; segment 51 (idle, on the fast tier) goes.
    let mut lab = atsmf_lab();
    lab.place(50, 0);
    lab.place(51, 0);
    let mut segments = vec![(10, 1000), (50, 500)];
    segments.extend((100..150).map(|segment| (segment, 1)));
    lab.push(&segments, ssd_period(1550));
    let plan = lab.plan(&mut Atsmf::new(grace(0)));
    assert_eq!(
        moves(&plan),
        [(51, 0, 1, "atsmf:ended"), (10, 1, 0, "atsmf:benefit")]
    );
}

#[test]
fn atsmf_moves_nothing_when_the_top_segments_hold_too_little_io() {
    // Spread IO: 150 segments with 10 IO each; the top 30 hold 20 % < 60 %.
    // Not a concentration (002 §4.2 step 4, §3): nothing moves, however
    // long it lasts.
    let mut policy = Atsmf::new(AtsmfConfig::default());
    let mut lab = atsmf_lab();
    for _ in 0..20 {
        let spread: Vec<(SegmentId, u32)> = (0..150).map(|segment| (segment, 10)).collect();
        lab.push(&spread, ssd_period(1500));
        assert!(lab.plan(&mut policy).moves.is_empty());
    }
    assert!(policy.concentrations().is_empty());
    // The paper's step 4 read as "take what there is" moves the top groups.
    let mut taking_all = Atsmf::new(AtsmfConfig {
        require_share: false,
        ..AtsmfConfig::default()
    });
    assert!(!lab.plan(&mut taking_all).moves.is_empty());
}

#[test]
fn atsmf_measures_its_figures_live() {
    let mut lab = atsmf_lab();
    let mut policy = Atsmf::new(AtsmfConfig::default());
    let mut tiers = ssd_period(100);
    tiers[0] = TierPeriodStats {
        ios: 40,
        response_ns_total: 40 * 4_000,
        ..idle()
    };
    // 20 of the SSD's 100 IOs ran during a migration at 300 µs: Avef is the
    // other 80 at 60 µs each.
    tiers[1].ios = 120;
    tiers[1].response_ns_total = 100 * 60_000 + 20 * 300_000;
    tiers[1].ios_during_migration = 20;
    tiers[1].response_ns_total_during_migration = 20 * 300_000;
    lab.push(&[(5, 160)], tiers);
    lab.migration = MigrationStats {
        completed_moves: 3,
        mean_move_ns: Some(2.5e9),
        device_move_ns: Some(60e9),
    };
    let view = lab.view();
    let estimates = policy.estimates(&view);
    assert_eq!(estimates.flash_response_ns, 60_000.0);
    assert_eq!(estimates.flash_response_with_migration_ns, 300_000.0);
    assert_eq!(estimates.memory_response_ns, 4_000.0);
    assert_eq!(estimates.move_ns, 2.5e9);
    policy.plan(&view);
    // Ten quiet periods later the window is empty: the last measured figures
    // are used, not the priors.
    for _ in 0..10 {
        lab.push(&[], vec![idle(), idle()]);
    }
    let view = lab.view();
    let later = policy.estimates(&view);
    assert_eq!(later.flash_response_ns, 60_000.0);
    assert_eq!(later.memory_response_ns, 4_000.0);
    assert_eq!(
        serde_json::to_value(later.flash_source).unwrap(),
        serde_json::json!("last-known")
    );
}

#[test]
fn atsmf_takes_the_copy_time_of_the_devices_in_use_before_the_first_move() {
    // One concentration of 10 segments that has lasted long enough that the
    // prior predicts a rest of several periods. With the prior copy time (1 GiB
    // at 1 GB/s ≈ 1 s per segment, a memory tier's) it is worth moving;
    // with the copy time of a disk under it (66 s per segment, a busy HDD)
    // the copy outlasts the rest and nothing moves.
    let hot: Vec<SegmentId> = (20..30).collect();
    let decide = |device_move_ns: Option<f64>| {
        let mut lab = atsmf_lab();
        let mut policy = Atsmf::new(AtsmfConfig::default());
        let mut plan = Plan::default();
        for _ in 0..6 {
            concentration_period(&mut lab, &hot);
            lab.migration = MigrationStats {
                completed_moves: 0,
                mean_move_ns: None,
                device_move_ns,
            };
            plan = lab.plan(&mut policy);
            if !plan.moves.is_empty() {
                break;
            }
        }
        let estimates = policy.estimates(&lab.view());
        (plan, estimates)
    };
    let (prior_plan, prior) = decide(None);
    assert_eq!(
        serde_json::to_value(prior.move_source).unwrap(),
        serde_json::json!("prior")
    );
    assert!(
        !prior_plan.moves.is_empty(),
        "the prior moves it: {}",
        prior_plan.summary
    );
    assert!(
        prior_plan.payback_ns.is_some(),
        "a promotion says how long it may wait"
    );
    let (disk_plan, disk) = decide(Some(66e9));
    assert_eq!(disk.move_ns, 66e9);
    assert_eq!(
        serde_json::to_value(disk.move_source).unwrap(),
        serde_json::json!("devices")
    );
    assert!(
        disk_plan.moves.is_empty(),
        "a disk's copy time does not pay back: {}",
        disk_plan.summary
    );
}

/// A walk with pauses, a second static concentration and quiet periods:
/// enough to exercise tracking, the table, prefetch and demotion.
fn busy_story(lab: &mut Lab, step: usize) {
    let walker = 10 + (step / 2) as SegmentId;
    let mut hot = vec![walker];
    if step % 7 < 4 {
        hot.extend([60, 61]);
    }
    if step % 11 == 10 {
        lab.push(&[(130, 3)], ssd_period(3));
    } else {
        concentration_period(lab, &hot);
    }
}

fn run_story(policy: &mut dyn Policy, lab: &mut Lab, steps: std::ops::Range<usize>) -> Vec<Plan> {
    let mut plans = Vec::new();
    for step in steps {
        busy_story(lab, step);
        let plan = lab.plan(policy);
        lab.apply(&plan);
        plans.push(plan);
    }
    plans
}

#[test]
fn atsmf_save_and_restore_give_identical_subsequent_plans() {
    let mut original = Atsmf::new(AtsmfConfig::default());
    let mut lab = atsmf_lab();
    run_story(&mut original, &mut lab, 0..40);
    assert!(original.learned_durations() > 0);
    let saved = serde_json::to_string(&original.save_state()).unwrap();
    let mut restored = Atsmf::new(AtsmfConfig::default());
    restored
        .restore_state(&serde_json::from_str(&saved).unwrap())
        .unwrap();
    assert_eq!(restored.concentrations(), original.concentrations());
    let mut twin = Lab {
        period_ns: lab.period_ns,
        placement: lab.placement.clone(),
        capacities: lab.capacities.clone(),
        history: lab.history.clone(),
        in_flight: Vec::new(),
        migration: lab.migration,
        tier_infos: Vec::new(),
        pinned: Vec::new(),
    };
    let after = run_story(&mut original, &mut lab, 40..80);
    let after_restore = run_story(&mut restored, &mut twin, 40..80);
    assert!(after.iter().any(|plan| !plan.moves.is_empty()));
    assert_eq!(after, after_restore);
    // Garbage is refused with a message.
    let error = restored
        .restore_state(&serde_json::json!({"tracker": 3}))
        .unwrap_err();
    assert!(error.starts_with("atsmf state"), "{error}");
}

#[test]
fn policies_are_deterministic() {
    for config in [
        PolicyConfig::Atsmf(AtsmfConfig::default()),
        PolicyConfig::OtfAst(OtfAstConfig::default()),
    ] {
        let runs: Vec<Vec<Plan>> = (0..2)
            .map(|_| {
                let mut policy = build_policy(&config);
                let mut lab = atsmf_lab();
                run_story(policy.as_mut(), &mut lab, 0..60)
            })
            .collect();
        assert_eq!(runs[0], runs[1]);
    }
}

#[test]
fn configs_default_to_the_papers_and_refuse_unknown_keys() {
    let parsed: PolicyConfig =
        serde_json::from_str(r#"{"kind": "otf-ast", "util_up_percent": 80}"#).unwrap();
    let PolicyConfig::OtfAst(otf) = parsed else {
        panic!("not otf-ast: {parsed:?}");
    };
    assert_eq!(otf.util_up_percent, 80.0);
    assert_eq!(
        (
            otf.window_periods,
            otf.util_mid_percent,
            otf.util_low_percent,
            otf.persistent_periods
        ),
        (2, 50.0, 10.0, 8)
    );
    let error = serde_json::from_str::<PolicyConfig>(r#"{"kind": "atsmf", "top_n": 3}"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("top_n"), "{error}");
    let atsmf = AtsmfConfig::default();
    assert_eq!((atsmf.top_n_segments, atsmf.share_percent), (30, 60.0));
    assert_eq!(atsmf.validate(), Ok(()));
    assert!(AtsmfConfig {
        share_percent: 0.6e3,
        ..AtsmfConfig::default()
    }
    .validate()
    .unwrap_err()
    .contains("share_percent"));
}
