//! One entry's payload as the driver sees it: the cubin or PTX text, unpacked when the entry
//! stores it compressed. Listing never needs this (headers are never compressed); the rules
//! read a payload only for a module whose verdict depends on what it holds, so a library is
//! not unpacked to be listed.
//!
//! Compression (measured with `fatbinary` 13.5 and on NVIDIA's libraries, `docs/fatbin.md`):
//! flag 0x2000 is an LZ4 block of the header's `compressed size` bytes; flag 0x8000 a
//! Zstandard frame. Either unpacks to the header's `uncompressed size`, which bounds what is
//! allocated: an LZ4 block cannot unpack to more than 255 times its size (each byte of a match
//! length adds at most 255), and the Zstandard decoder writes into room reserved for that
//! size, so memory follows the bytes really produced. A part of a CUDA 13 concatenated entry is cut
//! out of its outer entry's unpacked payload.

use super::parse::bytes_at;
use super::{Compression, Entry};

/// The most an entry may unpack to (a cubin or PTX of NVIDIA's largest libraries is a few
/// MiB): a header claiming more is refused rather than believed.
pub const MAX_UNPACKED: u64 = 1 << 30;

/// Why a payload could not be read, in one line: what is wrong, the entry header's offset in
/// the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the payload of the entry at byte {1}: {0}")]
pub struct PayloadError(pub PayloadFault, pub u64);

/// What is wrong with an entry's payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadFault {
    /// The stored bytes run past the end of the file.
    #[error("runs past the end of the file")]
    PastEnd,
    /// The compressed size exceeds the stored bytes.
    #[error("its compressed size {0} exceeds what is stored")]
    CompressedSize(u32),
    /// The unpacked size is over [`MAX_UNPACKED`].
    #[error("it claims to unpack to {0} bytes, over the {max} this reader allows", max = MAX_UNPACKED)]
    TooLarge(u64),
    /// Both compression flags are set.
    #[error("both compression flags are set, a layout NVIDIA's tools were not seen to write")]
    BothFlags,
    /// An LZ4 block too small for the size claimed: the block's size, the size claimed.
    #[error("an LZ4 block of {0} bytes cannot unpack to the {1} its header claims")]
    Lz4Impossible(usize, usize),
    /// The LZ4 block does not decode (the decoder's one line).
    #[error("its LZ4 block does not unpack: {0}")]
    Lz4(String),
    /// The LZ4 block decodes to another size: the size it unpacked to, the size claimed.
    #[error("its LZ4 block unpacks to {0} bytes, not the {1} its header claims")]
    Lz4Length(usize, usize),
    /// The Zstandard frame does not decode (the decoder's one line).
    #[error("its Zstandard frame does not unpack: {0}")]
    Zstd(String),
    /// The Zstandard frame decodes to another size: whether it unpacked to more than claimed
    /// (reading stopped there), the size it unpacked to (at most the size claimed), the size
    /// claimed.
    #[error(
        "its Zstandard frame unpacks to {more}{1} bytes, not the {2} its header claims",
        more = if *.0 { "more than " } else { "" }
    )]
    ZstdLength(bool, usize, usize),
    /// A CUDA 13 part lies outside its outer entry's payload.
    #[error("its part lies outside the unpacked payload")]
    PartOutside,
}

/// The payload of `entry` in `data` (the whole file the entry was read from), unpacked into
/// `room` when stored compressed. One `room` serves a file's payloads one after another: it
/// grows to the largest and its pages are faulted in a few times, where a buffer per payload
/// faulted fresh pages in for each (about a fifth of a verdict's CPU on cuDNN's precompiled
/// engines, whose verdict unpacks 565 MB).
pub fn payload<'a>(
    data: &'a [u8],
    entry: &Entry,
    room: &'a mut Vec<u8>,
) -> Result<&'a [u8], PayloadError> {
    let bad = |fault: PayloadFault| PayloadError(fault, entry.offset);
    let s = entry.stored;
    let stored = bytes_at(data, s.offset, s.size).ok_or_else(|| bad(PayloadFault::PastEnd))?;
    let whole: &'a [u8] = match entry.compression {
        Compression::None => stored,
        Compression::Lz4 | Compression::Zstd => {
            let packed = match s.compressed {
                0 => stored,
                n => stored
                    .get(..n as usize)
                    .ok_or_else(|| bad(PayloadFault::CompressedSize(n)))?,
            };
            if s.unpacked > MAX_UNPACKED {
                return Err(bad(PayloadFault::TooLarge(s.unpacked)));
            }
            let unpacked = s.unpacked as usize;
            if entry.compression == Compression::Lz4 {
                lz4(packed, unpacked, room)
            } else {
                zstd(packed, unpacked, room)
            }
            .map_err(bad)?;
            &room[..unpacked]
        }
        Compression::Unknown => return Err(bad(PayloadFault::BothFlags)),
    };
    let Some(part) = s.part else {
        return Ok(whole);
    };
    bytes_at(whole, part.offset, part.size).ok_or_else(|| bad(PayloadFault::PartOutside))
}

/// The first `n` bytes of `room`, which never shrinks. It grows as a fresh zeroed
/// allocation, whose pages are faulted in only as a decoder writes them, so a size a header
/// merely claims costs no memory; at least twofold (up to the largest payload allowed), so
/// that payloads of growing sizes fault their pages in a few times, not once each.
fn room_for(room: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if room.len() < n {
        let cap = MAX_UNPACKED as usize + 1;
        *room = vec![0; n.max(room.len().saturating_mul(2).min(cap))];
    }
    &mut room[..n]
}

/// An LZ4 block that must unpack to exactly `unpacked` bytes, into the start of `room`.
fn lz4(packed: &[u8], unpacked: usize, room: &mut Vec<u8>) -> Result<(), PayloadFault> {
    if unpacked > packed.len().saturating_mul(255).saturating_add(16) {
        return Err(PayloadFault::Lz4Impossible(packed.len(), unpacked));
    }
    let n = lz4_flex::block::decompress_into(packed, room_for(room, unpacked))
        .map_err(|e| PayloadFault::Lz4(e.to_string()))?;
    if n != unpacked {
        return Err(PayloadFault::Lz4Length(n, unpacked));
    }
    Ok(())
}

/// A Zstandard frame that must unpack to exactly `unpacked` bytes, into the start of `room`:
/// the first frame of `packed` (what follows it is not the payload's), unpacked into room for
/// one byte more, so that a larger frame stops there whatever room is left from before.
fn zstd(packed: &[u8], unpacked: usize, room: &mut Vec<u8>) -> Result<(), PayloadFault> {
    use zstd::zstd_safe::{self, zstd_sys::ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall};
    let fault = |code| PayloadFault::Zstd(zstd_safe::get_error_name(code).to_owned());
    let frame = zstd_safe::find_frame_compressed_size(packed).map_err(fault)?;
    // The library's results are sizes, or an error's code negated.
    let too_small = 0usize.wrapping_sub(ZSTD_error_dstSize_tooSmall as usize);
    let out = room_for(room, unpacked + 1);
    let got = match zstd_safe::DCtx::create().decompress(out, &packed[..frame]) {
        Ok(n) => n,
        Err(code) if code == too_small => unpacked + 1,
        Err(code) => return Err(fault(code)),
    };
    if got != unpacked {
        return Err(PayloadFault::ZstdLength(
            got > unpacked,
            got.min(unpacked),
            unpacked,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::parse::container_at;
    use crate::fatbin::parse::tests::{container, entry};

    /// An entry whose payload is `bytes`, stored with `flags` and the sizes given.
    fn packed(flags: u64, bytes: &[u8], compressed: u32, unpacked: u64) -> Vec<u8> {
        let mut e = entry(2, 90, 1, 8, 0x11 | flags, bytes.len());
        e[16..20].copy_from_slice(&compressed.to_le_bytes());
        e[56..64].copy_from_slice(&unpacked.to_le_bytes());
        e[64..].copy_from_slice(bytes);
        container(&[e])
    }

    fn first(c: &[u8]) -> Entry {
        container_at(c, 0, 0).unwrap().0.remove(0)
    }

    /// What is wrong with the payload of the first entry of `c`, if anything.
    fn fault(c: &[u8]) -> Result<Vec<u8>, PayloadFault> {
        payload(c, &first(c), &mut Vec::new())
            .map(<[u8]>::to_vec)
            .map_err(|e| e.0)
    }

    #[test]
    fn stored_payloads_are_borrowed_as_they_are() {
        let c = packed(0, b"\x7fELF-cubin", 0, 0);
        let mut room = Vec::new();
        let got = payload(&c, &first(&c), &mut room).unwrap();
        assert_eq!(got, b"\x7fELF-cubin");
        assert!(c.as_ptr_range().contains(&got.as_ptr()));
        assert!(room.is_empty());
    }

    #[test]
    fn lz4_and_zstd_payloads_unpack_to_their_claimed_size() {
        let text = b".version 8.8\n.target sm_90\n.entry k() { ret; }\n".repeat(20);
        let lz = lz4_flex::block::compress(&text);
        let mut stored = lz.clone();
        stored.resize(lz.len().next_multiple_of(8), 0); // fatbinary pads to 8
        let c = packed(0x2000, &stored, lz.len() as u32, text.len() as u64);
        assert_eq!(payload(&c, &first(&c), &mut Vec::new()).unwrap(), &text[..]);
        // A claim the block cannot meet is refused, never allocated blindly.
        let c = packed(0x2000, &stored, lz.len() as u32, 1 << 29);
        assert_eq!(
            fault(&c),
            Err(PayloadFault::Lz4Impossible(lz.len(), 1 << 29))
        );
        assert_eq!(
            PayloadFault::Lz4Impossible(3, 1000).to_string(),
            "an LZ4 block of 3 bytes cannot unpack to the 1000 its header claims"
        );
        assert_eq!(
            PayloadFault::Lz4Length(999, 1000).to_string(),
            "its LZ4 block unpacks to 999 bytes, not the 1000 its header claims"
        );
        let c = packed(0x2000, &stored, lz.len() as u32, text.len() as u64 - 1);
        assert!(matches!(
            payload(&c, &first(&c), &mut Vec::new()).map_err(|e| e.0),
            Err(PayloadFault::Lz4(_) | PayloadFault::Lz4Length(..))
        ));
    }

    /// A Zstandard frame written by the zstd command-line tool (`printf 'hello hello hello
    /// hello hello hello!\n' | zstd -19 -c`): the decoder is held to another encoder, not to
    /// itself; NVIDIA's frames are held to cuobjdump in elfkit/tests/fatbin_differential/.
    #[test]
    fn a_zstd_frame_that_claims_too_much_or_too_little_is_refused() {
        let frame: &[u8] = &[
            0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x68, 0x75, 0x00, 0x00, 0x40, 0x68, 0x65, 0x6c, 0x6c,
            0x6f, 0x20, 0x21, 0x0a, 0x01, 0x00, 0xb9, 0x4b, 0x11, 0xb7, 0x01, 0x7b, 0x8c,
        ];
        let text = b"hello hello hello hello hello hello!\n";
        let c = packed(0x8000, frame, frame.len() as u32, text.len() as u64);
        let mut room = Vec::new();
        assert_eq!(payload(&c, &first(&c), &mut room).unwrap(), &text[..]);
        // The room is reused: a shorter payload after a longer one is only its own bytes.
        let short = b"hello!\n";
        let lz = lz4_flex::block::compress(short);
        let s = packed(0x2000, &lz, lz.len() as u32, short.len() as u64);
        assert_eq!(payload(&s, &first(&s), &mut room).unwrap(), short);
        let c = packed(0x8000, frame, frame.len() as u32, 10);
        assert_eq!(fault(&c), Err(PayloadFault::ZstdLength(true, 10, 10)));
        let c = packed(0x8000, frame, frame.len() as u32, 100);
        assert_eq!(
            fault(&c),
            Err(PayloadFault::ZstdLength(false, text.len(), 100))
        );
        let c = packed(0x8000, b"not a frame at all", 18, 5);
        assert!(matches!(fault(&c), Err(PayloadFault::Zstd(_))));
        assert_eq!(
            PayloadFault::ZstdLength(true, 10, 10).to_string(),
            "its Zstandard frame unpacks to more than 10 bytes, not the 10 its header claims"
        );
    }

    /// Where a frame larger than its claim stops does not depend on what the room held
    /// before: a frame whose checksum is wrong past the claimed size is refused for its size,
    /// with a fresh room and with one a larger payload left, never decoded to its end.
    #[test]
    fn a_reused_room_decodes_no_further_than_the_claim() {
        let text = b"hello ".repeat(700);
        let mut frame = zstd::bulk::Compressor::new(3)
            .and_then(|mut c| c.include_checksum(true).and(c.compress(&text)))
            .unwrap();
        let end = frame.len() - 1;
        frame[end] ^= 0xff;
        let c = packed(0x8000, &frame, frame.len() as u32, 10);
        let too_long = Err(PayloadFault::ZstdLength(true, 10, 10));
        assert_eq!(fault(&c), too_long);
        let mut room = vec![0; 1 << 20];
        let got = payload(&c, &first(&c), &mut room).map(<[u8]>::to_vec);
        assert_eq!(got.map_err(|e| e.0), too_long);
        // Whole, the frame is refused for its checksum.
        let c = packed(0x8000, &frame, frame.len() as u32, text.len() as u64);
        assert!(matches!(fault(&c), Err(PayloadFault::Zstd(_))));
    }

    /// The resident memory of this process, in KiB.
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A size an LZ4 block claims, and fails at once to meet, is not made resident: the room
    /// grows as a fresh allocation, not by writing zeros over the claim.
    #[test]
    fn a_claim_an_lz4_block_fails_to_meet_costs_no_memory() {
        // A literal run whose length bytes never end: the decoder fails on its first token.
        let mut block = vec![0xf0];
        block.resize(2_200_000, 0xff);
        let c = packed(0x2000, &block, 0, 1 << 29);
        let mut room = Vec::new();
        let before = resident_kib();
        assert!(payload(&c, &first(&c), &mut room).is_err());
        let grown = resident_kib().saturating_sub(before);
        assert!(
            grown < 64 << 10,
            "a failed 512 MiB claim made {grown} KiB resident"
        );
    }

    /// The room doubles as it grows, but never past the largest payload allowed (its pages
    /// are not written here: only address space is taken).
    #[test]
    fn the_room_grows_twofold_up_to_the_cap() {
        let mut room = Vec::new();
        assert_eq!(room_for(&mut room, 100).len(), 100);
        room_for(&mut room, 101);
        assert_eq!(room.len(), 200);
        let mut room = vec![0; 3 << 28];
        room_for(&mut room, (3 << 28) + 1);
        assert_eq!(room.len() as u64, MAX_UNPACKED + 1);
    }

    #[test]
    fn claims_past_the_file_or_the_cap_are_refused() {
        let c = packed(0x2000, b"x", 9, 1);
        assert_eq!(fault(&c), Err(PayloadFault::CompressedSize(9)));
        let c = packed(0x8000, b"x", 1, MAX_UNPACKED + 1);
        assert_eq!(fault(&c), Err(PayloadFault::TooLarge(MAX_UNPACKED + 1)));
        assert_eq!(
            PayloadError(PayloadFault::TooLarge(MAX_UNPACKED + 1), 64).to_string(),
            "the payload of the entry at byte 64: it claims to unpack to 1073741825 bytes, over \
             the 1073741824 this reader allows"
        );
        let c = packed(0xa000, b"x", 1, 1);
        assert_eq!(fault(&c), Err(PayloadFault::BothFlags));
    }
}
