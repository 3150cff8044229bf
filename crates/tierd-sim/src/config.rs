//! Settings of one simulation run and the strategy (placement policy or page
//! cache) it runs.

use serde::Serialize;
use tierd_common::units::{NS_PER_SECOND, PAGE_BYTES};
use tierd_policy::cache::CacheKind;
use tierd_policy::policies::atsmf::AtsmfConfig;
use tierd_policy::policies::otf_ast::OtfAstConfig;
use tierd_policy::{PolicyConfig, PolicyKind};

use crate::error::SimError;
use crate::stack::{check_segment_bytes, TierStack};

/// Most segments a volume may be split into (per-segment tables stay below
/// ~1 GiB of memory).
pub const MAX_SEGMENTS: u64 = 1 << 26;

/// Default for [`SimConfig::max_outstanding_requests`]: Linux's default
/// block-layer queue size (`nr_requests`).
pub const DEFAULT_MAX_OUTSTANDING_REQUESTS: u32 = 128;

/// Default statistics and policy period: 60 s (paper 000's, and the period
/// of `none` and the page caches, whose periods only cut the series).
pub const DEFAULT_PERIOD_NS: u64 = 60 * NS_PER_SECOND;

/// How requests arrive.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Replay {
    /// By timestamp: arrival = (t − t0) / speed, t0 = the window start (or the
    /// first request). `speed` > 1 compresses time like `btreplay -x`.
    OpenLoop { speed: f64 },
    /// Timestamps ignored: `queue_depth` requests are kept outstanding; each
    /// completion issues the next request at once.
    ClosedLoop { queue_depth: u32 },
}

/// Which part of the trace is replayed, in trace time from its first request
/// (before acceleration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Window {
    pub from_ns: Option<u64>,
    pub to_ns: Option<u64>,
}

/// Everything a run needs besides the trace and the strategy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    pub stack: TierStack,
    /// Segment size (power of two, 1 MiB ..= 4 GiB).
    pub segment_bytes: u64,
    /// Simulated volume size; every request must lie inside it.
    pub volume_bytes: u64,
    /// Statistics and policy period, in virtual (replay) time. With
    /// [`SimConfig::period_per_policy`] this is only the period of the
    /// strategies without a paper period of their own.
    pub period_ns: u64,
    /// Each tiering policy runs at its paper's period
    /// ([`Strategy::paper_period_ns`]: atsmf 24 s, otf-ast 60 s) instead of
    /// `period_ns` (`tierd sim` without `--period`). Default false.
    pub period_per_policy: bool,
    pub replay: Replay,
    /// Open loop: most user requests outstanding at once; a request due while
    /// that many are outstanding is issued when one completes (the replayer
    /// blocks, as btreplay does on a full block-layer queue). 0: no limit.
    pub max_outstanding_requests: u32,
    pub window: Window,
    /// Page-cache size for the caching baselines; default: the fast tier's capacity.
    pub cache_bytes: Option<u64>,
    /// Root seed for everything random in the run (device models).
    pub seed: u64,
    /// Completed periods kept for the policy's view.
    pub history_periods: usize,
    /// Replicas in free space on the HDD home tier (`--replicas`); `None`:
    /// not asked for (no `replicas`/`disk_access_ms` in the result).
    pub replicas: Option<crate::replicas::ReplicaRun>,
}

impl SimConfig {
    /// Defaults: the stack's segment size, 60 s periods, open loop at speed 1
    /// with at most 128 requests outstanding, the whole trace, seed 1.
    pub fn new(stack: TierStack, volume_bytes: u64) -> SimConfig {
        SimConfig {
            segment_bytes: stack.segment_bytes,
            stack,
            volume_bytes,
            period_ns: DEFAULT_PERIOD_NS,
            period_per_policy: false,
            replay: Replay::OpenLoop { speed: 1.0 },
            max_outstanding_requests: DEFAULT_MAX_OUTSTANDING_REQUESTS,
            window: Window::default(),
            cache_bytes: None,
            seed: 1,
            history_periods: tierd_policy::monitor::DEFAULT_HISTORY_PERIODS,
            replicas: None,
        }
    }

    /// The settings `strategy` runs with: these, with the policy's paper
    /// period when [`SimConfig::period_per_policy`] is set.
    pub fn for_strategy(&self, strategy: &Strategy) -> std::borrow::Cow<'_, SimConfig> {
        match strategy.paper_period_ns() {
            Some(period_ns) if self.period_per_policy && period_ns != self.period_ns => {
                let mut config = self.clone();
                config.period_ns = period_ns;
                std::borrow::Cow::Owned(config)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// Segments in the volume (the last may be partial).
    pub fn segments(&self) -> u64 {
        self.volume_bytes.div_ceil(self.segment_bytes)
    }

    /// Capacity of tier `index` in bytes. A home tier without a capacity
    /// keeps its device's own size, grown to the volume when that is larger
    /// (the volume then starts at byte 0 of the device, as a LUN on a whole disk).
    pub fn tier_capacity_bytes(&self, index: usize) -> u64 {
        let tier = &self.stack.tiers[index];
        tier.capacity_bytes
            .unwrap_or_else(|| self.volume_bytes.max(tier.device.default_capacity_bytes()))
    }

    /// Checks every setting; the error names the option and what is allowed.
    pub fn validate(&self) -> Result<(), SimError> {
        check_segment_bytes("options", "segment_bytes", self.segment_bytes)?;
        if self.volume_bytes == 0 {
            return Err(SimError::option(
                "volume_bytes",
                "the volume is empty; give its size (--volume-bytes)",
            ));
        }
        if self.segments() > MAX_SEGMENTS {
            return Err(SimError::option(
                "segment_bytes",
                format!(
                    "{} segments of {} bytes for a {}-byte volume; at most {MAX_SEGMENTS}: use larger segments",
                    self.segments(),
                    self.segment_bytes,
                    self.volume_bytes
                ),
            ));
        }
        if self.stack.migration.chunk_bytes > self.segment_bytes {
            return Err(SimError::option(
                "migration.chunk_bytes",
                format!(
                    "chunks of {} bytes are larger than the {}-byte segments",
                    self.stack.migration.chunk_bytes, self.segment_bytes
                ),
            ));
        }
        let home = self.stack.home();
        let home_capacity = self.tier_capacity_bytes(home);
        if home_capacity < self.volume_bytes {
            return Err(SimError::Config {
                source_name: self.stack.name.clone(),
                key: format!("tier[{home}].capacity"),
                message: format!(
                    "the home tier {:?} holds {home_capacity} bytes but the volume is {} bytes; \
                     home must hold every segment (raise its capacity or leave it out to size it to the volume)",
                    self.stack.tiers[home].name, self.volume_bytes
                ),
            });
        }
        if self.period_ns == 0 {
            return Err(SimError::option("period", "must be positive, e.g. 60s"));
        }
        match self.replay {
            Replay::OpenLoop { speed } => {
                if !(speed.is_finite() && speed > 0.0) {
                    return Err(SimError::option(
                        "speed",
                        format!("{speed} is not allowed: a positive factor, e.g. 1, 2, 8, 0.5"),
                    ));
                }
            }
            Replay::ClosedLoop { queue_depth } => {
                if queue_depth == 0 {
                    return Err(SimError::option("queue_depth", "must be at least 1"));
                }
            }
        }
        if let (Some(from), Some(to)) = (self.window.from_ns, self.window.to_ns) {
            if to <= from {
                return Err(SimError::option(
                    "window",
                    format!(
                        "the window ends ({} min) before it starts ({} min)",
                        to as f64 / 60e9,
                        from as f64 / 60e9
                    ),
                ));
            }
        }
        if let Some(bytes) = self.cache_bytes {
            if bytes < PAGE_BYTES {
                return Err(SimError::option("cache_bytes", "at least one 4KiB page"));
            }
        }
        crate::stack::check_cache_block_bytes(
            "options",
            "cache_block",
            self.stack.cache.block_bytes,
        )?;
        Ok(())
    }
}

/// Every strategy name the simulator knows, in the order reports list
/// them: `tierd sim --matrix` runs all of them by default.
pub const POLICY_NAMES: &[&str] = &[
    "none", "otf-ast", "atsmf", "fifo", "lru", "arc", "s3fifo", "adaptive",
];

/// What decides placement: a tiering policy (segments move between tiers)
/// or a page cache over a two-tier stack (pages are copied into the fast tier).
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    Tiering(PolicyConfig),
    Cache(CacheKind),
    /// The block cache (ARC eviction, `adaptive::EVICTION`) with adaptive admission: it
    /// measures which admission rule pays, including none
    /// (`tierd_core::cache::adaptive`).
    Adaptive,
}

impl Strategy {
    /// `none`, `otf-ast`, `atsmf` (paper defaults), `fifo`, `lru`, `arc`,
    /// `s3fifo` or `adaptive`.
    pub fn parse(name: &str) -> Result<Strategy, SimError> {
        let policy = |kind| Ok(Strategy::Tiering(PolicyConfig::default_for(kind)));
        match name.trim() {
            "none" => policy(PolicyKind::None),
            "otf-ast" => policy(PolicyKind::OtfAst),
            "atsmf" => policy(PolicyKind::Atsmf),
            "fifo" => Ok(Strategy::Cache(CacheKind::Fifo)),
            "lru" => Ok(Strategy::Cache(CacheKind::Lru)),
            "arc" => Ok(Strategy::Cache(CacheKind::Arc)),
            "s3fifo" => Ok(Strategy::Cache(CacheKind::S3fifo)),
            "adaptive" => Ok(Strategy::Adaptive),
            other => Err(SimError::UnknownPolicy {
                name: other.to_string(),
            }),
        }
    }

    /// A comma-separated list, e.g. `none,otf-ast,fifo`; duplicates are an error.
    pub fn parse_list(list: &str) -> Result<Vec<Strategy>, SimError> {
        let mut strategies = Vec::new();
        for name in list.split(',').filter(|name| !name.trim().is_empty()) {
            let strategy = Strategy::parse(name)?;
            if strategies.contains(&strategy) {
                return Err(SimError::option(
                    "policy",
                    format!("{:?} is listed twice", name.trim()),
                ));
            }
            strategies.push(strategy);
        }
        if strategies.is_empty() {
            return Err(SimError::option(
                "policy",
                "no policy given; e.g. none,otf-ast,atsmf,fifo",
            ));
        }
        Ok(strategies)
    }

    /// Applies per-policy settings from a TOML document with one table per
    /// policy name, e.g.
    ///
    /// ```toml
    /// [otf-ast]
    /// promote_persistent = false   # paper 000 Table 4 ran without the §5.4 rule
    ///
    /// [atsmf]
    /// top_n_segments = 20
    /// ```
    ///
    /// Keys left out keep the paper defaults. A table for a policy that is not
    /// in `strategies`, a policy without settings (`none`, the caches), an
    /// unknown key or an out-of-range value is an error naming the file and
    /// the key, so a typo never silently runs the defaults.
    pub fn apply_settings(
        strategies: &mut [Strategy],
        text: &str,
        source_name: &str,
    ) -> Result<(), SimError> {
        let table: toml::Table = toml::from_str(text).map_err(|error| SimError::StackSyntax {
            source_name: source_name.to_string(),
            message: error.to_string(),
        })?;
        let config_error = |key: &str, message: String| SimError::Config {
            source_name: source_name.to_string(),
            key: key.to_string(),
            message,
        };
        let listed: Vec<&str> = strategies.iter().map(Strategy::name).collect();
        for (key, value) in &table {
            let Some(strategy) = strategies
                .iter_mut()
                .find(|strategy| strategy.name() == key)
            else {
                return Err(config_error(
                    key,
                    format!(
                        "not a policy of this run (--policy lists: {}); tables are named after policies, e.g. [otf-ast]",
                        listed.join(", ")
                    ),
                ));
            };
            let settings = value.clone();
            let parsed = match strategy {
                Strategy::Tiering(PolicyConfig::OtfAst(_)) => {
                    let config: OtfAstConfig =
                        settings.try_into().map_err(|error: toml::de::Error| {
                            config_error(key, error.message().to_string())
                        })?;
                    config
                        .validate()
                        .map_err(|message| config_error(key, message))?;
                    PolicyConfig::OtfAst(config)
                }
                Strategy::Tiering(PolicyConfig::Atsmf(_)) => {
                    let config: AtsmfConfig =
                        settings.try_into().map_err(|error: toml::de::Error| {
                            config_error(key, error.message().to_string())
                        })?;
                    config
                        .validate()
                        .map_err(|message| config_error(key, message))?;
                    PolicyConfig::Atsmf(config)
                }
                Strategy::Tiering(PolicyConfig::None) | Strategy::Cache(_) | Strategy::Adaptive => {
                    return Err(config_error(
                        key,
                        "this policy has no settings (only otf-ast and atsmf do)".to_string(),
                    ))
                }
            };
            *strategy = Strategy::Tiering(parsed);
        }
        Ok(())
    }

    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Tiering(config) => config.kind().name(),
            Strategy::Cache(kind) => kind.name(),
            Strategy::Adaptive => "adaptive",
        }
    }

    /// The period the policy's paper used (`atsmf`: 24 s, 002 §4.1;
    /// `otf-ast`: 60 s, 000 §4.1.1.1); `None` for `none` and the caches.
    pub fn paper_period_ns(&self) -> Option<u64> {
        match self {
            Strategy::Tiering(PolicyConfig::OtfAst(_)) => {
                Some(tierd_policy::policies::otf_ast::PAPER_PERIOD_NS)
            }
            Strategy::Tiering(PolicyConfig::Atsmf(_)) => {
                Some(tierd_policy::policies::atsmf::PAPER_PERIOD_NS)
            }
            Strategy::Tiering(PolicyConfig::None) | Strategy::Cache(_) | Strategy::Adaptive => None,
        }
    }

    pub fn is_cache(&self) -> bool {
        matches!(self, Strategy::Cache(_) | Strategy::Adaptive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_settings_replace_the_paper_defaults_key_by_key() {
        let mut strategies = Strategy::parse_list("none,otf-ast,atsmf,lru").unwrap();
        Strategy::apply_settings(
            &mut strategies,
            "[otf-ast]\npromote_persistent = false\n\n[atsmf]\ntop_n_segments = 20\n",
            "settings.toml",
        )
        .unwrap();
        let Strategy::Tiering(PolicyConfig::OtfAst(otf_ast)) = &strategies[1] else {
            panic!("otf-ast stays otf-ast: {:?}", strategies[1]);
        };
        assert!(!otf_ast.promote_persistent);
        assert_eq!(
            otf_ast.util_up_percent,
            OtfAstConfig::default().util_up_percent
        );
        let Strategy::Tiering(PolicyConfig::Atsmf(atsmf)) = &strategies[2] else {
            panic!("atsmf stays atsmf: {:?}", strategies[2]);
        };
        assert_eq!(atsmf.top_n_segments, 20);
        assert_eq!(strategies[0], Strategy::parse("none").unwrap());
    }

    #[test]
    fn policy_settings_errors_name_the_file_and_key() {
        let error = |text: &str| {
            let mut strategies = Strategy::parse_list("none,otf-ast,lru").unwrap();
            Strategy::apply_settings(&mut strategies, text, "settings.toml")
                .unwrap_err()
                .to_string()
        };
        let typo = error("[otf-ast]\npromote_persistant = false\n");
        assert!(
            typo.contains("settings.toml") && typo.contains("promote_persistant"),
            "{typo}"
        );
        let absent = error("[atsmf]\ntop_n_segments = 20\n");
        assert!(
            absent.contains("atsmf") && absent.contains("none, otf-ast, lru"),
            "{absent}"
        );
        let no_settings = error("[lru]\nsize = 1\n");
        assert!(no_settings.contains("no settings"), "{no_settings}");
        let range = error("[otf-ast]\nutil_up_percent = 170.0\n");
        assert!(
            range.contains("otf-ast") && range.contains("util_up_percent"),
            "{range}"
        );
        let syntax = error("[otf-ast\n");
        assert!(syntax.contains("settings.toml"), "{syntax}");
    }

    fn config() -> SimConfig {
        SimConfig::new(TierStack::preset("hdd-ssd").unwrap(), 600 << 30)
    }

    #[test]
    fn defaults_validate() {
        let config = config();
        config.validate().unwrap();
        assert_eq!(config.segments(), 600);
        assert_eq!(config.tier_capacity_bytes(1), 600 << 30);
        let small = SimConfig::new(TierStack::preset("hdd-ssd").unwrap(), 14 << 30);
        assert_eq!(
            small.tier_capacity_bytes(1),
            tierd_device::DevicePreset::Savvio10k4.default_capacity_bytes()
        );
    }

    #[test]
    fn bad_settings_name_the_option() {
        let mut bad = config();
        bad.segment_bytes = 3 << 20;
        let message = bad.validate().unwrap_err().to_string();
        assert!(
            message.contains("segment_bytes") && message.contains("1MiB to 4GiB"),
            "{message}"
        );

        let mut bad = config();
        bad.segment_bytes = 512 << 10;
        assert!(bad.validate().is_err());

        let mut bad = config();
        bad.replay = Replay::OpenLoop { speed: 0.0 };
        let message = bad.validate().unwrap_err().to_string();
        assert!(message.contains("speed"), "{message}");

        let mut bad = config();
        bad.stack.tiers[1].capacity_bytes = Some(500_000_000_000);
        let message = bad.validate().unwrap_err().to_string();
        assert!(
            message.contains("tier[1].capacity") && message.contains("home"),
            "{message}"
        );

        let mut bad = config();
        bad.window = Window {
            from_ns: Some(10),
            to_ns: Some(5),
        };
        assert!(bad.validate().unwrap_err().to_string().contains("window"));
    }

    #[test]
    fn strategies_parse() {
        let list = Strategy::parse_list("none, otf-ast,atsmf,fifo,lru,arc,s3fifo").unwrap();
        let names: Vec<_> = list.iter().map(Strategy::name).collect();
        assert_eq!(
            names,
            ["none", "otf-ast", "atsmf", "fifo", "lru", "arc", "s3fifo"]
        );
        let message = Strategy::parse_list("none,lfu").unwrap_err().to_string();
        assert!(
            message.contains("lfu") && message.contains("s3fifo"),
            "{message}"
        );
        assert!(Strategy::parse_list("lru,lru").is_err());
        assert!(Strategy::parse_list("").is_err());
    }

    #[test]
    fn each_policy_runs_at_its_papers_period_unless_told_otherwise() {
        let mut config = config();
        let atsmf = Strategy::parse("atsmf").unwrap();
        let otf_ast = Strategy::parse("otf-ast").unwrap();
        let fifo = Strategy::parse("fifo").unwrap();
        config.period_ns = 30 * NS_PER_SECOND;
        assert_eq!(config.for_strategy(&atsmf).period_ns, 30 * NS_PER_SECOND);
        config.period_per_policy = true;
        assert_eq!(config.for_strategy(&atsmf).period_ns, 24 * NS_PER_SECOND);
        assert_eq!(config.for_strategy(&otf_ast).period_ns, 60 * NS_PER_SECOND);
        assert_eq!(config.for_strategy(&fifo).period_ns, 30 * NS_PER_SECOND);
        assert_eq!(Strategy::parse("none").unwrap().paper_period_ns(), None);
    }
}
