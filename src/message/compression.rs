//! Body compression as Java producers do it: zlib, LZ4 frame, zstd (protocol.md §3.4).

use std::io::{Read, Write};

use super::sys_flag;
use crate::error::ProtocolError;

/// Largest body [`decompress`] will produce; bigger output is treated as a zip bomb.
pub const MAX_DECOMPRESSED_LEN: usize = 64 * 1024 * 1024;

/// A body compression algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressionType {
    /// RFC 1950 zlib stream (Java `Deflater`); type 0 (pre-5.x producers) or 3.
    Zlib,
    /// LZ4 frame format (lz4-java `LZ4FrameOutputStream`); type 1.
    Lz4,
    /// zstd frame; type 2.
    Zstd,
}

impl CompressionType {
    /// The algorithm named by bits 8–10 of a `SYSFLAG` (`None` for unknown types 4–7).
    ///
    /// ```
    /// use rocketmq_actor::message::CompressionType;
    /// assert_eq!(CompressionType::from_sys_flag(0x1), Some(CompressionType::Zlib));
    /// assert_eq!(CompressionType::from_sys_flag(0x101), Some(CompressionType::Lz4));
    /// assert_eq!(CompressionType::from_sys_flag(0x401), None);
    /// ```
    pub fn from_sys_flag(flag: i32) -> Option<Self> {
        match (flag & sys_flag::COMPRESSION_TYPE_MASK) >> 8 {
            0 | 3 => Some(CompressionType::Zlib),
            1 => Some(CompressionType::Lz4),
            2 => Some(CompressionType::Zstd),
            _ => None,
        }
    }

    /// The `SYSFLAG` bits a producer sets for this algorithm (including `COMPRESSED`).
    pub fn sys_flag_bits(self) -> i32 {
        let kind = match self {
            CompressionType::Zlib => sys_flag::COMPRESSION_ZLIB,
            CompressionType::Lz4 => sys_flag::COMPRESSION_LZ4,
            CompressionType::Zstd => sys_flag::COMPRESSION_ZSTD,
        };
        kind | sys_flag::COMPRESSED
    }
}

fn compress_error(kind: CompressionType, err: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::Decompress(format!("{kind:?} compression failed: {err}"))
}

/// Compresses `data`. `level` applies to zlib (0–9, Java producers use 5); LZ4 and zstd use
/// their fast default.
///
/// ```
/// use rocketmq_actor::message::{compress, decompress, CompressionType};
/// let packed = compress(CompressionType::Zlib, b"hello hello hello", 5).unwrap();
/// assert_eq!(decompress(CompressionType::Zlib, &packed).unwrap(), b"hello hello hello");
/// ```
pub fn compress(kind: CompressionType, data: &[u8], level: u32) -> Result<Vec<u8>, ProtocolError> {
    match kind {
        CompressionType::Zlib => {
            let mut encoder = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(data.len() / 2 + 16),
                flate2::Compression::new(level.min(9)),
            );
            encoder
                .write_all(data)
                .map_err(|e| compress_error(kind, e))?;
            encoder.finish().map_err(|e| compress_error(kind, e))
        }
        CompressionType::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            encoder
                .write_all(data)
                .map_err(|e| compress_error(kind, e))?;
            encoder.finish().map_err(|e| compress_error(kind, e))
        }
        CompressionType::Zstd => Ok(ruzstd::encoding::compress_to_vec(
            data,
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
    }
}

/// Decompresses `data`, refusing output above [`MAX_DECOMPRESSED_LEN`].
pub fn decompress(kind: CompressionType, data: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    decompress_with_limit(kind, data, MAX_DECOMPRESSED_LEN)
}

/// Decompresses `data`, refusing output above `limit` bytes.
pub fn decompress_with_limit(
    kind: CompressionType,
    data: &[u8],
    limit: usize,
) -> Result<Vec<u8>, ProtocolError> {
    let failed = |e: &dyn std::fmt::Display| ProtocolError::Decompress(format!("{kind:?}: {e}"));
    match kind {
        CompressionType::Zlib => read_limited(flate2::read::ZlibDecoder::new(data), limit)
            .map_err(|e| failed(&e))?
            .ok_or_else(|| too_big(limit)),
        CompressionType::Lz4 => read_limited(lz4_flex::frame::FrameDecoder::new(data), limit)
            .map_err(|e| failed(&e))?
            .ok_or_else(|| too_big(limit)),
        CompressionType::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| failed(&e))?;
            read_limited(decoder, limit)
                .map_err(|e| failed(&e))?
                .ok_or_else(|| too_big(limit))
        }
    }
}

fn too_big(limit: usize) -> ProtocolError {
    ProtocolError::Decompress(format!("decompressed body exceeds {limit} bytes"))
}

/// Reads everything, or `None` when there is more than `limit` bytes.
fn read_limited(reader: impl Read, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out)?;
    Ok((out.len() <= limit).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [CompressionType; 3] = [
        CompressionType::Zlib,
        CompressionType::Lz4,
        CompressionType::Zstd,
    ];

    #[test]
    fn every_algorithm_round_trips() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        for kind in ALL {
            let packed = compress(kind, &data, 5).unwrap();
            assert!(packed.len() < data.len(), "{kind:?} did not compress");
            assert_eq!(decompress(kind, &packed).unwrap(), data, "{kind:?}");
        }
    }

    #[test]
    fn zlib_output_is_an_rfc1950_stream() {
        // Java's Deflater writes a 2-byte zlib header (CMF 0x78) and an Adler-32 trailer.
        let packed = compress(CompressionType::Zlib, b"abc", 5).unwrap();
        assert_eq!(packed[0], 0x78);
        assert_eq!(&packed[packed.len() - 4..], &[0x02, 0x4d, 0x01, 0x27]);
    }

    #[test]
    fn lz4_and_zstd_outputs_carry_their_frame_magic() {
        let lz4 = compress(CompressionType::Lz4, b"abc", 0).unwrap();
        assert_eq!(&lz4[..4], &[0x04, 0x22, 0x4D, 0x18]);
        let zstd = compress(CompressionType::Zstd, b"abc", 0).unwrap();
        assert_eq!(&zstd[..4], &[0x28, 0xB5, 0x2F, 0xFD]);
    }

    #[test]
    fn output_above_the_limit_is_refused() {
        let data = vec![0u8; 100_000];
        for kind in ALL {
            let packed = compress(kind, &data, 9).unwrap();
            assert!(matches!(
                decompress_with_limit(kind, &packed, 99_999),
                Err(ProtocolError::Decompress(_))
            ));
            assert_eq!(
                decompress_with_limit(kind, &packed, 100_000).unwrap().len(),
                100_000
            );
        }
    }

    #[test]
    fn garbage_is_an_error() {
        for kind in ALL {
            assert!(
                decompress(kind, b"definitely not compressed").is_err(),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn sys_flag_bits_map_back_to_the_type() {
        for kind in ALL {
            assert_eq!(
                CompressionType::from_sys_flag(kind.sys_flag_bits()),
                Some(kind)
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            for kind in ALL {
                let _ = decompress_with_limit(kind, &data, 1 << 20);
            }
        }

        #[test]
        fn corrupted_frames_never_panic(
            seed in proptest::collection::vec(any::<u8>(), 1..200),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            for kind in ALL {
                let mut packed = compress(kind, &seed, 5).unwrap();
                for (at, byte) in &flips {
                    let len = packed.len();
                    packed[at % len] ^= byte | 1;
                }
                let _ = decompress_with_limit(kind, &packed, 1 << 20);
            }
        }
    }
}
