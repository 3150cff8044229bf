//! The export replayed against: connecting the NBD connections, checking
//! they agree on the export, and what a `tierd serve` export's description
//! tells about the volume behind it.

use tierd_nbd::client::{ClientReceiver, ClientSender};
use tierd_nbd::{Client, ConnectOptions, NbdUri};

use crate::LoadError;

/// Most NBD connections a replay opens.
pub const MAX_CONNECTIONS: u32 = 64;

/// What the NBD description of a tierd export tells a client about the
/// volume behind it (the replay report shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedVolume {
    pub name: String,
    pub size_bytes: u64,
    pub segment_bytes: u64,
    /// Fastest first; the last is home.
    pub tiers: Vec<String>,
}

const DESCRIPTION_PREFIX: &str = "tierd volume ";
const SEGMENTS_OF: &str = " bytes in segments of ";
const OVER_TIERS: &str = " bytes over tiers ";
const TIER_SEPARATOR: &str = " > ";

/// The export description `tierd serve` gives a volume: `tierd volume NAME
/// (SIZE bytes in segments of SEGMENT bytes over tiers FAST > ... > HOME)`.
pub fn describe(volume: &DescribedVolume) -> String {
    format!(
        "{DESCRIPTION_PREFIX}{} ({}{SEGMENTS_OF}{}{OVER_TIERS}{})",
        volume.name,
        volume.size_bytes,
        volume.segment_bytes,
        volume.tiers.join(TIER_SEPARATOR)
    )
}

/// The volume a [`describe`]d description names; `None` for any other text
/// (another server's export).
pub fn parse_description(text: &str) -> Option<DescribedVolume> {
    let rest = text.strip_prefix(DESCRIPTION_PREFIX)?.strip_suffix(')')?;
    let (name, rest) = rest.split_once(" (")?;
    let (size, rest) = rest.split_once(SEGMENTS_OF)?;
    let (segment, tiers) = rest.split_once(OVER_TIERS)?;
    Some(DescribedVolume {
        name: name.to_string(),
        size_bytes: size.parse().ok()?,
        segment_bytes: segment.parse().ok()?,
        tiers: tiers.split(TIER_SEPARATOR).map(str::to_string).collect(),
    })
}

/// Open connections to one export, split into sending and receiving halves.
pub struct Connected {
    /// The target as given (URI text).
    pub target: String,
    pub export_bytes: u64,
    /// The volume behind a tierd export (from its description).
    pub volume: Option<DescribedVolume>,
    /// Every connection advertised multi-conn.
    pub multi_conn: bool,
    pub senders: Vec<ClientSender>,
    pub receivers: Vec<ClientReceiver>,
}

/// Opens `connections` connections (`NBD_OPT_GO`, structured replies) to
/// `uri`, and checks every one sees the same, non-empty export. `target` is
/// the URI's text, for messages.
pub fn connect(target: &str, uri: &NbdUri, connections: u32) -> Result<Connected, LoadError> {
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    let mut export_bytes = None;
    let mut volume = None;
    let mut multi_conn = true;
    for index in 0..connections {
        let client = Client::connect(
            &uri.target,
            &ConnectOptions {
                export_name: uri.export_name.clone(),
                allocation_context: false,
                tls: uri.tls.clone(),
                ..ConnectOptions::default()
            },
        )
        .map_err(|error| LoadError::Target(format!("{target}: connection {index}: {error}")))?;
        let info = client.info();
        multi_conn &= info.can_multi_conn();
        if index == 0 {
            volume = info.description.as_deref().and_then(parse_description);
        }
        match export_bytes {
            None => export_bytes = Some(info.size_bytes),
            Some(size) if size != info.size_bytes => {
                return Err(LoadError::Target(format!(
                    "{target}: connection {index} sees {} bytes, connection 0 saw {size}",
                    info.size_bytes
                )))
            }
            Some(_) => {}
        }
        let (sender, receiver) = client.split();
        senders.push(sender);
        receivers.push(receiver);
    }
    let export_bytes = export_bytes.unwrap_or(0);
    if export_bytes == 0 {
        return Err(LoadError::Target(format!("{target}: the export is empty")));
    }
    Ok(Connected {
        target: target.to_string(),
        export_bytes,
        volume,
        multi_conn,
        senders,
        receivers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_reads_back() {
        let volume = DescribedVolume {
            name: "vol0".to_string(),
            size_bytes: 1 << 30,
            segment_bytes: 64 << 20,
            tiers: vec!["mem".to_string(), "disk".to_string()],
        };
        let text = describe(&volume);
        assert_eq!(
            text,
            "tierd volume vol0 (1073741824 bytes in segments of 67108864 bytes over tiers mem > disk)"
        );
        assert_eq!(parse_description(&text), Some(volume));
        assert_eq!(parse_description("nbdkit memory plugin"), None);
        assert_eq!(parse_description("tierd volume x (big)"), None);
    }
}
