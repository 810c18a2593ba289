//! The frame codec: 4-byte big-endian length prefix + [`RemotingCommand`].

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::command::RemotingCommand;
use crate::error::ProtocolError;

/// Java's `com.rocketmq.remoting.frameMaxLength` default: 16 MiB including the length prefix.
pub const DEFAULT_MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

/// A `tokio_util` codec turning bytes into [`RemotingCommand`]s and back.
///
/// A decode error is fatal for the connection (as in Java, which closes the channel): the
/// stream position is unknown afterwards.
///
/// ```
/// use bytes::BytesMut;
/// use tokio_util::codec::{Decoder, Encoder};
/// use rocketmq_actor::protocol::{codec::RemotingCodec, command::RemotingCommand};
///
/// let mut codec = RemotingCodec::default();
/// let mut wire = BytesMut::new();
/// codec.encode(RemotingCommand::request(34).with_opaque(9), &mut wire).unwrap();
/// let decoded = codec.decode(&mut wire).unwrap().unwrap();
/// assert_eq!(decoded.opaque, 9);
/// assert!(wire.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct RemotingCodec {
    max_frame_len: usize,
}

impl RemotingCodec {
    /// A codec refusing frames whose total size (length prefix included) exceeds
    /// `max_frame_len`, in both directions.
    pub fn new(max_frame_len: usize) -> Self {
        RemotingCodec { max_frame_len }
    }

    /// The configured frame limit.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }
}

impl Default for RemotingCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, ProtocolError> {
        let Some(prefix) = src.get(..4) else {
            return Ok(None);
        };
        let length = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let length = usize::try_from(length)
            .map_err(|_| ProtocolError::InvalidFrame(format!("negative frame length {length}")))?;
        let total = length + 4;
        if total > self.max_frame_len {
            return Err(ProtocolError::FrameTooLarge {
                len: total,
                limit: self.max_frame_len,
            });
        }
        if length < 4 {
            return Err(ProtocolError::InvalidFrame(format!(
                "frame length {length} cannot hold the 4-byte header length field"
            )));
        }
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(total).freeze();
        frame.advance(4);
        RemotingCommand::decode(frame).map(Some)
    }
}

impl Encoder<&RemotingCommand> for RemotingCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: &RemotingCommand, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let start = dst.len();
        item.encode(dst)?;
        let total = dst.len() - start;
        if total > self.max_frame_len {
            dst.truncate(start);
            return Err(ProtocolError::FrameTooLarge {
                len: total,
                limit: self.max_frame_len,
            });
        }
        Ok(())
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        Encoder::<&RemotingCommand>::encode(self, &item, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, Bytes};
    use proptest::prelude::*;

    fn frame_of(command: &RemotingCommand) -> Vec<u8> {
        let mut wire = BytesMut::new();
        RemotingCodec::default().encode(command, &mut wire).unwrap();
        wire.to_vec()
    }

    fn sample(opaque: i32) -> RemotingCommand {
        RemotingCommand::request(11)
            .with_opaque(opaque)
            .with_ext("topic", "TopicTest")
            .with_body(Bytes::from(vec![7u8; 100]))
    }

    #[test]
    fn byte_by_byte_feeding_yields_the_frame_only_when_complete() {
        let wire = frame_of(&sample(3));
        let mut codec = RemotingCodec::default();
        let mut buf = BytesMut::new();
        for (i, byte) in wire.iter().enumerate() {
            buf.put_u8(*byte);
            let decoded = codec.decode(&mut buf).unwrap();
            if i + 1 < wire.len() {
                assert!(decoded.is_none(), "decoded early at byte {i}");
            } else {
                assert_eq!(decoded.unwrap(), sample(3));
            }
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn two_frames_in_one_buffer_decode_in_order() {
        let mut wire = frame_of(&sample(1));
        wire.extend(frame_of(&sample(2)));
        wire.extend_from_slice(&[0, 0]); // start of a third frame
        let mut buf = BytesMut::from(&wire[..]);
        let mut codec = RemotingCodec::default();
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap().opaque, 1);
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap().opaque, 2);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert_eq!(&buf[..], &[0, 0]);
    }

    #[test]
    fn oversize_length_is_frame_too_large_before_the_body_arrives() {
        let mut codec = RemotingCodec::new(1024);
        let mut buf = BytesMut::new();
        buf.put_i32(1021); // 1021 + 4 > 1024
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::FrameTooLarge {
                len: 1025,
                limit: 1024
            })
        ));
        let mut default_codec = RemotingCodec::default();
        let mut buf = BytesMut::new();
        buf.put_i32(16 * 1024 * 1024);
        assert!(matches!(
            default_codec.decode(&mut buf),
            Err(ProtocolError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn exactly_the_limit_is_accepted() {
        let command = RemotingCommand::request(10);
        let total = frame_of(&command).len();
        let mut codec = RemotingCodec::new(total);
        let mut buf = BytesMut::new();
        codec.encode(&command, &mut buf).unwrap();
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap(), command);
        let mut smaller = RemotingCodec::new(total - 1);
        let mut out = BytesMut::new();
        assert!(matches!(
            smaller.encode(&command, &mut out),
            Err(ProtocolError::FrameTooLarge { .. })
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn negative_and_tiny_lengths_are_invalid_frames() {
        let mut codec = RemotingCodec::default();
        let mut buf = BytesMut::new();
        buf.put_i32(-1);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::InvalidFrame(_))
        ));
        let mut buf = BytesMut::new();
        buf.put_i32(3);
        buf.put_slice(&[0, 0, 0]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::InvalidFrame(_))
        ));
    }

    #[test]
    fn header_length_beyond_the_frame_is_an_error() {
        let mut codec = RemotingCodec::default();
        let mut buf = BytesMut::new();
        buf.put_i32(8);
        buf.put_u32(5); // JSON, header length 5 but only 4 bytes follow
        buf.put_slice(b"{}  ");
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::InvalidFrame(_))
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut codec = RemotingCodec::new(4096);
            let mut buf = BytesMut::from(&bytes[..]);
            // Keep decoding until the codec wants more bytes or reports an error.
            while let Ok(Some(_)) = codec.decode(&mut buf) {}
        }

        #[test]
        fn arbitrary_bytes_after_a_valid_prefix_never_panic(
            header_len in 0u32..64,
            ser in 0u8..3,
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut buf = BytesMut::new();
            buf.put_i32(4 + tail.len() as i32);
            buf.put_u32((u32::from(ser) << 24) | header_len);
            buf.put_slice(&tail);
            let _ = RemotingCodec::default().decode(&mut buf);
        }
    }
}
