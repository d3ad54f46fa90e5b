//! pkt-line framing: every message of the protocol is a packet with a 4-hex-digit length that
//! counts itself.
//!
//! ```text
//! "0009done\n"        data packet: length 0x0009 = 4 (length) + 5 (payload)
//! "0000"              flush-pkt: end of a message
//! "0001"              delim-pkt: end of a section (protocol v2)
//! "0002"              response-end-pkt: end of a response (protocol v2, stateless)
//! "0004"              an empty data packet
//! lengths 0003 and above 65520 (0xfff0) are invalid
//! ```

use crate::ProtocolError;
use std::io::{Read, Write};

/// The largest packet, length prefix included (git's `LARGE_PACKET_MAX`).
pub const MAX_PACKET: usize = 65520;
/// The largest payload of one packet.
pub const MAX_PAYLOAD: usize = MAX_PACKET - 4;

/// One packet read from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    /// A data packet's payload (trailing newline kept).
    Data(&'a [u8]),
    /// `0000`.
    Flush,
    /// `0001`.
    Delim,
    /// `0002`.
    ResponseEnd,
    /// The input ended cleanly between packets.
    Eof,
}

/// Shows bytes from the client in an error message: printable ASCII as is, the rest escaped,
/// at most 100 bytes.
pub fn show(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(100) {
        match b {
            b'\n' => s.push_str("\\n"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > 100 {
        s.push_str("...");
    }
    s
}

/// Reads packets from the client, one at a time, into a reused buffer.
pub struct PktReader<'r> {
    input: &'r mut dyn Read,
    buf: Vec<u8>,
    /// Bytes read so far (for logs).
    pub bytes_read: u64,
    peeked: Option<PeekedKind>,
}

#[derive(Debug, Clone, Copy)]
enum PeekedKind {
    Data(usize),
    Flush,
    Delim,
    ResponseEnd,
    Eof,
}

fn hex_value(digit: u8) -> Option<usize> {
    match digit {
        b'0'..=b'9' => Some((digit - b'0') as usize),
        b'a'..=b'f' => Some((digit - b'a' + 10) as usize),
        b'A'..=b'F' => Some((digit - b'A' + 10) as usize),
        _ => None,
    }
}

/// Parses a 4-hex-digit packet length.
pub fn parse_length(header: &[u8; 4]) -> Option<usize> {
    header
        .iter()
        .try_fold(0usize, |acc, &d| Some(acc << 4 | hex_value(d)?))
}

impl<'r> PktReader<'r> {
    /// A reader over `input`.
    pub fn new(input: &'r mut dyn Read) -> PktReader<'r> {
        PktReader {
            input,
            buf: Vec::new(),
            bytes_read: 0,
            peeked: None,
        }
    }

    fn read_exact_or_eof(&mut self, out: &mut [u8]) -> Result<usize, ProtocolError> {
        let mut filled = 0;
        while filled < out.len() {
            match self.input.read(&mut out[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ProtocolError::Io(e)),
            }
        }
        self.bytes_read += filled as u64;
        Ok(filled)
    }

    fn fill(&mut self) -> Result<PeekedKind, ProtocolError> {
        let mut header = [0u8; 4];
        let got = self.read_exact_or_eof(&mut header)?;
        if got == 0 {
            return Ok(PeekedKind::Eof);
        }
        if got < 4 {
            return Err(ProtocolError::Invalid(format!(
                "the input ends inside a pkt-line length: '{}'",
                show(&header[..got])
            )));
        }
        let len = parse_length(&header).ok_or_else(|| {
            ProtocolError::Invalid(format!(
                "bad pkt-line length '{}' (expected 4 hex digits)",
                show(&header)
            ))
        })?;
        match len {
            0 => Ok(PeekedKind::Flush),
            1 => Ok(PeekedKind::Delim),
            2 => Ok(PeekedKind::ResponseEnd),
            3 => Err(ProtocolError::Invalid(format!(
                "bad pkt-line length '{}'",
                show(&header)
            ))),
            n if n > MAX_PACKET => Err(ProtocolError::Invalid(format!(
                "pkt-line length '{}' ({n} bytes) is over the limit of {MAX_PACKET}",
                show(&header)
            ))),
            n => {
                let payload = n - 4;
                self.buf.resize(payload, 0);
                let mut tmp = std::mem::take(&mut self.buf);
                let got = self.read_exact_or_eof(&mut tmp);
                self.buf = tmp;
                let got = got?;
                if got < payload {
                    return Err(ProtocolError::Invalid(format!(
                        "the input ends inside a pkt-line of {n} bytes: '{}{}'",
                        show(&header),
                        show(&self.buf[..got])
                    )));
                }
                Ok(PeekedKind::Data(payload))
            }
        }
    }

    /// The packet `kind` stands for (its data is in the buffer).
    fn packet(&self, kind: PeekedKind) -> Packet<'_> {
        match kind {
            PeekedKind::Data(n) => Packet::Data(&self.buf[..n]),
            PeekedKind::Flush => Packet::Flush,
            PeekedKind::Delim => Packet::Delim,
            PeekedKind::ResponseEnd => Packet::ResponseEnd,
            PeekedKind::Eof => Packet::Eof,
        }
    }

    /// The next packet.
    pub fn read(&mut self) -> Result<Packet<'_>, ProtocolError> {
        let kind = match self.peeked.take() {
            Some(k) => k,
            None => self.fill()?,
        };
        Ok(self.packet(kind))
    }

    /// The next packet, left to be read again by [`PktReader::read`].
    pub fn peek(&mut self) -> Result<Packet<'_>, ProtocolError> {
        let kind = match self.peeked {
            Some(k) => k,
            None => {
                let k = self.fill()?;
                self.peeked = Some(k);
                k
            }
        };
        Ok(self.packet(kind))
    }

    /// The next packet as a text line (trailing newline removed), or the special packet.
    /// A data packet that is not UTF-8 is refused, naming it.
    pub fn read_line(&mut self) -> Result<Line, ProtocolError> {
        Ok(match self.read()? {
            Packet::Data(data) => {
                let data = data.strip_suffix(b"\n").unwrap_or(data);
                match std::str::from_utf8(data) {
                    Ok(s) => Line::Text(s.to_string()),
                    Err(_) => {
                        return Err(ProtocolError::Invalid(format!(
                            "a pkt-line is not text: '{}'",
                            show(data)
                        )))
                    }
                }
            }
            Packet::Flush => Line::Flush,
            Packet::Delim => Line::Delim,
            Packet::ResponseEnd => Line::ResponseEnd,
            Packet::Eof => Line::Eof,
        })
    }
}

/// A packet read as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A data packet's text, without its trailing newline.
    Text(String),
    /// `0000`.
    Flush,
    /// `0001`.
    Delim,
    /// `0002`.
    ResponseEnd,
    /// End of input.
    Eof,
}

/// Writes one data packet holding `payload` (at most [`MAX_PAYLOAD`] bytes).
pub fn write_packet(out: &mut dyn Write, payload: &[u8]) -> std::io::Result<()> {
    if payload.len() > MAX_PAYLOAD {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a pkt-line of {} bytes is too long", payload.len()),
        ));
    }
    let header = length_header(payload.len() + 4);
    // One write per packet, whatever `out` is: a small packet (a ref line) is put together
    // on the stack, a large one in a buffer.
    if payload.len() <= SMALL_PACKET {
        let mut packet = [0u8; SMALL_PACKET + 4];
        packet[..4].copy_from_slice(&header);
        packet[4..4 + payload.len()].copy_from_slice(payload);
        return out.write_all(&packet[..4 + payload.len()]);
    }
    let mut packet = Vec::with_capacity(payload.len() + 4);
    packet.extend_from_slice(&header);
    packet.extend_from_slice(payload);
    out.write_all(&packet)
}

/// Payloads up to this size are written from a stack buffer by [`write_packet`].
const SMALL_PACKET: usize = 512;

/// A packet's four-digit hexadecimal length (`len` includes the four digits; it must be
/// below 65,536).
pub(crate) fn length_header(len: usize) -> [u8; 4] {
    debug_assert!(len < 1 << 16, "a pkt-line length of {len}");
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [
        DIGITS[(len >> 12) & 0xf],
        DIGITS[(len >> 8) & 0xf],
        DIGITS[(len >> 4) & 0xf],
        DIGITS[len & 0xf],
    ]
}

/// Writes `text` as one data packet (the caller includes the newline).
pub fn write_text(out: &mut dyn Write, text: &str) -> std::io::Result<()> {
    write_packet(out, text.as_bytes())
}

/// Writes a flush-pkt.
pub fn write_flush(out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(b"0000")
}

/// Writes a delim-pkt.
pub fn write_delim(out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(b"0001")
}

/// Writes an `ERR <message>` packet, git's way of telling the client why it is refused: with
/// no trailing newline, byte for byte as git's `packet_writer_error` writes it.
pub fn write_err(out: &mut dyn Write, message: &str) -> std::io::Result<()> {
    let mut text = format!("ERR {message}");
    if text.len() > MAX_PAYLOAD {
        let mut end = MAX_PAYLOAD;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    write_text(out, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_packets_of_every_size_whole() {
        // Both sides of the stack buffer's limit, and the largest packet.
        for n in [
            0,
            1,
            SMALL_PACKET - 1,
            SMALL_PACKET,
            SMALL_PACKET + 1,
            MAX_PAYLOAD,
        ] {
            let payload: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let mut out = Vec::new();
            write_packet(&mut out, &payload).unwrap();
            assert_eq!(&out[..4], format!("{:04x}", n + 4).as_bytes(), "{n} bytes");
            assert_eq!(&out[4..], &payload[..], "{n} bytes");
        }
        let too_long = vec![0u8; MAX_PAYLOAD + 1];
        assert!(write_packet(&mut Vec::new(), &too_long).is_err());
    }

    fn read_all(input: &[u8]) -> Result<Vec<Line>, ProtocolError> {
        let mut input = input;
        let mut reader = PktReader::new(&mut input);
        let mut lines = Vec::new();
        loop {
            let line = reader.read_line()?;
            let end = line == Line::Eof;
            lines.push(line);
            if end {
                return Ok(lines);
            }
        }
    }

    #[test]
    fn reads_data_and_special_packets() {
        let lines = read_all(b"0009done\n000ahello\n0001000000020004").unwrap();
        assert_eq!(
            lines,
            vec![
                Line::Text("done".into()),
                Line::Text("hello".into()),
                Line::Delim,
                Line::Flush,
                Line::ResponseEnd,
                Line::Text(String::new()),
                Line::Eof
            ]
        );
    }

    #[test]
    fn peek_then_read() {
        let mut input: &[u8] = b"0008abc\n0000";
        let mut reader = PktReader::new(&mut input);
        assert_eq!(reader.peek().unwrap(), Packet::Data(b"abc\n"));
        assert_eq!(reader.read().unwrap(), Packet::Data(b"abc\n"));
        assert_eq!(reader.peek().unwrap(), Packet::Flush);
        assert_eq!(reader.read().unwrap(), Packet::Flush);
        assert_eq!(reader.read().unwrap(), Packet::Eof);
    }

    #[test]
    fn refuses_bad_lengths_naming_them() {
        let err = read_all(b"zzzzhello").unwrap_err().to_string();
        assert!(err.contains("'zzzz'"), "{err}");
        let err = read_all(b"0003").unwrap_err().to_string();
        assert!(err.contains("'0003'"), "{err}");
        let err = read_all(b"fff1").unwrap_err().to_string();
        assert!(err.contains("over the limit"), "{err}");
        let err = read_all(b"00").unwrap_err().to_string();
        assert!(err.contains("inside a pkt-line length"), "{err}");
        let err = read_all(b"0010short").unwrap_err().to_string();
        assert!(err.contains("0010short"), "{err}");
        let err = read_all(b"0006\xff\n").unwrap_err().to_string();
        assert!(err.contains("\\xff"), "{err}");
    }

    #[test]
    fn the_largest_packet_is_read() {
        let mut input = b"fff0".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_PAYLOAD));
        let mut slice = input.as_slice();
        let mut reader = PktReader::new(&mut slice);
        match reader.read().unwrap() {
            Packet::Data(d) => assert_eq!(d.len(), MAX_PAYLOAD),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn writes_packets() {
        let mut out = Vec::new();
        write_text(&mut out, "want x\n").unwrap();
        write_delim(&mut out).unwrap();
        write_flush(&mut out).unwrap();
        write_err(&mut out, "no").unwrap();
        assert_eq!(out, b"000bwant x\n00010000000aERR no");
        assert!(write_packet(&mut out, &vec![0; MAX_PAYLOAD + 1]).is_err());
    }
}
