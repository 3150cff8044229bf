//! The Prometheus endpoint (`[metrics] listen = "127.0.0.1:PORT"`): a tiny
//! HTTP/1.0 server that answers `GET /metrics` with the text exposition
//! format and anything else with 404 (405 for other methods). One connection
//! at a time, each answered and closed; a slow client gets 5 s.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tierd_common::histogram::Histogram;
use tierd_engine::device::reduce::ReductionStatus;
use tierd_engine::device::stats::IoStats;
use tierd_engine::device::DeviceStats;
use tierd_engine::volume::{Volume, VolumeStatus};
use tierd_nbd::{Server, ServerStats};

/// Longest request head read.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Latency histogram buckets exported: `le` = 2^k ns for these `k` (1.024 µs
/// to about 68.7 s); faster ops fall in the first bucket, slower ones only in
/// `+Inf`. Each counts the ops faster than 2^k ns, which the device's
/// log-linear histogram knows exactly (a power of two is one of its bucket
/// boundaries).
const FIRST_BUCKET_POWER: u32 = 10;
const LAST_BUCKET_POWER: u32 = 36;

/// The running metrics listener.
pub struct MetricsServer {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `address` (`HOST:PORT`; port 0 picks one, see
    /// [`MetricsServer::address`]).
    /// `requests`: each volume's NBD requests as its export counted them.
    pub fn start(
        address: &str,
        volumes: Vec<Arc<Volume>>,
        requests: Vec<(String, Arc<IoStats>)>,
        server: Server,
    ) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(address)?;
        let address = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let thread_stopping = stopping.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if thread_stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        let _ = answer(stream, &volumes, &requests, &server);
                    }
                }
            })?;
        Ok(MetricsServer {
            address,
            stopping,
            thread: Some(thread),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn stop(mut self) {
        self.stop_listener();
    }

    fn stop_listener(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        drop(TcpStream::connect_timeout(&self.address, CLIENT_TIMEOUT));
        let _ = thread.join();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_listener();
    }
}

fn answer(
    mut stream: TcpStream,
    volumes: &[Arc<Volume>],
    requests: &[(String, Arc<IoStats>)],
    server: &Server,
) -> io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n")
        && !head.windows(2).any(|window| window == b"\n\n")
    {
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
        if head.len() > MAX_REQUEST_BYTES {
            break;
        }
    }
    let request_line = head
        .split(|&byte| byte == b'\n')
        .next()
        .map(|line| String::from_utf8_lossy(line).trim_end().to_string())
        .unwrap_or_default();
    let mut parts = request_line.split_ascii_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(volumes, &server.stats()) + &render_requests(requests),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: tierd serves only /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

/// Escapes a label value (`\`, `"`, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family<'a> {
    name: &'a str,
    kind: &'a str,
    help: &'a str,
    samples: Vec<(String, String)>,
}

impl<'a> Family<'a> {
    fn new(name: &'a str, kind: &'a str, help: &'a str) -> Self {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: &str, value: impl ToString) {
        self.add_suffixed("", labels, value);
    }

    fn add_suffixed(&mut self, suffix: &str, labels: &str, value: impl ToString) {
        let series = if labels.is_empty() {
            format!("{}{suffix}", self.name)
        } else {
            format!("{}{suffix}{{{labels}}}", self.name)
        };
        self.samples.push((series, value.to_string()));
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (series, value) in &self.samples {
            let _ = writeln!(out, "{series} {value}");
        }
    }
}

fn seconds(nanoseconds: u64) -> String {
    format!("{}", nanoseconds as f64 / 1e9)
}

fn add_histogram(family: &mut Family<'_>, labels: &str, histogram: &Histogram) {
    for power in FIRST_BUCKET_POWER..=LAST_BUCKET_POWER {
        let upper_ns = 1u64 << power;
        family.add_suffixed(
            "_bucket",
            &format!("{labels},le=\"{}\"", seconds(upper_ns)),
            histogram.count_below_ns(upper_ns),
        );
    }
    let count = histogram.count();
    family.add_suffixed("_bucket", &format!("{labels},le=\"+Inf\""), count);
    family.add_suffixed(
        "_sum",
        labels,
        format!("{}", histogram.sum_ns() as f64 / 1e9),
    );
    family.add_suffixed("_count", labels, count);
}

/// Each volume's NBD requests, as its clients see them: counts by kind,
/// bytes, errors and the response time of reads and writes.
pub fn render_requests(requests: &[(String, Arc<IoStats>)]) -> String {
    let mut counts = Family::new(
        "tierd_volume_requests_total",
        "counter",
        "NBD requests the volume answered successfully, by kind (trim counts discards and zeroing).",
    );
    let mut errors = Family::new(
        "tierd_volume_request_errors_total",
        "counter",
        "NBD requests of the volume that failed (an error reply to the client).",
    );
    let mut read_bytes = Family::new(
        "tierd_volume_read_bytes_total",
        "counter",
        "Bytes clients read from the volume.",
    );
    let mut written_bytes = Family::new(
        "tierd_volume_written_bytes_total",
        "counter",
        "Bytes clients wrote to the volume.",
    );
    let mut latency = Family::new(
        "tierd_volume_request_latency_seconds",
        "histogram",
        "Response time of the volume's reads and writes, from the request reaching the volume to its answer.",
    );
    for (name, stats) in requests {
        let stats = stats.snapshot();
        let volume = format!("volume=\"{}\"", label(name));
        for (kind, count) in [
            ("read", stats.reads),
            ("write", stats.writes),
            ("flush", stats.flushes),
            ("trim", stats.discards),
        ] {
            counts.add(&format!("{volume},kind=\"{kind}\""), count);
        }
        errors.add(&volume, stats.errors);
        read_bytes.add(&volume, stats.read_bytes);
        written_bytes.add(&volume, stats.write_bytes);
        add_histogram(
            &mut latency,
            &format!("{volume},kind=\"read\""),
            &stats.read_latency,
        );
        add_histogram(
            &mut latency,
            &format!("{volume},kind=\"write\""),
            &stats.write_latency,
        );
    }
    let mut out = String::new();
    for family in [counts, errors, read_bytes, written_bytes, latency] {
        family.write(&mut out);
    }
    out
}

/// The exposition text for every volume and the NBD server.
pub fn render(volumes: &[Arc<Volume>], nbd: &ServerStats) -> String {
    let statuses: Vec<VolumeStatus> = volumes.iter().map(|volume| volume.status()).collect();
    render_statuses(&statuses, nbd)
}

fn render_statuses(statuses: &[VolumeStatus], nbd: &ServerStats) -> String {
    let mut volume_size = Family::new("tierd_volume_size_bytes", "gauge", "Volume size.");
    let mut segments = Family::new(
        "tierd_volume_segments",
        "gauge",
        "Segments of the volume placed on each tier.",
    );
    let mut completed = Family::new(
        "tierd_volume_moves_completed_total",
        "counter",
        "Segment moves finished (since the volume was created, as far as the checkpoint knows).",
    );
    let mut dropped = Family::new(
        "tierd_volume_moves_dropped_total",
        "counter",
        "Planned moves dropped before copying (tier full, segment elsewhere) since start.",
    );
    let mut by_rule = Family::new(
        "tierd_volume_moves_by_rule_total",
        "counter",
        "Segment moves finished since start, by the rule that asked for them (operator, pin, or the policy's rule: why data moved).",
    );
    let mut dropped_by_reason = Family::new(
        "tierd_volume_moves_dropped_by_reason_total",
        "counter",
        "Planned moves dropped before copying since start, by reason (refused, pinned, not_asked_again, waited_past_payback, room_taken_back; docs/placement.md).",
    );
    let mut in_flight = Family::new(
        "tierd_volume_moves_in_flight",
        "gauge",
        "Moves being copied now.",
    );
    let mut pending = Family::new(
        "tierd_volume_moves_pending",
        "gauge",
        "Moves queued and not started.",
    );
    let mut periods = Family::new(
        "tierd_volume_periods_closed_total",
        "counter",
        "Monitor periods closed (policy runs) since start.",
    );
    let mut used = Family::new(
        "tierd_tier_used_bytes",
        "gauge",
        "Bytes of segments placed on the tier.",
    );
    let mut capacity = Family::new("tierd_tier_capacity_bytes", "gauge", "Tier device size.");
    let mut reads = Family::new(
        "tierd_tier_reads_total",
        "counter",
        "Read operations on the tier device (user IO and migration).",
    );
    let mut writes = Family::new(
        "tierd_tier_writes_total",
        "counter",
        "Write operations on the tier device (user IO, write-through and migration).",
    );
    let mut read_bytes = Family::new(
        "tierd_tier_read_bytes_total",
        "counter",
        "Bytes read from the tier device.",
    );
    let mut write_bytes = Family::new(
        "tierd_tier_write_bytes_total",
        "counter",
        "Bytes written to the tier device.",
    );
    let mut flushes = Family::new("tierd_tier_flushes_total", "counter", "Device flushes.");
    let mut discards = Family::new(
        "tierd_tier_discards_total",
        "counter",
        "Device discards and zeroings.",
    );
    let mut errors = Family::new(
        "tierd_tier_errors_total",
        "counter",
        "Device operations that failed.",
    );
    let mut busy = Family::new(
        "tierd_tier_busy_seconds_total",
        "counter",
        "Time the device had at least one operation outstanding.",
    );
    let mut read_latency = Family::new(
        "tierd_tier_read_latency_seconds",
        "histogram",
        "Device read latency.",
    );
    let mut write_latency = Family::new(
        "tierd_tier_write_latency_seconds",
        "histogram",
        "Device write latency.",
    );
    for status in statuses {
        let volume = label(&status.name);
        let volume_labels = format!("volume=\"{volume}\"");
        volume_size.add(&volume_labels, status.size_bytes);
        completed.add(&volume_labels, status.completed_moves);
        dropped.add(&volume_labels, status.dropped_moves);
        for (rule, count) in &status.completed_moves_by_rule {
            by_rule.add(&format!("{volume_labels},rule=\"{}\"", label(rule)), count);
        }
        let reasons = &status.dropped_moves_by_reason;
        for (reason, count) in [
            ("refused", reasons.refused),
            ("pinned", reasons.pinned),
            ("not_asked_again", reasons.not_asked_again),
            ("waited_past_payback", reasons.waited_past_payback),
            ("room_taken_back", reasons.room_taken_back),
        ] {
            dropped_by_reason.add(&format!("{volume_labels},reason=\"{reason}\""), count);
        }
        in_flight.add(&volume_labels, status.in_flight.len());
        pending.add(&volume_labels, status.pending_moves);
        periods.add(&volume_labels, status.periods_closed);
        for (tier, count) in &status.placement_by_tier {
            segments.add(
                &format!("volume=\"{volume}\",tier=\"{}\"", label(tier)),
                count,
            );
        }
        for tier in &status.tiers {
            let labels = format!("volume=\"{volume}\",tier=\"{}\"", label(&tier.name));
            used.add(&labels, tier.used_bytes);
            capacity.add(&labels, tier.capacity_bytes);
            let stats = tier.stats.clone().unwrap_or_else(DeviceStats::default);
            reads.add(&labels, stats.reads);
            writes.add(&labels, stats.writes);
            read_bytes.add(&labels, stats.read_bytes);
            write_bytes.add(&labels, stats.write_bytes);
            flushes.add(&labels, stats.flushes);
            discards.add(&labels, stats.discards);
            errors.add(&labels, stats.errors);
            busy.add(&labels, seconds(stats.busy_ns));
            add_histogram(&mut read_latency, &labels, &stats.read_latency);
            add_histogram(&mut write_latency, &labels, &stats.write_latency);
        }
    }
    let mut requests = Family::new(
        "tierd_nbd_requests_total",
        "counter",
        "NBD requests received, by command.",
    );
    for (name, count) in ServerStats::COMMAND_NAMES.iter().zip(nbd.requests) {
        requests.add(&format!("command=\"{name}\""), count);
    }
    let mut nbd_families = vec![requests];
    for (name, kind, help, value) in [
        (
            "tierd_nbd_read_bytes_total",
            "counter",
            "Bytes returned by successful NBD reads.",
            nbd.bytes_read,
        ),
        (
            "tierd_nbd_written_bytes_total",
            "counter",
            "Bytes stored by successful NBD writes.",
            nbd.bytes_written,
        ),
        (
            "tierd_nbd_request_errors_total",
            "counter",
            "NBD requests answered with an error.",
            nbd.request_errors,
        ),
        (
            "tierd_nbd_connections_accepted_total",
            "counter",
            "NBD connections accepted.",
            nbd.connections_accepted,
        ),
        (
            "tierd_nbd_connections_active",
            "gauge",
            "NBD connections open now.",
            nbd.connections_active,
        ),
        (
            "tierd_nbd_connections_refused_total",
            "counter",
            "NBD connections closed at once because too many were open or their thread could not start.",
            nbd.connections_refused,
        ),
        (
            "tierd_nbd_connections_evicted_total",
            "counter",
            "NBD connections closed in their handshake to make room for a new one.",
            nbd.connections_evicted,
        ),
        (
            "tierd_nbd_handshakes_timed_out_total",
            "counter",
            "NBD connections closed because their handshake took longer than server.handshake_timeout.",
            nbd.handshakes_timed_out,
        ),
        (
            "tierd_nbd_requests_cancelled_total",
            "counter",
            "Queued NBD requests dropped unexecuted because their client went away.",
            nbd.requests_cancelled,
        ),
        (
            "tierd_nbd_in_flight_bytes",
            "gauge",
            "Bytes of NBD read replies and write payloads held now (bounded by server.max_in_flight_bytes).",
            nbd.in_flight_bytes,
        ),
        (
            "tierd_nbd_in_flight_bytes_max",
            "gauge",
            "Most bytes of NBD read replies and write payloads held at once since start.",
            nbd.in_flight_bytes_max,
        ),
        (
            "tierd_nbd_handshakes_failed_total",
            "counter",
            "NBD handshakes that did not reach transmission.",
            nbd.handshakes_failed,
        ),
        (
            "tierd_nbd_protocol_errors_total",
            "counter",
            "NBD connections closed because the client broke the protocol.",
            nbd.protocol_errors,
        ),
    ] {
        let mut family = Family::new(name, kind, help);
        family.add("", value);
        nbd_families.push(family);
    }
    // Per cache volume: the same figures as `tierd status --json`'s "cache".
    type CacheFigure = fn(&tierd_engine::volume::CacheStatus) -> String;
    let cache_figures: [(&str, &str, &str, CacheFigure); 11] = [
        (
            "tierd_cache_block_bytes",
            "gauge",
            "Cache block size.",
            |cache| cache.block_bytes.to_string(),
        ),
        (
            "tierd_cache_read_hit_ratio",
            "gauge",
            "Share of read blocks served by the cache since start.",
            |cache| cache.read_hit_ratio.to_string(),
        ),
        (
            "tierd_cache_write_hit_ratio",
            "gauge",
            "Share of written blocks that were cached since start.",
            |cache| cache.write_hit_ratio.to_string(),
        ),
        (
            "tierd_cache_dirty_bytes",
            "gauge",
            "Bytes of dirty cache blocks (only on the cache tier).",
            |cache| cache.dirty_bytes.to_string(),
        ),
        (
            "tierd_cache_occupancy_bytes",
            "gauge",
            "Bytes of cache blocks held.",
            |cache| cache.occupancy_bytes.to_string(),
        ),
        (
            "tierd_cache_written_back_bytes_total",
            "counter",
            "Bytes written back to home since start.",
            |cache| cache.written_back_bytes.to_string(),
        ),
        (
            "tierd_cache_allocations_total",
            "counter",
            "Misses that took a slot (promotions) since start.",
            |cache| cache.allocations.to_string(),
        ),
        (
            "tierd_cache_clean_evictions_total",
            "counter",
            "Clean blocks evicted since start.",
            |cache| cache.clean_evictions.to_string(),
        ),
        (
            "tierd_cache_dirty_evictions_total",
            "counter",
            "Dirty blocks evicted (written back first) since start.",
            |cache| cache.dirty_evictions.to_string(),
        ),
        (
            "tierd_cache_lost_bytes",
            "gauge",
            "Bytes whose only current copy was on a lost cache tier.",
            |cache| cache.lost_bytes.to_string(),
        ),
        (
            "tierd_cache_mode",
            "gauge",
            "1 for the cache's current mode.",
            |_| "1".to_string(),
        ),
    ];
    let mut cache_families: Vec<Family<'_>> = cache_figures
        .iter()
        .map(|(name, kind, help, _)| Family::new(name, kind, help))
        .collect();
    for status in statuses {
        let Some(cache) = &status.cache else { continue };
        let volume = label(&status.name);
        for (family, (name, _, _, figure)) in cache_families.iter_mut().zip(&cache_figures) {
            let labels = if *name == "tierd_cache_mode" {
                format!("volume=\"{volume}\",mode=\"{}\"", label(&cache.mode))
            } else {
                format!("volume=\"{volume}\"")
            };
            family.add(&labels, figure(cache));
        }
    }
    cache_families.retain(|family| !family.samples.is_empty());
    type ReductionFigure = fn(&ReductionStatus) -> String;
    let reduction_figures: [(&str, &str, &str, ReductionFigure); 14] = [
        (
            "tierd_reduction_logical_bytes",
            "gauge",
            "Bytes of logical blocks written to the reduced tier (zeroes included).",
            |r| r.logical_bytes.to_string(),
        ),
        (
            "tierd_reduction_physical_bytes",
            "gauge",
            "Bytes of the reduced tier's device in use.",
            |r| r.physical_bytes.to_string(),
        ),
        (
            "tierd_reduction_ratio",
            "gauge",
            "Logical over physical bytes.",
            |r| r.ratio.to_string(),
        ),
        (
            "tierd_reduction_zero_bytes",
            "gauge",
            "Logical bytes stored as nothing (zero blocks).",
            |r| r.zero_bytes.to_string(),
        ),
        (
            "tierd_reduction_dedup_bytes",
            "gauge",
            "Logical bytes stored as references to identical blocks.",
            |r| r.dedup_bytes.to_string(),
        ),
        (
            "tierd_reduction_compress_saved_bytes",
            "gauge",
            "Bytes compression saved over the stored blocks.",
            |r| r.compress_saved_bytes.to_string(),
        ),
        (
            "tierd_reduction_staged_bytes",
            "gauge",
            "Raw bytes waiting for post-process reduction.",
            |r| r.staged_bytes.to_string(),
        ),
        (
            "tierd_reduction_switches_total",
            "counter",
            "Switches between inline and post-process reduction since start.",
            |r| r.switches.to_string(),
        ),
        (
            "tierd_reduction_worker_utilisation",
            "gauge",
            "Reduction workers' utilisation over the last window (0-1).",
            |r| r.utilisation.to_string(),
        ),
        (
            "tierd_reduction_dedup_hits_total",
            "counter",
            "Written blocks stored as a reference to an identical stored block since start.",
            |r| r.dedup_hits.to_string(),
        ),
        (
            "tierd_reduction_dead_bytes",
            "gauge",
            "Bytes of packs in use that hold no live fragment (what cleaning can win back).",
            |r| r.dead_bytes.to_string(),
        ),
        (
            "tierd_reduction_cleaned_packs_total",
            "counter",
            "Packs the cleaner emptied (copying their live fragments) since start.",
            |r| r.cleaned_packs.to_string(),
        ),
        (
            "tierd_reduction_cleaner_relocated_bytes_total",
            "counter",
            "Live fragment bytes the cleaner copied since start (its write amplification).",
            |r| r.cleaner_relocated_bytes.to_string(),
        ),
        (
            "tierd_reduction_mode",
            "gauge",
            "1 for the mode new writes take now (inline or post).",
            |_| "1".to_string(),
        ),
    ];
    let mut reduction_families: Vec<Family<'_>> = reduction_figures
        .iter()
        .map(|(name, kind, help, _)| Family::new(name, kind, help))
        .collect();
    for status in statuses {
        let volume = label(&status.name);
        for tier in &status.tiers {
            let Some(reduction) = &tier.reduction else {
                continue;
            };
            for (family, (name, _, _, figure)) in
                reduction_families.iter_mut().zip(&reduction_figures)
            {
                let mut labels = format!("volume=\"{volume}\",tier=\"{}\"", label(&tier.name));
                if *name == "tierd_reduction_mode" {
                    labels.push_str(&format!(",mode=\"{}\"", label(&reduction.mode)));
                }
                family.add(&labels, figure(reduction));
            }
        }
    }
    reduction_families.retain(|family| !family.samples.is_empty());
    // Per replicated tier (`docs/replicas.md`).
    type ReplicaFigure = fn(&tierd_engine::device::replica::ReplicaView) -> String;
    let replica_figures: [(&str, &str, &str, ReplicaFigure); 8] = [
        (
            "tierd_replica_replicated_extents",
            "gauge",
            "Extents with at least one current copy in free space.",
            |r| r.replicated_extents.to_string(),
        ),
        (
            "tierd_replica_copies",
            "gauge",
            "Current copies.",
            |r| r.current_copies.to_string(),
        ),
        (
            "tierd_replica_space_bytes",
            "gauge",
            "Free space holding replicas or reserved for them.",
            |r| (r.replica_extents * r.extent_bytes).to_string(),
        ),
        (
            "tierd_replica_reads_total",
            "counter",
            "Reads served at least in part from a replica since start.",
            |r| r.reads_from_replicas.to_string(),
        ),
        (
            "tierd_replica_read_bytes_total",
            "counter",
            "Bytes read from replicas since start.",
            |r| r.bytes_from_replicas.to_string(),
        ),
        (
            "tierd_replica_seek_distance_saved_bytes_total",
            "counter",
            "Head travel saved by reading replicas (distance to the primary minus to the copy) since start.",
            |r| r.seek_distance_saved_bytes.max(0).to_string(),
        ),
        (
            "tierd_replica_copies_made_total",
            "counter",
            "Copies made in idle time since start.",
            |r| r.copies_made.to_string(),
        ),
        (
            "tierd_replica_dropped_total",
            "counter",
            "Copies dropped by writes to their primary, writes into their space and trims since start.",
            |r| (r.dropped_by_writes + r.dropped_by_reclaim + r.dropped_by_trims).to_string(),
        ),
    ];
    let mut replica_families: Vec<Family<'_>> = replica_figures
        .iter()
        .map(|(name, kind, help, _)| Family::new(name, kind, help))
        .collect();
    for status in statuses {
        let volume = label(&status.name);
        for tier in &status.tiers {
            let Some(replicas) = &tier.replicas else {
                continue;
            };
            for (family, (_, _, _, figure)) in replica_families.iter_mut().zip(&replica_figures) {
                let labels = format!("volume=\"{volume}\",tier=\"{}\"", label(&tier.name));
                family.add(&labels, figure(replicas));
            }
        }
    }
    replica_families.retain(|family| !family.samples.is_empty());
    // Per cache volume over an SMR home with staging: `"smr"` of the cache status.
    type SmrFigure = fn(&tierd_engine::volume::SmrStatus) -> String;
    let smr_figures: [(&str, &str, &str, SmrFigure); 8] = [
        (
            "tierd_smr_staged_bytes",
            "gauge",
            "Bytes staged on the cache tier, waiting for their band's rewrite.",
            |smr| smr.staged_bytes.to_string(),
        ),
        (
            "tierd_smr_staged_bands",
            "gauge",
            "Bands holding staged blocks.",
            |smr| smr.staged_bands.to_string(),
        ),
        (
            "tierd_smr_band_rewrites_total",
            "counter",
            "Whole-band rewrites finished since start.",
            |smr| smr.band_rewrites.to_string(),
        ),
        (
            "tierd_smr_destage_written_bytes_total",
            "counter",
            "Bytes written home by whole-band rewrites since start.",
            |smr| smr.destage_written_bytes.to_string(),
        ),
        (
            "tierd_smr_destage_read_bytes_total",
            "counter",
            "Bytes of home read to fill bands being rewritten since start.",
            |smr| smr.destage_read_bytes.to_string(),
        ),
        (
            "tierd_smr_blocked_blocks_total",
            "counter",
            "Blocks of user writes that waited for their band's rewrite since start.",
            |smr| smr.blocked_blocks.to_string(),
        ),
        (
            "tierd_smr_unstaged_home_write_blocks_total",
            "counter",
            "Write blocks that reached the SMR disk outside a band rewrite (its media cache) since start.",
            |smr| smr.unstaged_home_write_blocks.to_string(),
        ),
        (
            "tierd_smr_model_dirty_bands",
            "gauge",
            "Bands the emulated SMR disk's model has to clean (emulated homes only).",
            |smr| {
                smr.home_model
                    .map_or(String::new(), |model| model.dirty_bands.to_string())
            },
        ),
    ];
    let mut smr_families: Vec<Family<'_>> = smr_figures
        .iter()
        .map(|(name, kind, help, _)| Family::new(name, kind, help))
        .collect();
    for status in statuses {
        let Some(smr) = status.cache.as_ref().and_then(|cache| cache.smr.as_ref()) else {
            continue;
        };
        let labels = format!("volume=\"{}\"", label(&status.name));
        for (family, (_, _, _, figure)) in smr_families.iter_mut().zip(&smr_figures) {
            let value = figure(smr);
            if !value.is_empty() {
                family.add(&labels, value);
            }
        }
    }
    smr_families.retain(|family| !family.samples.is_empty());
    let mut out = String::new();
    for family in [
        &volume_size,
        &segments,
        &completed,
        &dropped,
        &by_rule,
        &dropped_by_reason,
        &in_flight,
        &pending,
        &periods,
        &used,
        &capacity,
        &reads,
        &writes,
        &read_bytes,
        &write_bytes,
        &flushes,
        &discards,
        &errors,
        &busy,
        &read_latency,
        &write_latency,
    ]
    .into_iter()
    .chain(cache_families.iter())
    .chain(reduction_families.iter())
    .chain(replica_families.iter())
    .chain(smr_families.iter())
    .chain(nbd_families.iter())
    {
        family.write(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let mut family = Family::new("x_seconds", "histogram", "h");
        let mut histogram = Histogram::new();
        histogram.record(1); // below the first exported bound: in every bucket
        histogram.record_n(4096, 3);
        histogram.record(8191); // below 8192 ns
        histogram.record(8192); // not below 8192 ns: from the next bucket on
        histogram.record(1 << 40); // beyond the last exported bucket: only in +Inf
        add_histogram(&mut family, "tier=\"a\"", &histogram);
        let mut out = String::new();
        family.write(&mut out);
        for expected in [
            "x_seconds_bucket{tier=\"a\",le=\"0.000001024\"} 1\n",
            "x_seconds_bucket{tier=\"a\",le=\"0.000004096\"} 1\n",
            "x_seconds_bucket{tier=\"a\",le=\"0.000008192\"} 5\n",
            "x_seconds_bucket{tier=\"a\",le=\"0.000016384\"} 6\n",
            "x_seconds_bucket{tier=\"a\",le=\"68.719476736\"} 6\n",
            "x_seconds_bucket{tier=\"a\",le=\"+Inf\"} 7\n",
            "x_seconds_sum{tier=\"a\"} 1099.511656448\n",
            "x_seconds_count{tier=\"a\"} 7\n",
        ] {
            assert!(out.contains(expected), "{expected:?} missing:\n{out}");
        }
        // Cumulative: never decreasing, 27 bounds and +Inf.
        let counts: Vec<u64> = out
            .lines()
            .filter(|line| line.starts_with("x_seconds_bucket"))
            .map(|line| line.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(counts.len(), 28);
        assert!(
            counts.windows(2).all(|pair| pair[0] <= pair[1]),
            "{counts:?}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
