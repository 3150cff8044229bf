//! Shared foundations of tierd: injected time ([`clock`]), injected randomness
//! ([`rng`]), human units ([`units`]), deterministic hashing ([`hash`]), the
//! direction of a block request ([`op::Op`]), the latency histogram
//! ([`histogram`]) and page-aligned buffers for direct IO ([`aligned`]).
//!
//! Every other crate depends on this one and on nothing above it. Engine,
//! policy, simulator and analysis code take a [`clock::Clock`] and a
//! [`rng::Rng`] from their caller and never read the OS clock or RNG; the
//! workspace `clippy.toml` enforces that.

pub mod aligned;
pub mod blockmap;
pub mod clock;
pub mod hash;
pub mod histogram;
pub mod op;
pub mod rng;
pub mod testing;
pub mod units;
