//! Reduced tiers: compression and deduplication under a tier's logical
//! block space (issue 15, paper 004).

pub mod codec;
