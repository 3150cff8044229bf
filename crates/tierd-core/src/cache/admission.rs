//! Admission: whether a missed block earns a slot.
//!
//! - `always`: every miss that may allocate does (flashcache, bcache).
//! - `frequency`: a block is admitted on its `misses`-th miss within a
//!   window of recent misses (Open CAS's `nhit` promotion policy, the idea of
//!   dm-cache smq's hotspot queue): one-touch blocks of a scan never take a
//!   slot. The window is a FIFO of the most recent missed blocks (as many
//!   entries as the cache has slots), each with its miss count; a block that
//!   falls out of the window starts again from zero.
//! - `adaptive`: one of off, `frequency:8`, `frequency:4`, `frequency:2`,
//!   `always`, chosen while the cache runs by the measured gain of each
//!   (`adaptive.rs`).

use std::collections::VecDeque;
use std::fmt;

use tierd_common::blockmap::BlockMap;

use super::adaptive::Adaptive;
use super::{BlockId, CacheSettings};

/// Which admission rule a cache runs, with its parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionKind {
    Always,
    /// Admit on the `misses`-th miss (2..=255) within the window.
    Frequency {
        misses: u8,
    },
    /// Chosen online among off and the fixed rules ([`super::adaptive`]).
    Adaptive,
}

impl AdmissionKind {
    /// The default frequency filter: admit on the second miss.
    pub const FREQUENCY_DEFAULT_MISSES: u8 = 2;

    pub fn name(self) -> &'static str {
        match self {
            AdmissionKind::Always => "always",
            AdmissionKind::Frequency { .. } => "frequency",
            AdmissionKind::Adaptive => "adaptive",
        }
    }

    /// Parses `always`, `frequency` (admit on the 2nd miss),
    /// `frequency:N` (admit on the N-th miss, 2 ≤ N ≤ 255) or `adaptive`.
    pub fn parse(text: &str) -> Result<AdmissionKind, String> {
        let expected =
            "expected `always`, `frequency`, `frequency:N` with 2 <= N <= 255, or `adaptive`";
        match text.split_once(':') {
            None if text == "always" => Ok(AdmissionKind::Always),
            None if text == "adaptive" => Ok(AdmissionKind::Adaptive),
            None if text == "frequency" => Ok(AdmissionKind::Frequency {
                misses: Self::FREQUENCY_DEFAULT_MISSES,
            }),
            Some(("frequency", count)) => match count.trim().parse::<u8>() {
                Ok(misses) if misses >= 2 => Ok(AdmissionKind::Frequency { misses }),
                _ => Err(format!("admission {text:?}: {expected}")),
            },
            _ => Err(format!("admission {text:?}: {expected}")),
        }
    }
}

impl fmt::Display for AdmissionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionKind::Always => f.write_str("always"),
            AdmissionKind::Frequency { misses } => write!(f, "frequency:{misses}"),
            AdmissionKind::Adaptive => f.write_str("adaptive"),
        }
    }
}

/// The admission state of one cache.
#[derive(Debug)]
pub(super) enum Admission {
    Always,
    Frequency(FrequencyFilter),
    Adaptive(Box<Adaptive>),
}

impl Admission {
    /// The admission of a cache with these settings; the frequency window
    /// holds as many entries as the cache has slots.
    pub(super) fn new(settings: &CacheSettings, policy_capacity: u64) -> Admission {
        let window_entries = u64::from(settings.slots);
        match settings.admission {
            AdmissionKind::Always => Admission::Always,
            AdmissionKind::Frequency { misses } => {
                Admission::Frequency(FrequencyFilter::new(misses, window_entries))
            }
            AdmissionKind::Adaptive => Admission::Adaptive(Box::new(Adaptive::new(
                settings.policy,
                policy_capacity,
                window_entries,
                settings.block_bytes,
                settings.volume_bytes,
                settings.priors,
            ))),
        }
    }

    /// Counts a miss of `block` and says whether it is admitted now.
    pub(super) fn admit(&mut self, block: BlockId) -> bool {
        match self {
            Admission::Always => true,
            Admission::Frequency(filter) => filter.miss(block),
            Admission::Adaptive(adaptive) => adaptive.admit(block),
        }
    }
}

#[derive(Debug)]
pub(crate) struct FrequencyFilter {
    misses: u8,
    window_entries: usize,
    counts: BlockMap<u8>,
    order: VecDeque<BlockId>,
}

impl FrequencyFilter {
    pub(crate) fn new(misses: u8, window_entries: u64) -> FrequencyFilter {
        let window_entries = window_entries.clamp(1, 1 << 24) as usize;
        FrequencyFilter {
            misses: misses.max(2),
            window_entries,
            counts: BlockMap::default(),
            order: VecDeque::new(),
        }
    }

    /// Admit on the `misses`-th miss from now on (counts so far are kept).
    pub(crate) fn set_misses(&mut self, misses: u8) {
        self.misses = misses.max(2);
    }

    /// A smaller (or larger) window from now on: entries past it leave,
    /// oldest first, as the next misses make room.
    pub(crate) fn set_window(&mut self, window_entries: u64) {
        self.window_entries = window_entries.clamp(1, 1 << 24) as usize;
    }

    /// Forgets `block`'s count (it left a sampled shadow's sample).
    pub(crate) fn forget(&mut self, block: BlockId) {
        self.counts.remove(&block);
    }

    pub(crate) fn miss(&mut self, block: BlockId) -> bool {
        if let Some(count) = self.counts.get_mut(&block) {
            *count = count.saturating_add(1);
            if *count >= self.misses {
                // Admitted: it leaves the window (its slot entry in `order`
                // is skipped when it reaches the front).
                self.counts.remove(&block);
                return true;
            }
            return false;
        }
        while self.counts.len() >= self.window_entries {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.counts.remove(&oldest);
        }
        // Stale entries (admitted blocks) make `order` longer than `counts`;
        // trim them so the ring stays within twice the window.
        while self.order.len() >= 2 * self.window_entries {
            if let Some(oldest) = self.order.pop_front() {
                self.counts.remove(&oldest);
            }
        }
        self.counts.insert(block, 1);
        self.order.push_back(block);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_what_is_accepted() {
        assert_eq!(AdmissionKind::parse("always"), Ok(AdmissionKind::Always));
        assert_eq!(
            AdmissionKind::parse("frequency"),
            Ok(AdmissionKind::Frequency { misses: 2 })
        );
        assert_eq!(
            AdmissionKind::parse("frequency:4"),
            Ok(AdmissionKind::Frequency { misses: 4 })
        );
        for bad in ["frequency:1", "frequency:x", "sometimes", "always:2"] {
            let error = AdmissionKind::parse(bad).unwrap_err();
            assert!(
                error.contains(bad) && error.contains("frequency:N"),
                "{error}"
            );
        }
        assert_eq!(
            AdmissionKind::Frequency { misses: 3 }.to_string(),
            "frequency:3"
        );
    }

    #[test]
    fn frequency_admits_on_the_nth_miss_within_the_window() {
        let mut admission = Admission::Frequency(FrequencyFilter::new(3, 2));
        assert!(!admission.admit(1));
        assert!(!admission.admit(1));
        assert!(admission.admit(1));
        // Admitted blocks start again.
        assert!(!admission.admit(1));
        // 2 and 3 push 1 out of a window of two entries: it starts from zero.
        assert!(!admission.admit(2));
        assert!(!admission.admit(3));
        assert!(!admission.admit(1));
        assert!(!admission.admit(1));
        assert!(admission.admit(1));
    }
}
