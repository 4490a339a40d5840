//! Reading a capture file (the classic pcap format tcpdump writes with `-w`) and searching its
//! packets for a byte string.
//!
//! The search is per packet: a needle that only appears split across two TCP segments is not
//! found. That is what "appears in no packet" means, and it is enough for a secret sent in a
//! header, which a peer writes in one segment; a capture of TLS traffic shows none of it.

/// The magic number of a pcap file with microsecond timestamps, as written in its byte order.
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// The magic number of a pcap file with nanosecond timestamps.
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// The file header: magic, version, time zone, accuracy, snapshot length, link type.
const FILE_HEADER: usize = 24;
/// A packet record's header: seconds, fraction, captured length, original length.
const RECORD_HEADER: usize = 16;

/// The captured bytes of every packet in a pcap file, in order.
///
/// # Errors
///
/// When the file is not a pcap file or ends inside a record.
pub fn packets(file: &[u8]) -> Result<Vec<&[u8]>, String> {
    let magic = file
        .get(..4)
        .ok_or_else(|| format!("{} bytes are no pcap file header", file.len()))?;
    let magic: [u8; 4] = [magic[0], magic[1], magic[2], magic[3]];
    let read_u32: fn([u8; 4]) -> u32 = match (u32::from_le_bytes(magic), u32::from_be_bytes(magic))
    {
        (MAGIC_MICROS | MAGIC_NANOS, _) => u32::from_le_bytes,
        (_, MAGIC_MICROS | MAGIC_NANOS) => u32::from_be_bytes,
        _ => return Err(format!("not a pcap file: magic {magic:02x?}")),
    };
    if file.len() < FILE_HEADER {
        return Err(format!("a pcap file header of {} bytes", file.len()));
    }
    let mut packets = Vec::new();
    let mut at = FILE_HEADER;
    while at < file.len() {
        let header = file.get(at..at + RECORD_HEADER).ok_or_else(|| {
            format!(
                "the capture ends inside the header of packet {}",
                packets.len()
            )
        })?;
        let length = read_u32([header[8], header[9], header[10], header[11]]) as usize;
        let start = at + RECORD_HEADER;
        let data = file.get(start..start + length).ok_or_else(|| {
            format!(
                "the capture ends inside packet {} ({length} bytes from offset {start})",
                packets.len()
            )
        })?;
        packets.push(data);
        at = start + length;
    }
    Ok(packets)
}

/// The indices of the packets of a pcap file that contain `needle`.
///
/// # Errors
///
/// When the file cannot be read as pcap (see [`packets`]).
pub fn packets_containing(file: &[u8], needle: &[u8]) -> Result<Vec<usize>, String> {
    Ok(packets(file)?
        .iter()
        .enumerate()
        .filter(|(_, packet)| contains(packet, needle))
        .map(|(index, _)| index)
        .collect())
}

/// Whether `needle` occurs in `haystack` (an empty needle occurs everywhere).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcap file of `packets`, little- or big-endian, as tcpdump would write it.
    fn file(packets: &[&[u8]], big_endian: bool) -> Vec<u8> {
        let word = |value: u32| {
            if big_endian {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            }
        };
        let mut out = Vec::new();
        out.extend(word(MAGIC_MICROS));
        let half = |value: u16| {
            if big_endian {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            }
        };
        out.extend(half(2)); // version 2.4
        out.extend(half(4));
        out.extend([0; 8]); // time zone, accuracy
        out.extend(word(262_144)); // snapshot length
        out.extend(word(1)); // Ethernet
        for (index, packet) in packets.iter().enumerate() {
            out.extend(word(1_700_000_000 + index as u32));
            out.extend(word(0));
            out.extend(word(packet.len() as u32));
            out.extend(word(packet.len() as u32));
            out.extend(*packet);
        }
        out
    }

    #[test]
    fn finds_the_packets_that_carry_the_needle() {
        let secret = b"test-secret";
        let packets: [&[u8]; 4] = [
            b"GET / HTTP/1.1\r\n\r\n",
            b"POST /raft/append HTTP/1.1\r\nx-secret: test-secret\r\n",
            b"...test-sec",
            b"ret...",
        ];
        for big_endian in [false, true] {
            let capture = file(&packets, big_endian);
            assert_eq!(packets_from(&capture).len(), 4);
            // Found in the packet that carries it whole; not in the two that split it.
            assert_eq!(packets_containing(&capture, secret), Ok(vec![1]));
            assert_eq!(packets_containing(&capture, b"absent"), Ok(vec![]));
        }
        assert_eq!(packets_containing(&file(&[], false), secret), Ok(vec![]));
    }

    fn packets_from(capture: &[u8]) -> Vec<&[u8]> {
        packets(capture).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn refuses_what_is_not_a_whole_capture() {
        let capture = file(&[b"0123456789"], false);
        assert!(
            packets(&capture[..capture.len() - 1]).is_err(),
            "cut in a packet"
        );
        assert!(
            packets(&capture[..FILE_HEADER + 3]).is_err(),
            "cut in a header"
        );
        assert!(packets(b"GIF89a and more bytes than a header").is_err());
        assert!(packets(b"").is_err());
    }
}
