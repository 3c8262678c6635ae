//! pcapng: a sequence of blocks, each `type, length, body, length`, grouped
//! into sections that each start with a section header block (SHB) fixing
//! the byte order, then interface description blocks (IDB) and packets.

use crate::wire::LinkType;

use super::source::{Fault, Source, grow, u16_at, u32_at, u64_at};
use super::{CaptureErrorKind, MAX_BLOCK_LEN, MAX_RECORD_LEN, Meta};

/// Section header block type; a palindrome, so it reads the same in both
/// byte orders.
pub(super) const SHB_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
const BOM_BE: [u8; 4] = [0x1a, 0x2b, 0x3c, 0x4d];
pub(super) const BOM_LE: [u8; 4] = [0x4d, 0x3c, 0x2b, 0x1a];

pub(super) const BT_IDB: u32 = 1;
const BT_OPB: u32 = 2;
const BT_SPB: u32 = 3;
pub(super) const BT_EPB: u32 = 6;

const OPT_ENDOFOPT: u16 = 0;
pub(super) const OPT_IF_NAME: u16 = 2;
pub(super) const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;

const NS_PER_SEC: u64 = 1_000_000_000;

/// One interface of the current section.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: LinkType,
    snaplen: u32,
    /// Timestamp units per second (`if_tsresol`; 10^6 by default).
    units_per_sec: u64,
    /// Seconds added to every timestamp (`if_tsoffset`).
    offset_sec: i64,
}

impl Interface {
    /// Converts a raw 64-bit timestamp to nanoseconds since the epoch,
    /// saturating at 0 and `u64::MAX`.
    fn ts_ns(&self, raw: u64) -> u64 {
        let base = if NS_PER_SEC.is_multiple_of(self.units_per_sec) {
            u128::from(raw) * u128::from(NS_PER_SEC / self.units_per_sec)
        } else {
            u128::from(raw) * u128::from(NS_PER_SEC) / u128::from(self.units_per_sec)
        };
        let ns = base as i128 + i128::from(self.offset_sec) * i128::from(NS_PER_SEC);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Reader state: the current section's byte order and interfaces.
#[derive(Debug, Default)]
pub(super) struct PcapngState {
    big_endian: bool,
    interfaces: Vec<Interface>,
    /// `if_name` of each interface, by id (`None`: no name given).
    names: Vec<Option<String>>,
}

/// What one block turned out to be.
#[derive(Debug)]
pub(super) enum Block {
    /// The stream ended cleanly between blocks.
    End,
    /// A section header; the state now describes the new section.
    Section,
    /// A packet, its data in the caller's buffer.
    Packet(Meta),
    /// Any other block: an interface description, statistics, name
    /// resolution, or a type this reader does not know (skipped).
    Other,
}

/// Block names for messages.
fn block_name(ty: u32) -> &'static str {
    match ty {
        BT_IDB => "interface description block",
        BT_OPB => "packet block",
        BT_SPB => "simple packet block",
        BT_EPB => "enhanced packet block",
        _ => "block",
    }
}

/// The least total length each block type can have.
fn min_len(ty: u32) -> u32 {
    match ty {
        BT_IDB => 20,
        BT_OPB | BT_EPB => 32,
        BT_SPB => 16,
        _ => 12,
    }
}

/// Checks a block's leading total length (found at `start + 4`).
fn check_len(start: u64, len: u32, min: u32) -> Result<(), Fault> {
    if len < min {
        return Err(Fault::new(
            start + 4,
            CaptureErrorKind::BlockTooShort { len, min },
        ));
    }
    if !len.is_multiple_of(4) {
        return Err(Fault::new(
            start + 4,
            CaptureErrorKind::BlockLengthUnaligned(len),
        ));
    }
    Ok(())
}

/// Checks the trailing copy of the length, found at `at`.
fn check_trailer(at: u64, leading: u32, trailing: u32) -> Result<(), Fault> {
    if leading != trailing {
        return Err(Fault::new(
            at,
            CaptureErrorKind::BlockTrailerMismatch { leading, trailing },
        ));
    }
    Ok(())
}

/// Walks the options in `opts` (found at stream offset `base`), calling `f`
/// with each option's code, value and offset, until `opt_endofopt` or the end
/// of the area. Every option, padding included, must fit in the area.
fn walk_options(
    opts: &[u8],
    base: u64,
    big_endian: bool,
    block: &'static str,
    mut f: impl FnMut(u16, &[u8], u64) -> Result<(), Fault>,
) -> Result<(), Fault> {
    let mut i = 0usize;
    while i < opts.len() {
        let avail = opts.len() - i;
        let at = base + i as u64;
        if avail < 4 {
            return Err(Fault::new(
                at,
                CaptureErrorKind::OptionOverrun {
                    block,
                    code: None,
                    need: 4,
                    avail: avail as u64,
                },
            ));
        }
        let code = u16_at(opts, i, big_endian);
        if code == OPT_ENDOFOPT {
            break;
        }
        let len = usize::from(u16_at(opts, i + 2, big_endian));
        let need = 4 + len.next_multiple_of(4);
        if need > avail {
            return Err(Fault::new(
                at,
                CaptureErrorKind::OptionOverrun {
                    block,
                    code: Some(code),
                    need: need as u64,
                    avail: avail as u64,
                },
            ));
        }
        f(code, &opts[i + 4..i + 4 + len], at)?;
        i += need;
    }
    Ok(())
}

/// An `if_name` value found at `at`: UTF-8 (as pcapng requires of every
/// string option), trailing NULs dropped (some writers terminate strings);
/// `None` when nothing is left.
fn if_name(value: &[u8], at: u64) -> Result<Option<String>, Fault> {
    let end = value.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let s = std::str::from_utf8(&value[..end]).map_err(|_| {
        Fault::new(
            at,
            CaptureErrorKind::BadOption {
                block: "interface description block",
                code: OPT_IF_NAME,
                reason: "if_name is not UTF-8",
            },
        )
    })?;
    Ok((!s.is_empty()).then(|| s.to_string()))
}

/// Units per second for an `if_tsresol` byte, if it fits in 64 bits.
fn units_per_sec(tsresol: u8) -> Option<u64> {
    let exp = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 == 0 {
        10u64.checked_pow(exp)
    } else {
        1u64.checked_shl(exp).filter(|_| exp < 64)
    }
}

impl PcapngState {
    /// Reads the next block. Packet data lands at the start of `buf`.
    pub(super) fn next_block(
        &mut self,
        src: &mut Source,
        buf: &mut Vec<u8>,
    ) -> Result<Block, Fault> {
        let start = src.pos();
        let mut hdr = [0u8; 8];
        let got = src.read_some(&mut hdr, start)?;
        if got == 0 {
            return Ok(Block::End);
        }
        if got < hdr.len() {
            return Err(Fault::new(
                start,
                CaptureErrorKind::Truncated {
                    what: "block header",
                    got: got as u64,
                    need: 8,
                },
            ));
        }
        if hdr[..4] == SHB_MAGIC {
            self.section(src, buf, start, [hdr[4], hdr[5], hdr[6], hdr[7]])?;
            return Ok(Block::Section);
        }
        let be = self.big_endian;
        let ty = u32_at(&hdr, 0, be);
        let len = u32_at(&hdr, 4, be);
        check_len(start, len, min_len(ty))?;
        if !matches!(ty, BT_IDB | BT_OPB | BT_SPB | BT_EPB) {
            // Skip without buffering: statistics, name resolution, secrets,
            // custom and unknown blocks.
            src.skip(u64::from(len) - 12, "block", start, 8, u64::from(len))?;
            let mut tr = [0u8; 4];
            src.read_exact(&mut tr, "block", start, u64::from(len) - 4, u64::from(len))?;
            check_trailer(start + u64::from(len) - 4, len, u32_at(&tr, 0, be))?;
            return Ok(Block::Other);
        }
        let name = block_name(ty);
        if len > MAX_BLOCK_LEN {
            return Err(Fault::new(
                start + 4,
                CaptureErrorKind::BlockTooLarge {
                    block: name,
                    len,
                    max: MAX_BLOCK_LEN,
                },
            ));
        }
        // Bounded by MAX_BLOCK_LEN; at least min_len(ty) - 8 >= 8.
        let rest = (len - 8) as usize;
        let body = grow(buf, rest);
        src.read_exact(body, name, start, 8, u64::from(len))?;
        let content_len = rest - 4;
        check_trailer(
            start + u64::from(len) - 4,
            len,
            u32_at(body, content_len, be),
        )?;
        let content = &body[..content_len];
        // Stream offset of content[0].
        let base = start + 8;
        match ty {
            BT_IDB => {
                self.interface(content, base)?;
                Ok(Block::Other)
            }
            BT_SPB => self.simple_packet(content, base, start).map(Block::Packet),
            _ => self.packet(ty, content, base).map(Block::Packet),
        }
    }

    /// A section header block whose first 8 bytes (`start..start + 8`) were
    /// read; `len_bytes` is its length field, byte order not yet known.
    fn section(
        &mut self,
        src: &mut Source,
        buf: &mut Vec<u8>,
        start: u64,
        len_bytes: [u8; 4],
    ) -> Result<(), Fault> {
        const NAME: &str = "section header block";
        let mut bom = [0u8; 4];
        src.read_exact(&mut bom, NAME, start, 8, 12)?;
        let be = match bom {
            BOM_BE => true,
            BOM_LE => false,
            other => {
                return Err(Fault::new(
                    start + 8,
                    CaptureErrorKind::BadByteOrderMagic(u32::from_be_bytes(other)),
                ));
            }
        };
        let len = u32_at(&len_bytes, 0, be);
        check_len(start, len, 28)?;
        if len > MAX_BLOCK_LEN {
            return Err(Fault::new(
                start + 4,
                CaptureErrorKind::BlockTooLarge {
                    block: NAME,
                    len,
                    max: MAX_BLOCK_LEN,
                },
            ));
        }
        // At least 16: version (4), section length (8), trailer (4).
        let rest = (len - 12) as usize;
        let body = grow(buf, rest);
        src.read_exact(body, NAME, start, 12, u64::from(len))?;
        let content_len = rest - 4;
        check_trailer(
            start + u64::from(len) - 4,
            len,
            u32_at(body, content_len, be),
        )?;
        let major = u16_at(body, 0, be);
        let minor = u16_at(body, 2, be);
        if major != 1 {
            return Err(Fault::new(
                start + 12,
                CaptureErrorKind::UnsupportedVersion {
                    format: "pcapng",
                    major,
                    minor,
                },
            ));
        }
        // body[4..12] is the section length, often -1 (unknown); not needed
        // to read sequentially.
        walk_options(&body[12..content_len], start + 24, be, NAME, |_, _, _| {
            Ok(())
        })?;
        self.big_endian = be;
        self.interfaces.clear();
        self.names.clear();
        Ok(())
    }

    /// An interface description block's content (after type and length).
    fn interface(&mut self, content: &[u8], base: u64) -> Result<(), Fault> {
        const NAME: &str = "interface description block";
        let be = self.big_endian;
        if self.interfaces.len() >= super::MAX_INTERFACES {
            return Err(Fault::new(
                base.saturating_sub(8),
                CaptureErrorKind::TooManyInterfaces(super::MAX_INTERFACES),
            ));
        }
        let mut iface = Interface {
            link_type: LinkType::from_linktype(u32::from(u16_at(content, 0, be))),
            snaplen: u32_at(content, 4, be),
            units_per_sec: 1_000_000,
            offset_sec: 0,
        };
        let mut name = None;
        walk_options(&content[8..], base + 8, be, NAME, |code, value, at| {
            match code {
                OPT_IF_NAME if name.is_none() => name = if_name(value, at)?,
                OPT_IF_TSRESOL => {
                    let &[r] = value else {
                        return Err(Fault::new(
                            at,
                            CaptureErrorKind::BadOption {
                                block: NAME,
                                code,
                                reason: "if_tsresol must be 1 byte long",
                            },
                        ));
                    };
                    iface.units_per_sec = units_per_sec(r)
                        .ok_or_else(|| Fault::new(at, CaptureErrorKind::TsResolution(r)))?;
                }
                OPT_IF_TSOFFSET => {
                    if value.len() != 8 {
                        return Err(Fault::new(
                            at,
                            CaptureErrorKind::BadOption {
                                block: NAME,
                                code,
                                reason: "if_tsoffset must be 8 bytes long",
                            },
                        ));
                    }
                    iface.offset_sec = u64_at(value, 0, be) as i64;
                }
                _ => {}
            }
            Ok(())
        })?;
        self.interfaces.push(iface);
        self.names.push(name);
        Ok(())
    }

    /// The `if_name` of interface `id` of the current section.
    pub(super) fn interface_name(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize)?.as_deref()
    }

    /// How many interfaces the current section has declared so far.
    pub(super) fn interface_count(&self) -> usize {
        self.interfaces.len()
    }

    /// Looks up an interface by id; the fault points at the id field.
    fn iface(&self, id: u32, at: u64) -> Result<Interface, Fault> {
        self.interfaces.get(id as usize).copied().ok_or_else(|| {
            Fault::new(
                at,
                CaptureErrorKind::UnknownInterface {
                    id,
                    count: self.interfaces.len(),
                },
            )
        })
    }

    /// An enhanced packet block, or the obsolete packet block (type 2) which
    /// differs only in a 16-bit interface id followed by a drop count.
    fn packet(&self, ty: u32, content: &[u8], base: u64) -> Result<Meta, Fault> {
        let be = self.big_endian;
        let name = block_name(ty);
        let id = if ty == BT_EPB {
            u32_at(content, 0, be)
        } else {
            u32::from(u16_at(content, 0, be))
        };
        let iface = self.iface(id, base)?;
        let raw_ts = (u64::from(u32_at(content, 4, be)) << 32) | u64::from(u32_at(content, 8, be));
        let caplen = u32_at(content, 12, be);
        let orig_len = u32_at(content, 16, be);
        if caplen > MAX_RECORD_LEN {
            return Err(Fault::new(
                base + 12,
                CaptureErrorKind::RecordTooLarge {
                    len: u64::from(caplen),
                    max: MAX_RECORD_LEN,
                },
            ));
        }
        let n = caplen as usize;
        let avail = content.len() - 20;
        if n > avail {
            return Err(Fault::new(
                base + 12,
                CaptureErrorKind::BlockOverrun {
                    what: if ty == BT_EPB {
                        "enhanced packet block packet data"
                    } else {
                        "packet block packet data"
                    },
                    need: n as u64,
                    avail: avail as u64,
                },
            ));
        }
        let opts_at = (20 + n.next_multiple_of(4)).min(content.len());
        walk_options(
            &content[opts_at..],
            base + opts_at as u64,
            be,
            name,
            |_, _, _| Ok(()),
        )?;
        Ok(Meta {
            ts_ns: iface.ts_ns(raw_ts),
            interface: id,
            orig_len,
            link_type: iface.link_type,
            data: 20..20 + n,
        })
    }

    /// A simple packet block: original length, then data, captured length
    /// implied by the block length and the interface's snaplen. It has no
    /// timestamp: `ts_ns` is 0, as libpcap reports it.
    fn simple_packet(&self, content: &[u8], base: u64, start: u64) -> Result<Meta, Fault> {
        let iface = self.iface(0, start)?;
        let orig_len = u32_at(content, 0, self.big_endian);
        let mut n = (content.len() - 4).min(orig_len as usize);
        if iface.snaplen != 0 {
            n = n.min(iface.snaplen as usize);
        }
        if n > MAX_RECORD_LEN as usize {
            return Err(Fault::new(
                base,
                CaptureErrorKind::RecordTooLarge {
                    len: n as u64,
                    max: MAX_RECORD_LEN,
                },
            ));
        }
        Ok(Meta {
            ts_ns: 0,
            interface: 0,
            orig_len,
            link_type: iface.link_type,
            data: 4..4 + n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsresol_forms() {
        assert_eq!(units_per_sec(6), Some(1_000_000));
        assert_eq!(units_per_sec(9), Some(1_000_000_000));
        assert_eq!(units_per_sec(19), Some(10u64.pow(19)));
        assert_eq!(units_per_sec(20), None);
        assert_eq!(units_per_sec(0x80 | 20), Some(1 << 20));
        assert_eq!(units_per_sec(0x80 | 63), Some(1 << 63));
        assert_eq!(units_per_sec(0x80 | 64), None);
        assert_eq!(units_per_sec(0xff), None);
    }

    fn iface(units: u64, offset_sec: i64) -> Interface {
        Interface {
            link_type: LinkType::Ethernet,
            snaplen: 0,
            units_per_sec: units,
            offset_sec,
        }
    }

    #[test]
    fn timestamps_scale_and_saturate() {
        assert_eq!(iface(1_000_000, 0).ts_ns(1_500_000), 1_500_000_000);
        assert_eq!(iface(NS_PER_SEC, 0).ts_ns(7), 7);
        // 2^-20 s units: 2^20 ticks is one second, one tick is 953.67 ns.
        assert_eq!(iface(1 << 20, 0).ts_ns(1 << 20), NS_PER_SEC);
        assert_eq!(iface(1 << 20, 0).ts_ns(3), 2_861);
        // Picoseconds truncate to nanoseconds.
        assert_eq!(iface(10u64.pow(12), 0).ts_ns(1_999), 1);
        assert_eq!(iface(1_000_000, 10).ts_ns(0), 10 * NS_PER_SEC);
        assert_eq!(iface(1_000_000, -10).ts_ns(0), 0);
        assert_eq!(iface(1, 0).ts_ns(u64::MAX), u64::MAX);
    }

    #[test]
    fn options_must_fit() {
        // code 2 (comment), len 3, value "abc" + 1 pad byte; then endofopt.
        let ok = [2, 0, 3, 0, b'a', b'b', b'c', 0, 0, 0, 0, 0];
        let mut seen = Vec::new();
        walk_options(&ok, 100, false, "x", |c, v, at| {
            seen.push((c, v.to_vec(), at));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(2, b"abc".to_vec(), 100)]);

        // The padding of the value is missing.
        let f = walk_options(&ok[..7], 100, false, "x", |_, _, _| Ok(())).unwrap_err();
        assert_eq!(f.offset, 100);
        assert!(matches!(
            f.kind,
            CaptureErrorKind::OptionOverrun {
                code: Some(2),
                need: 8,
                avail: 7,
                ..
            }
        ));

        // Two stray bytes after an option.
        let f = walk_options(&ok[..10], 100, false, "x", |_, _, _| Ok(())).unwrap_err();
        assert_eq!(f.offset, 108);
        assert!(matches!(
            f.kind,
            CaptureErrorKind::OptionOverrun {
                code: None,
                need: 4,
                avail: 2,
                ..
            }
        ));
    }
}
