//! The protobuf codec of the server's services: tonic's prost codec, except that a message
//! that does not decode is INVALID_ARGUMENT (the client sent bad input, like a 400), not
//! INTERNAL. prost's message names the field it failed on (`JobSpec.priority: invalid
//! wire type ...`), which the status message keeps.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, ProstCodec};
use tonic::Status;

/// Used by the generated service code (`codec_path` in build.rs).
#[derive(Debug, Clone)]
pub struct ServerCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ServerCodec<T, U> {
    fn default() -> Self {
        ServerCodec(PhantomData)
    }
}

impl<T, U> Codec for ServerCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = InvalidArgumentDecoder<<ProstCodec<T, U> as Codec>::Decoder>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

/// Wraps a decoder, turning its failures into INVALID_ARGUMENT.
pub struct InvalidArgumentDecoder<D>(D);

impl<D: Decoder<Error = Status>> Decoder for InvalidArgumentDecoder<D> {
    type Item = D::Item;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        self.0.decode(src).map_err(|s| {
            Status::invalid_argument(format!(
                "invalid_argument: malformed protobuf: {}",
                s.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
