//! The one request type every reader produces and every consumer takes.

use tierd_common::hash::FastMap;

/// Direction of a block request; defined in `tierd-common` so crates that
/// need only the direction do not depend on the trace readers.
pub use tierd_common::op::Op;

/// Index of a volume in a reader's [`VolumeTable`].
pub type VolumeId = u32;

/// One block request as recorded in a trace.
///
/// Offsets and lengths are bytes whatever unit the file used (sectors, 4 KiB
/// pages, blocks); times are nanoseconds from the trace's own origin (Windows
/// FILETIME, Unix seconds, or an arbitrary zero: readers do not rebase).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub time_ns: u64,
    pub volume: VolumeId,
    pub op: Op,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// Response time the trace recorded, when it has one.
    pub response_ns: Option<u64>,
}

impl Request {
    /// First byte past the request.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes.saturating_add(self.length_bytes)
    }
}

/// Names of the volumes a trace mentions, in order of first appearance.
///
/// Volume names follow each format's convention: MSR `host_disk` (`hm_0`),
/// DiskSim/flashsim device number (`0`), SPC ASU (`0`), Tencent volume id,
/// systor17 LUN, fio-iolog file name; single-volume formats use `0`.
#[derive(Clone, Debug, Default)]
pub struct VolumeTable {
    names: Vec<String>,
    by_name: FastMap<String, VolumeId>,
}

impl VolumeTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `name`, adding it if unseen.
    pub fn intern(&mut self, name: &str) -> VolumeId {
        if let Some(id) = self.by_name.get(name) {
            return *id;
        }
        let id = VolumeId::try_from(self.names.len()).expect("more than 2^32 volumes");
        self.names.push(name.to_string());
        self.by_name.insert(name.to_string(), id);
        id
    }

    /// Like [`intern`](Self::intern) for raw bytes from a file; non-UTF-8 bytes
    /// are replaced rather than rejected.
    pub fn intern_bytes(&mut self, name: &[u8]) -> VolumeId {
        match std::str::from_utf8(name) {
            Ok(text) => self.intern(text),
            Err(_) => self.intern(&String::from_utf8_lossy(name)),
        }
    }

    pub fn id(&self, name: &str) -> Option<VolumeId> {
        self.by_name.get(name).copied()
    }

    pub fn name(&self, id: VolumeId) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
